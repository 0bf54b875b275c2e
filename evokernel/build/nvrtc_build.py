"""The build step of an NVRTC candidate (evokernel.build.forms): its kernels compiled ahead to
cubins, without running the module and without importing torch.

Run by ``python -m evokernel.build.entry WORK CACHE ARCH nvrtc`` in a build worker
(evokernel.build.builder.Builder), which writes only its candidate's folder ``WORK``: each
``compile_kernels`` call whose arguments are literals (evokernel.build.forms.nvrtc_calls) is
compiled by evokernel.nvrtc.compiler into ``WORK/builds/<key>`` (``kernel.cu``, ``kernel.cubin``,
the marker), unless the cache holds it already; evokernel.build.publish moves the folders into
the cache once the worker has ended, and the GPU worker's ``compile_kernels`` then only loads
the cubin. NVRTC's diagnostics name ``WORK/builds/<key>/kernel.cu`` (so ``evokernel check
--build-only`` maps them to the kernel file's lines as it does nvcc's), and each error is also
printed at the kernel file's line ("evokernel: candidate.py:LINE: ..."). Calls that need the
module to run are left to the GPU worker (flag "deferred_build: ...").
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from evokernel.build.forms import nvrtc_calls
from evokernel.nvrtc import compiler
from evokernel.nvrtc.compiler import CompileSpec
from evokernel.nvrtc.errors import NvrtcCompileError


def build_nvrtc(work: Path, cache_dir: Path, arch: str) -> dict[str, Any]:
    """Compile the NVRTC calls of ``work/candidate.py`` (see the module docstring); prints
    NVRTC's log of each failure to stdout (the build log).

    Returns: the result.json fields of evokernel.build.entry (ok, cache_hit, build_dirs, flags,
        trimmed, resources).
    """
    path = work / "candidate.py"
    text = path.read_text(encoding="utf-8")
    calls, deferred = nvrtc_calls(text)
    flags = [f"deferred_build: compile_kernels at line {n} needs the module to run; the GPU "
             "worker compiles it" for n in deferred]
    dirs: list[str] = []
    resources: list[dict[str, Any]] = []
    ok, hits = True, 0
    for call in calls:
        spec = CompileSpec(call.source, call.names, call.options, arch)
        try:
            key = compiler.spec_key(spec)
            cached = compiler.read_build(cache_dir / "builds" / key, spec)
            if cached is not None:
                hits += 1
                dirs.append(str(cache_dir / "builds" / key))
                resources += cached.resources
                flags += cached.notes
                continue
            folder = work / "builds" / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / compiler.SOURCE).write_text(spec.source, encoding="utf-8")
            t0 = time.perf_counter()
            done = compiler.compile_spec(spec, program_name=str(folder / compiler.SOURCE))
            compiler.write_build(folder, key, spec, done)
        except NvrtcCompileError as e:
            ok = False
            _report(path, text, call.line, e)
            continue
        print(f"evokernel: compiled {', '.join(call.names)} (line {call.line}) with NVRTC in "
              f"{time.perf_counter() - t0:.2f} s into {folder}", flush=True)
        if done.log.strip():
            print(done.log.rstrip(), flush=True)
        dirs.append(str(folder))
        resources += done.resources
        flags += done.notes
    if not calls and not deferred:
        flags.append("no_compile_kernels: the module calls compile_kernels nowhere the build "
                     "can see")
    return {"ok": ok, "cache_hit": ok and bool(calls) and hits == len(calls),
            "build_dirs": dirs, "flags": flags, "trimmed": False,
            "resources": resources if ok else []}


def _report(path: Path, text: str, line: int, e: NvrtcCompileError) -> None:
    """Print a failed call's NVRTC log, then its errors at the kernel file's lines."""
    print(f"evokernel: NVRTC could not compile the source of compile_kernels at line {line}: "
          f"{e}", flush=True)
    if e.log:
        print(e.log.rstrip(), flush=True)
    for err in compiler.locate(e.errors, e.source, text):
        num, _, rest = err.partition(": ")
        where = num if num.isdigit() else str(line)       # unplaced: the call's own line
        print(f"evokernel: {path.name}:{where}: {rest if num.isdigit() or num == '?' else err}",
              flush=True)
