"""NVRTC compiles of the NVRTC candidate form: options, cache keys, cubins and their build folders.

``compile_spec`` compiles one ``compile_kernels`` call's source to a cubin with NVRTC
(evokernel.nvrtc.program, in this process: no host compiler, no GPU, no torch) for the arch
of the GPU in use, with ``ptxas -v`` (its report becomes the kernels' KernelResources, as for
load_inline builds: evokernel.build.ptxas), and with each kernel's signature probe (see
evokernel.nvrtc.signature), so its parameter types are known before any launch.

A compile is cached like a load_inline build (evokernel.build.cache): its key hashes the
source, the kernel names, the normalized options, the arch, the NVRTC and cuda-bindings
versions and FORMAT; its folder ``<cache>/builds/<key>`` holds ``kernel.cu``, ``kernel.cubin`` and the
marker (evokernel.build.cache.MARKER) with the symbols, signatures, log and resources, written
last. The build step (evokernel.build.entry) writes such folders into its own staging folder and
evokernel.build.publish moves them into the cache.

Options: a candidate passes NVRTC's own spellings; those that change the code
(ALLOWED_OPTIONS) are mapped to ``cuda.core.ProgramOptions``' fields (and those to NVRTC's
command line by evokernel.nvrtc.program.option_bytes, as cuda.core would); arch options are dropped (the
arch is the GPU's), ``-O<n>`` too (NVRTC always optimizes); anything else is a compile error
that names the option, so no option reads host files (``-I``) or writes any.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from evokernel.build.cache import MARKER, arch_digits, cache_key
from evokernel.build.demangle import demangle
from evokernel.build.ptxas import parse_ptxas, resources_to_json
import evokernel.nvrtc.program as program
from evokernel.nvrtc.errors import NvrtcCompileError
from evokernel.nvrtc.signature import PROBE, Param, classify, parse_signature

#: Bumped when what a build folder holds, or how a compile is made, changes (2: NVRTC through
#: cuda.bindings, evokernel.nvrtc.program, instead of cuda.core.Program).
FORMAT = 2
PROBE_DECL = f"\ntemplate <typename F> __device__ char {PROBE} = 0;\n"
CUBIN, SOURCE = "kernel.cubin", "kernel.cu"

#: NVRTC options a candidate may pass (both spellings), and the ProgramOptions field each sets.
ALLOWED_OPTIONS = {
    "use_fast_math": "--use_fast_math", "ftz": "-ftz=true|false",
    "prec_div": "-prec-div=true|false", "prec_sqrt": "-prec-sqrt=true|false",
    "fma": "-fmad=true|false", "max_register_count": "-maxrregcount=N",
    "define_macro": "-DNAME[=VALUE]", "std": "-std=c++17|c++20",
    "lineinfo": "-lineinfo", "restrict": "-restrict",
    "extra_device_vectorization": "-extra-device-vectorization",
    "ptxas_options": "-Xptxas=OPTS",
}
_BOOL_OPTS = {"ftz": "ftz", "prec-div": "prec_div", "prec-sqrt": "prec_sqrt", "fmad": "fma"}
_FLAGS = {"use_fast_math": "use_fast_math", "lineinfo": "lineinfo",
          "generate-line-info": "lineinfo", "restrict": "restrict",
          "extra-device-vectorization": "extra_device_vectorization"}
_ARCH = re.compile(r"^--?(?:arch|gpu-architecture)(?:=|$)")
_DIAG = re.compile(r"^(?P<file>[^\n(]*)\((?P<line>\d+)\): (?P<kind>(?:catastrophic )?error|"
                   r"warning)[^:\n]*: (?P<msg>[^\n]*)$", re.MULTILINE)


@dataclass(frozen=True)
class CompileSpec:
    """One ``compile_kernels`` call: its CUDA ``source``, the kernel ``names`` (C++ name
    expressions: ``"softmax"``, ``"tile<64>"``), its NVRTC ``options`` as written, and the
    ``arch`` ("9.0") of the GPU the cubin is for."""

    source: str
    names: tuple[str, ...]
    options: tuple[str, ...] = ()
    arch: str = "9.0"

    def __post_init__(self) -> None:
        arch_digits(self.arch)
        if not isinstance(self.source, str):
            raise ValueError(f"the CUDA source must be a str, got {type(self.source).__name__}")
        if not self.names or not all(isinstance(n, str) and n.strip() for n in self.names):
            raise ValueError(f"kernel names must be non-empty strings, got {self.names!r}")


@dataclass(frozen=True)
class Compiled:
    """A compiled spec: the cubin, each name's lowered symbol and parameters, NVRTC's log (its
    warnings and the ``ptxas -v`` report), the report as KernelResources JSON dicts, notes on
    dropped options, and ``compile_s`` (0.0 when read from the cache)."""

    cubin: bytes
    symbols: Mapping[str, str]
    signatures: Mapping[str, tuple[Param, ...]]
    log: str = ""
    resources: tuple[dict[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    compile_s: float = 0.0
    cached: bool = field(default=False)


def nvrtc_arch(arch: str) -> str:
    """"9.0" -> "sm_90", "9.0a" -> "sm_90a". Raises: ValueError for a malformed arch."""
    digits, suffix = arch_digits(arch)
    return f"sm_{digits}{suffix}"


def parse_options(options: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """NVRTC options as written -> (ProgramOptions keyword arguments, notes on dropped ones).

    Tokens may also be split ("-D", "N=4"; "-arch", "sm_80"; "-Xptxas", "-v").
    Raises: NvrtcCompileError naming an option that is not allowed (ALLOWED_OPTIONS).
    """
    kw: dict[str, Any] = {}
    notes: list[str] = []
    tokens = [str(t) for t in options]
    i = 0
    while i < len(tokens):
        t = tokens[i].strip()
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if t in ("-D", "-Xptxas", "--ptxas-options", "-arch", "--gpu-architecture",
                 "-maxrregcount", "--maxrregcount") and nxt is not None:
            t, i = (f"-D{nxt}" if t == "-D" else f"{t}={nxt}"), i + 1
        i += 1
        if not t:
            continue
        if _ARCH.match(t):
            notes.append(f"arch: dropped {t} (the cubin is for the GPU in use)")
        elif re.fullmatch(r"-O\d?", t):
            notes.append(f"dropped {t} (NVRTC optimizes by default)")
        else:
            _one_option(t, kw)
    return kw, notes


def _one_option(t: str, kw: dict[str, Any]) -> None:
    name, _, value = t.lstrip("-").partition("=")
    if t.startswith("-D") and not t.startswith("--"):
        kw.setdefault("define_macro", []).append(_macro(t[2:]))
    elif name == "define-macro" and value:
        kw.setdefault("define_macro", []).append(_macro(value))
    elif name in _FLAGS and not value:
        kw[_FLAGS[name]] = True
    elif name in _BOOL_OPTS and value in ("true", "false"):
        kw[_BOOL_OPTS[name]] = value == "true"
    elif name in ("maxrregcount", "max-register-count") and value.isdigit():
        kw["max_register_count"] = int(value)
    elif name == "std" and value in ("c++11", "c++14", "c++17", "c++20"):
        kw["std"] = value
    elif name in ("Xptxas", "ptxas-options") and value:
        kw.setdefault("ptxas_options", []).extend(value.split(","))
    else:
        allowed = ", ".join(ALLOWED_OPTIONS.values())
        raise NvrtcCompileError(f"compile_kernels: NVRTC option {t!r} is not allowed "
                                f"(allowed: {allowed}; the arch comes from the GPU in use)",
                                log=f"option {t!r} not allowed")


def _macro(text: str) -> str | tuple[str, str]:
    name, eq, value = text.partition("=")
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        raise NvrtcCompileError(f"compile_kernels: -D{text}: {name!r} is not a macro name",
                                log=f"bad macro {text!r}")
    return (name, value) if eq else name


@functools.lru_cache(maxsize=1)
def toolchain() -> dict[str, str]:
    """The NVRTC and cuda-bindings versions: the parts of a compile's key that come from the
    machine. Raises: NvrtcCompileError when NVRTC cannot be loaded."""
    try:
        program.load_library()
        import cuda.bindings
        from cuda.bindings import nvrtc
        _, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:                               # noqa: BLE001 - say what is missing
        raise NvrtcCompileError(f"NVRTC is not available here ({type(e).__name__}: {e}); the "
                                "NVRTC form needs cuda-core and libnvrtc (pip install "
                                "cuda-core)", log=str(e)) from e
    return {"nvrtc": f"{major}.{minor}",
            "cuda_bindings": str(getattr(cuda.bindings, "__version__", "unknown"))}


@functools.lru_cache(maxsize=1)
def include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit's and CCCL's header folders (``<cuda_fp16.h>``, ``<cuda/std/...>``,
    ``<cooperative_groups.h>``), as cuda.pathfinder finds them; () when it finds none."""
    from cuda import pathfinder
    found = []
    for lib in ("cccl", "cudart"):
        try:
            d = pathfinder.find_nvidia_header_directory(lib)
        except Exception:                                 # noqa: BLE001 - older pathfinder
            d = None
        if d and d not in found:
            found.append(str(d))
    return tuple(found)


