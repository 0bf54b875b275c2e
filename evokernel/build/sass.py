"""The instruction-level precision audit: the machine code (SASS) of a built extension, read for
instructions whose precision is below FP32.

    find_cuobjdump()              the cuobjdump to use, or None
    disassemble(path)             ``cuobjdump --dump-sass`` of a .so, .cubin or fatbin, as text
    audit_sass(text)              the below-FP32 instructions in SASS text (SassAudit)
    audit_build_dirs(dirs)        the audit of every extension (.so) in load_inline build folders
    sass_audit(dirs)              that audit as a build's (findings, flags), never raising
    classify(opcode, operands)    one instruction's (kind, precision), or None
    summarize(findings)           the findings as one line, for a verdict's detail

What counts (NVIDIA's CUDA Binary Utilities, "Instruction Set Reference", for sm_80 and sm_90;
checked on nvcc 13.1 output in tests/fixtures/sass/):

* tensor-core instructions: every ``HMMA`` and ``HGMMA`` (FP16 operands when the opcode names no
  other type, e.g. ``HMMA.16816.F32``; ``.BF16``, ``.TF32``, ``.E4M3``/``.E5M2`` name the
  others; the ``.F32`` after the shape is the accumulator), ``QGMMA`` (FP8), ``IMMA`` and
  ``IGMMA`` (int8, int4 with ``.S4``/``.U4``), ``BMMA``/``BGMMA`` (1 bit). No tensor core takes
  FP32 operands; ``DMMA`` (FP64) is not listed.
* conversions to a narrower format: ``F2F`` whose destination (its first type) is F16, BF16,
  TF32 or FP8, ``F2FP`` (packing two floats into a half pair; FP16 when no type is named),
  ``I2F.F16``/``I2F.BF16``; ``F2F.F32.F16`` and ``HADD2.F32`` (half data widened to FP32) are
  listed as "widen".
* packed half arithmetic: ``HADD2``, ``HFMA2``, ``HMUL2``, ``HMNMX2``, ``HSET2``, ``HSETP2``
  (BF16 with ``.BF16_V2``). ptxas also uses ``HFMA2.MMA Rd, -RZ, RZ, imm, imm`` to put a
  constant in a register in pure FP32 code: an H*2 instruction with no register source but RZ
  is therefore not listed.

Policy (evokernel.engine.evaluator): findings are evidence, not a verdict. The gate's numbers
decide precision; a kernel whose output meets the FP32 bound is accepted and flagged
(``sass_below_fp32:...``), because a narrow instruction may sit on a path the problem never
takes (a half overload, a tail case), and rejecting on its presence would reject good kernels.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from evokernel.build.demangle import demangle
from evokernel.errors import EvokernelError
from evokernel.records import PrecisionFinding

#: Seconds one cuobjdump may take (a large extension disassembles in about a second).
DISASSEMBLE_TIMEOUT_S = 120.0

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(?P<name>\S+)\s*$")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?"
                          r"(?P<op>[A-Z][A-Za-z0-9_.]*)(?P<args>[^;]*);")
_TYPES = {"F16": "fp16", "BF16": "bf16", "BF16_V2": "bf16", "TF32": "tf32", "E4M3": "fp8",
          "E5M2": "fp8", "E2M1": "fp4", "S8": "int8", "U8": "int8", "S4": "int4", "U4": "int4"}
_NARROW = {"F16", "BF16", "TF32", "E4M3", "E5M2", "E2M1"}
_HALF_ARITH = ("HADD2", "HFMA2", "HMUL2", "HMNMX2", "HSET2", "HSETP2")
_REGISTER = re.compile(r"\bU?R(?:\d+|Z)\b")


class SassUnavailable(EvokernelError):
    """The SASS could not be read: no cuobjdump, or it failed on the file (the message says
    which and why)."""


@dataclass(frozen=True)
class SassAudit:
    """The audit of some SASS text.

    kernels: the kernel names seen (demangled); findings: one PrecisionFinding per (kernel,
    opcode, kind), in order of first appearance; instructions: how many instructions were read.
    ``has_sass`` is False when the text held no kernel (an extension with PTX only, or no
    device code): then the audit says nothing either way.
    """

    kernels: tuple[str, ...] = ()
    findings: tuple[PrecisionFinding, ...] = ()
    instructions: int = 0

    @property
    def has_sass(self) -> bool:
        return bool(self.kernels)

    @property
    def precisions(self) -> tuple[str, ...]:
        """The narrow formats found, sorted, widening-only ones left out."""
        return tuple(sorted({f.precision for f in self.findings if f.kind != "widen"}))


def find_cuobjdump() -> str | None:
    """The cuobjdump to run: ``$EVOKERNEL_CUOBJDUMP``, then ``$CUDA_HOME/bin``, the PATH, and
    the copy Triton's package ships (``triton/backends/nvidia/bin``, which runs without a GPU);
    None when there is none."""
    env = os.environ.get("EVOKERNEL_CUOBJDUMP")
    if env:
        return env
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    places = [Path(cuda) / "bin" / "cuobjdump"]
    found = shutil.which("cuobjdump")
    if found:
        places.append(Path(found))
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.origin:
        places.append(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    return next((str(p) for p in places if p.is_file() and os.access(p, os.X_OK)), None)


def disassemble(path: str | Path, tool: str | None = None,
                timeout_s: float = DISASSEMBLE_TIMEOUT_S) -> str:
    """``cuobjdump --dump-sass PATH`` (a .so with embedded device code, a .cubin or a fatbin).

    Returns: its text; "" when the file holds no device code.
    Raises: SassUnavailable naming the file: no cuobjdump (``tool`` None and find_cuobjdump
        finds none), or it failed or timed out (its error output in the message).
    """
    path = Path(path)
    tool = tool or find_cuobjdump()
    if tool is None:
        raise SassUnavailable(f"{path}: no cuobjdump found (set EVOKERNEL_CUOBJDUMP, put the "
                              "CUDA toolkit's bin on the PATH, or install triton)")
    try:
        done = subprocess.run([tool, "--dump-sass", str(path)], capture_output=True, text=True,
                              timeout=timeout_s, errors="replace")
    except subprocess.TimeoutExpired as e:
        raise SassUnavailable(f"{path}: cuobjdump took over {timeout_s:g} s") from e
    except OSError as e:
        raise SassUnavailable(f"{path}: cannot run {tool}: {e.strerror}") from e
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip()
        if "does not contain device code" in err:
            return ""
        raise SassUnavailable(f"{path}: cuobjdump exited with status {done.returncode}: "
                              f"{err[-500:]}")
    return done.stdout


def classify(opcode: str, operands: str = "") -> tuple[str, str] | None:
    """(kind, precision) of one SASS instruction below FP32, None for any other.

    Args: opcode with its modifiers ("HMMA.16816.F32.BF16"); operands: the text after it
        (used to tell a constant move with HFMA2 from arithmetic).
    """
    base, *mods = opcode.split(".")
    named = [_TYPES[m] for m in mods if m in _TYPES]
    if base in ("HMMA", "HGMMA"):
        narrow = [m for m in named if m != "fp16"]
        return "tensor_core", narrow[0] if narrow else "fp16"
    if base == "QGMMA":
        return "tensor_core", "fp8"
    if base in ("IMMA", "IGMMA"):
        return "tensor_core", "int4" if "int4" in named else "int8"
    if base in ("BMMA", "BGMMA"):
        return "tensor_core", "b1"
    if base == "F2F" and mods:
        types = [m for m in mods if m in _TYPES or m in ("F32", "F64")]
        if types and types[0] in _NARROW:
            return "conversion", _TYPES[types[0]]
        if len(types) > 1 and types[1] in _NARROW:
            return "widen", _TYPES[types[1]]
        return None
    if base == "F2FP":
        return "conversion", named[0] if named else "fp16"
    if base == "I2F" and any(m in ("F16", "BF16") for m in mods):
        return "conversion", next(_TYPES[m] for m in mods if m in ("F16", "BF16"))
    if base in _HALF_ARITH:
        sources = _REGISTER.findall(operands.split(",", 1)[1]) if "," in operands else []
        if all(r in ("RZ", "URZ") for r in sources):
            return None                    # a constant put in a register, no half data
        precision = "bf16" if "bf16" in named else "fp16"
        return ("widen" if "F32" in mods else "half_arith"), precision
    return None


def audit_sass(text: str, *, demangle_names: bool = True) -> SassAudit:
    """The below-FP32 instructions in ``cuobjdump --dump-sass`` text (see the module docstring
    for what counts). Lines outside a ``Function :`` section and malformed lines are ignored;
    never raises. A kernel present for several arches is counted once per section."""
    kernels: list[str] = []
    counts: Counter[tuple[str, str, str, str]] = Counter()
    kernel, total = "?", 0
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            kernel = m.group("name")
            kernels.append(kernel)
            continue
        m = _INSTRUCTION.search(line)
        if not m:
            continue
        total += 1
        found = classify(m.group("op"), m.group("args"))
        if found is not None:
            counts[(kernel, m.group("op"), *found)] += 1
    raw = list(dict.fromkeys(kernels + [k for k, *_ in counts]))
    names = dict(zip(raw, demangle(raw) if demangle_names else raw))
    findings = tuple(PrecisionFinding(names[k], op, kind, precision, n)
                     for (k, op, kind, precision), n in counts.items())
    return SassAudit(tuple(names[k] for k in dict.fromkeys(kernels)), findings, total)


def audit_build_dirs(build_dirs: Iterable[str | Path], tool: str | None = None) -> SassAudit:
    """The audit of every extension (``*.so``) in ``build_dirs`` (load_inline build folders), or
    of every cubin where a folder holds none (NVRTC builds, evokernel.nvrtc.compiler), merged.
    Raises: SassUnavailable (see disassemble), also when a folder holds neither."""
    kernels: list[str] = []
    findings: list[PrecisionFinding] = []
    total = 0
    for d in build_dirs:
        libraries = sorted(Path(d).glob("*.so")) or sorted(Path(d).glob("*.cubin"))
        if not libraries:
            raise SassUnavailable(f"{d}: no built extension (.so) or cubin in the build folder")
        for lib in libraries:
            one = audit_sass(disassemble(lib, tool))
            kernels += one.kernels
            findings += one.findings
            total += one.instructions
    return SassAudit(tuple(kernels), tuple(findings), total)


def sass_audit(build_dirs: Sequence[str]
               ) -> tuple[tuple[PrecisionFinding, ...], tuple[str, ...]]:
    """The SASS audit of a successful build's extension folders, as (findings, flags): the flag
    ``sass_below_fp32:P1,P2`` names the narrow formats found; ``sass_audit: no instruction
    below FP32 ...`` when none was; ``sass_audit_unavailable: why``
    when the SASS could not be read; ``sass_audit: no SASS ...`` when the extensions hold none
    (PTX only). Nothing for a build without extensions (no load_inline). Never raises."""
    if not build_dirs:
        return (), ()
    try:
        audit = audit_build_dirs(build_dirs)
    except SassUnavailable as e:
        return (), (f"sass_audit_unavailable: {e}",)
    if not audit.has_sass:
        return (), ("sass_audit: no SASS in the extension (PTX only?), nothing audited",)
    if not audit.findings:
        return (), (f"sass_audit: no instruction below FP32 in {len(audit.kernels)} kernel(s)",)
    formats = sorted({f.precision for f in audit.findings})
    return audit.findings, (f"sass_below_fp32:{','.join(formats)}",)


def with_audit(detail: str, findings: Sequence[PrecisionFinding]) -> str:
    """A verdict's ``detail`` with the audit's findings appended as evidence ("" findings: the
    detail unchanged). The gate's numbers stay the judge; see the module docstring."""
    if not findings:
        return detail
    note = f"SASS audit (evidence; the gate's numbers decide): below FP32: {summarize(findings)}"
    return f"{detail}; {note}" if detail else note


def audit_text(findings: Sequence[PrecisionFinding], flags: Sequence[str]) -> str | None:
    """The audit recorded in a result (its ``precision_audit`` and flags) as one line for
    ``show``, ``report`` and exported packages: "below FP32 (evidence; ...): kernel: OPCODE xN
    (kind, format); ...", "no instruction below FP32 in N kernel(s)", "not available: why";
    None when the result records no audit (an older run, a failed build)."""
    if findings:
        return f"below FP32 (evidence; the gate's numbers decide): {summarize(findings)}"
    for f in flags:
        if f.startswith("sass_audit:"):
            return f.split(":", 1)[1].strip()
        if f.startswith("sass_audit_unavailable:"):
            return "not available: " + f.split(":", 1)[1].strip()
    return None


def summarize(findings: Sequence[PrecisionFinding], limit: int = 6) -> str:
    """The findings as one line: "kernel: OPCODE xN (kind, precision), ..." (at most ``limit``
    entries, then how many more); "" for none."""
    parts = [f"{f.kernel}: {f.opcode} x{f.count} ({f.kind.replace('_', ' ')}, {f.precision})"
             for f in findings]
    more = f", and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more
