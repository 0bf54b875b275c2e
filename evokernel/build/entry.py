"""Subprocess entry point of one candidate build (started by ``evokernel.build.builder.Builder``).

Usage: ``python -m evokernel.build.entry WORK_DIR CACHE_DIR ARCH [trim|full|nvrtc]``. Imports
``WORK_DIR/candidate.py`` with ``load_inline`` routed through the build cache (``trim``: with a
light stand-in for ``<torch/extension.h>``, see evokernel.build.headers; missing extensions
built in ``WORK_DIR/builds``, which evokernel.build.publish moves into the cache), prints tracebacks to
stdout (the Builder's log), and writes ``WORK_DIR/result.json``: ok, cache_hit, build_dirs,
flags, trimmed (some build used the light header), resources (the ``ptxas -v`` report of every
kernel built, as JSON dicts; evokernel.build.ptxas). Exits with status 0 whenever the result was
written, whatever the candidate did.

``nvrtc``: an NVRTC candidate (evokernel.build.forms) is not run: its ``compile_kernels`` calls
are compiled ahead by evokernel.build.nvrtc_build, with the same result.json, and torch is not
imported. In the other modes a candidate that also calls ``compile_kernels`` compiles with the
same arch (evokernel.nvrtc.configure).
"""
from __future__ import annotations

import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Mapping, Sequence

_GPU_ERROR = re.compile(r"CUDA GPU|driver|not compiled with CUDA|CUDA is not available|"
                        r"CUDA unavailable|CUDA error|invalid device|no GPU", re.IGNORECASE)


def judge_import(calls: Sequence[Mapping[str, Any]], error: BaseException | None
                 ) -> tuple[bool, list[str]]:
    """Decide a build from the ``load_inline`` calls an import made and what it raised.

    A failed call fails the build (even if the module caught it). An error raised after every
    call succeeded does not. An error before any call fails it, unless it only says no GPU is
    visible (the GPU worker then builds on load: "deferred_build").
    Returns: (ok, flags).
    """
    flags = [f for c in calls for f in c.get("flags", ())]
    if any(not c.get("ok") for c in calls):
        return False, flags
    what = f"{type(error).__name__}: {str(error)[:200]}" if error is not None else ""
    if calls:
        return True, flags + ([f"import_error_after_build: {what}"] if what else [])
    if error is None:
        return True, ["no_load_inline"]
    if isinstance(error, (RuntimeError, AssertionError)) and _GPU_ERROR.search(what):
        return True, [f"deferred_build: import needs a GPU before load_inline ({what})"]
    return False, flags


def main(argv: list[str]) -> None:
    work, cache_dir, arch = Path(argv[0]), Path(argv[1]), argv[2]
    trim = len(argv) > 3 and argv[3] == "trim"
    from evokernel.jsonfile import write_json_atomic
    if len(argv) > 3 and argv[3] == "nvrtc":
        from evokernel.build.nvrtc_build import build_nvrtc
        write_json_atomic(work / "result.json", build_nvrtc(work, cache_dir, arch), indent=1)
        sys.stdout.flush()
        os._exit(0)
    from evokernel import nvrtc
    from evokernel.build.cache import patched_load_inline
    from evokernel.problem import exec_module
    nvrtc.configure(cache_dir, arch)

    source_path = work / "candidate.py"
    source = source_path.read_text(encoding="utf-8")
    error: BaseException | None = None
    with patched_load_inline(cache_dir, arch, trim_headers=trim,
                             staging_dir=work / "builds") as patch:
        patch.announce = True
        patch.ptxas_report = True
        try:
            exec_module(source, "evokernel_candidate", str(source_path))
        except BaseException as e:  # noqa: BLE001 - SystemExit from a candidate is a failure too
            error = e
            print("evokernel: the candidate module raised:", flush=True)
            traceback.print_exc(file=sys.stdout)
    calls = patch.calls
    for c in calls:                      # a failure the candidate caught is not in its traceback
        if c["error"] and (error is None or str(error) not in c["error"]):
            print(f"evokernel: load_inline({c['name']!r}) failed in {c['build_dir']}:\n"
                  f"{c['error']}", flush=True)
    ok, flags = judge_import(calls, error)
    dirs = list(dict.fromkeys(c["build_dir"] for c in calls if c["build_dir"]))
    result = {"ok": ok, "cache_hit": bool(calls) and all(c["cache_hit"] for c in calls),
              "build_dirs": dirs, "flags": flags,
              "trimmed": any(c.get("trimmed") for c in calls),
              "resources": [r for c in calls for r in c.get("resources", ())]}
    write_json_atomic(work / "result.json", result, indent=1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)             # threads or atexit hooks the candidate left behind must not hang us


if __name__ == "__main__":
    main(sys.argv[1:])