def spec_key(spec: CompileSpec) -> str:
    """The cache key (SHA-256 hex) of a compile; its folder is ``<cache>/builds/<key>``.
    Raises: NvrtcCompileError for an option that is not allowed, or without NVRTC."""
    kw, _ = parse_options(spec.options)
    return cache_key({"form": "nvrtc", "format": FORMAT, "source": spec.source,
                      "names": list(spec.names), "options": kw, "arch": spec.arch,
                      **toolchain()})


def _expressions(names: Sequence[str]) -> list[str]:
    return [e for n in names for e in (n, f"&{PROBE}<decltype({n})>")]


def compile_spec(spec: CompileSpec, *, program_name: str = SOURCE) -> Compiled:
    """Compile ``spec`` to a cubin with NVRTC (see the module docstring); ``program_name`` is the
    file name NVRTC's diagnostics give (a path to a copy of the source, for tools that read it).

    Raises: NvrtcCompileError with NVRTC's log and its errors by CUDA source line, for a
        compile error, a name that is not a ``__global__`` function, or a bad option.
    """
    import time
    kw, notes = parse_options(spec.options)
    toolchain()
    kw["ptxas_options"] = list(kw.get("ptxas_options", [])) + ["-v"]
    options = program.option_bytes(kw, nvrtc_arch(spec.arch), include_dirs())
    t0 = time.perf_counter()
    try:
        out = program.compile_program(spec.source + PROBE_DECL, program_name, options,
                                      _expressions(spec.names))
    except program.NvrtcFailed as e:
        raise compile_error(spec, e.log) from None
    probes = [out.lowered[f"&{PROBE}<decltype({n})>"] for n in spec.names]
    signatures = {n: parse_signature(d) for n, d in zip(spec.names, demangle(probes))}
    return Compiled(cubin=out.cubin, symbols={n: out.lowered[n] for n in spec.names},
                    signatures=signatures, log=out.log,
                    resources=tuple(resources_to_json(parse_ptxas(out.log))),
                    notes=tuple(notes), compile_s=time.perf_counter() - t0)


