"""NVRTC itself: one CUDA source compiled to a cubin through ``cuda.bindings.nvrtc``.

evokernel.nvrtc.compiler decides what to compile (options, name expressions, the cache); this
module makes the NVRTC calls. Why ``cuda.bindings.nvrtc`` and not ``cuda.core.Program``, which
wraps the same calls: a build worker is a new process per candidate, and importing cuda.core
(which imports NumPy and the driver bindings) took about 0.5 s of a 1.1-1.3 s cold build on the
2-core development machine, cuda.bindings.nvrtc about 0.15 s (results/cpu-2026-12-01-nvrtc-build).
The options are the bytes cuda.core's ``ProgramOptions.as_bytes("nvrtc")`` gives for the same
fields, in its order (tests/nvrtc/test_program.py pins that, and that both give the same cubin),
so a compile means what it meant with cuda.core. Loading and launching stay with cuda.core
(evokernel.nvrtc.runtime), in the GPU worker only.
"""
from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence


class NvrtcFailed(Exception):
    """NVRTC refused a program: ``log`` is its compilation log (or, when it wrote none, the
    name of NVRTC's error)."""

    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


@dataclass(frozen=True)
class Output:
    """A compiled program: the ``cubin``, NVRTC's ``log`` (warnings, the ``ptxas -v`` report)
    and each name expression's lowered (mangled) name."""

    cubin: bytes
    log: str
    lowered: Mapping[str, str]


@functools.lru_cache(maxsize=1)
def load_library() -> None:
    """Make libnvrtc loadable for cuda.bindings. cuda.pathfinder finds it in this interpreter's
    site-packages (the nvidia-cuda-nvrtc wheel PyTorch depends on) or the CUDA toolkit; a
    virtual environment that reaches another's site-packages through a ``.pth`` file is not
    searched, so there the wheel's libraries are loaded from ``sys.path`` first (globally, so
    the bindings then find them loaded)."""
    from cuda import pathfinder
    try:
        pathfinder.load_nvidia_dynamic_lib("nvrtc")
        return
    except Exception:                                     # noqa: BLE001 - try sys.path below
        pass
    for entry in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            lib = Path(entry) / sub
            found = sorted(lib.glob("libnvrtc.so.*")) if lib.is_dir() else []
            if found:
                for builtins in sorted(lib.glob("libnvrtc-builtins.so.*")):
                    if ".alt." not in builtins.name:
                        ctypes.CDLL(str(builtins), mode=os.RTLD_GLOBAL)
                ctypes.CDLL(str(found[0]), mode=os.RTLD_GLOBAL)
                return


def option_bytes(kw: Mapping[str, Any], arch: str, include_path: Sequence[str]) -> list[bytes]:
    """NVRTC's command line for ProgramOptions-style fields ``kw`` (those of evokernel.nvrtc.
    compiler.ALLOWED_OPTIONS), ``arch`` ("sm_90") and the header folders, as cuda.core's
    ``ProgramOptions(arch=..., include_path=..., **kw).as_bytes("nvrtc")`` writes it.
    Raises: ValueError for a field this function does not know (a new ALLOWED_OPTIONS entry
        must be added here too)."""
    def flag(value: bool) -> str:
        return "true" if value else "false"
    known = {"lineinfo", "ptxas_options", "max_register_count", "ftz", "prec_sqrt", "prec_div",
             "fma", "use_fast_math", "extra_device_vectorization", "define_macro", "std",
             "restrict"}
    if set(kw) - known:
        raise ValueError(f"option_bytes: unknown option field(s) {sorted(set(kw) - known)}")
    out = [f"-arch={arch}"]
    out += ["--generate-line-info"] if kw.get("lineinfo") else []
    out += [f"--ptxas-options={o}" for o in kw.get("ptxas_options", ())]
    if kw.get("max_register_count") is not None:
        out.append(f"--maxrregcount={kw['max_register_count']}")
    for field, name in (("ftz", "ftz"), ("prec_sqrt", "prec-sqrt"), ("prec_div", "prec-div"),
                        ("fma", "fmad")):
        if kw.get(field) is not None:
            out.append(f"--{name}={flag(kw[field])}")
    out += ["--use_fast_math"] if kw.get("use_fast_math") else []
    out += ["--extra-device-vectorization"] if kw.get("extra_device_vectorization") else []
    out += [f"--define-macro={m}" if isinstance(m, str) else f"--define-macro={m[0]}={m[1]}"
            for m in kw.get("define_macro", ())]
    out += [f"--include-path={d}" for d in include_path]
    out += [f"--std={kw['std']}"] if kw.get("std") else []
    out += ["--restrict"] if kw.get("restrict") else []
    return [o.encode() for o in out]


def _check(result: Any, nvrtc: Any, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, name = nvrtc.nvrtcGetErrorString(result)
        raise NvrtcFailed(f"{what}: {name.decode() if isinstance(name, bytes) else name}")


def compile_program(source: str, program_name: str, options: Sequence[bytes],
                    expressions: Sequence[str]) -> Output:
    """Compile ``source`` (its diagnostics name ``program_name``) with ``options``
    (:func:`option_bytes`) and the C++ name ``expressions`` whose lowered names are wanted.
    Raises: NvrtcFailed with NVRTC's log when the compile fails (an error in the source, a name
        expression that names nothing), or with NVRTC's error for a refused option."""
    load_library()
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), program_name.encode(), 0, [], [])
    _check(err, nvrtc, "nvrtcCreateProgram")
    try:
        for e in expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, e.encode())[0], nvrtc,
                   f"nvrtcAddNameExpression({e!r})")
        result = nvrtc.nvrtcCompileProgram(prog, len(options), list(options))[0]
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(err, nvrtc, "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf)[0], nvrtc, "nvrtcGetProgramLog")
        log = buf.decode(errors="replace").replace("\x00", "")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, name = nvrtc.nvrtcGetErrorString(result)
            raise NvrtcFailed(log.strip() or (name.decode() if isinstance(name, bytes)
                                              else str(name)))
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, nvrtc, "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin)[0], nvrtc, "nvrtcGetCUBIN")
        lowered = {}
        for e in expressions:
            err, name = nvrtc.nvrtcGetLoweredName(prog, e.encode())
            _check(err, nvrtc, f"nvrtcGetLoweredName({e!r})")
            lowered[e] = name.decode() if isinstance(name, bytes) else str(name)
        return Output(cubin=bytes(cubin), log=log, lowered=lowered)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