def compile_error(spec: CompileSpec, message: str) -> NvrtcCompileError:
    """The NvrtcCompileError of a failed compile, from NVRTC's log (``message``; cuda.core's
    exception text, which quotes the log after "compilation log:", is read the same way)."""
    log = message.split("compilation log:", 1)[-1].strip() or message
    missing = [n for n in spec.names
               if re.search(r"nv_mangled_name\s+(?:&%s<decltype\()?%s\)?>?\s*$"
                            % (PROBE, re.escape(n)), log, re.MULTILINE)]
    if missing:
        return NvrtcCompileError(
            f"compile_kernels: {', '.join(repr(n) for n in missing)} is not a __global__ "
            "function of the CUDA source (a template kernel is named with its arguments, "
            "e.g. 'tile<64>')", log=log, source=spec.source,
            errors=tuple(f"error: no __global__ function {n!r}" for n in missing))
    errors = tuple(f"{m['line']}: {m['kind']}: {m['msg'].strip()}" for m in _DIAG.finditer(log)
                   if "error" in m["kind"] and "__nv_name_map" not in m["file"])
    if errors:
        num, _, rest = errors[0].partition(": ")
        first = f"{rest.partition(': ')[2]} (line {num} of the CUDA source)"
    else:
        first = log.strip().splitlines()[0] if log.strip() else message
    more = f"; {len(errors) - 1} more error(s)" if len(errors) > 1 else ""
    return NvrtcCompileError(f"NVRTC compile error: {first}{more}", log=log, errors=errors,
                             source=spec.source)


def locate(errors: Sequence[str], cuda_source: str, file_text: str) -> list[str]:
    """Each "LINE: error: message" of an NvrtcCompileError (LINE of the CUDA source) as
    "FILE_LINE: error: message", FILE_LINE being the kernel file's: exact when the source
    appears verbatim in the file (a raw string literal), else the one line of the file with
    the same text; "?" when it cannot be told. Lines without a number are kept as they are."""
    cuda_lines, file_lines = cuda_source.splitlines(), file_text.splitlines()
    at = file_text.find(cuda_source) if cuda_source else -1
    base = file_text[:at].count("\n") if at >= 0 and file_text.count(cuda_source) == 1 else None
    out = []
    for e in errors:
        num, sep, rest = e.partition(": ")
        if not (sep and num.isdigit()):
            out.append(e)
            continue
        n = int(num)
        if base is not None:
            out.append(f"{base + n}: {rest}")
            continue
        text = cuda_lines[n - 1].strip() if 1 <= n <= len(cuda_lines) else ""
        hits = [i for i, ln in enumerate(file_lines, 1) if text and ln.strip() == text]
        out.append(f"{hits[0] if len(hits) == 1 else '?'}: {rest}")
    return out


def write_build(folder: Path, key: str, spec: CompileSpec, compiled: Compiled) -> None:
    """Write a finished compile into ``folder`` (``kernel.cu``, ``kernel.cubin``, then the
    marker). Raises: OSError."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SOURCE).write_text(spec.source, encoding="utf-8")
    (folder / CUBIN).write_bytes(compiled.cubin)
    marker = {"form": "nvrtc", "format": FORMAT, "key": key, "names": list(spec.names),
              "symbols": dict(compiled.symbols),
              "signatures": {n: [p.ctype for p in ps] for n, ps in compiled.signatures.items()},
              "log": compiled.log[-20000:], "resources": list(compiled.resources),
              "flags": list(compiled.notes)}
    (folder / MARKER).write_text(json.dumps(marker, indent=1), encoding="utf-8")


def read_build(folder: Path, spec: CompileSpec) -> Compiled | None:
    """The compile in a cache folder, or None when it is missing, incomplete or not for
    ``spec``'s kernel names."""
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        if marker.get("form") != "nvrtc" or marker.get("format") != FORMAT \
                or list(marker["names"]) != list(spec.names):
            return None
        cubin = (folder / CUBIN).read_bytes()
        signatures = {n: tuple(classify(str(t)) for t in marker["signatures"][n])
                      for n in spec.names}
        symbols = {n: str(marker["symbols"][n]) for n in spec.names}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Compiled(cubin=cubin, symbols=symbols, signatures=signatures,
                    log=str(marker.get("log", "")),
                    resources=tuple(r for r in marker.get("resources", []) if isinstance(r, dict)),
                    notes=tuple(str(f) for f in marker.get("flags", [])), cached=True)
