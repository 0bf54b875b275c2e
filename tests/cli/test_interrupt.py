"""Ctrl-C and SIGTERM during `evokernel check ... --build-only`: the builds in flight are
stopped at once, their whole sessions killed, and the line says so (evokernel.cli.main,
evokernel.build.inflight).

A new user's Ctrl-C, sent to the process group as a terminal sends it, printed "interrupted" and
exited 130 only ~18 s later, once the build in flight (in a session of its own, so never
signalled) had ended; two Ctrl-C left that build and its compilers running as orphans; SIGTERM
exited 143 only ~19.5 s later. No nvcc is run: each kernel file's import (the build step runs
it) starts a child in a process group of its own, as ninja starts each compiler, and sleeps
before its load_inline call. `check` itself needs a toolkit (require_nvcc), else skipped."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evokernel.build.host import default_build_workers, kill_session
from tests.build.test_build_stop import live_in_session, running, wait_for_pids

CUDA_HOME = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
ROOT = Path(__file__).resolve().parents[2]


def _kernel(flags: Path, tag: str) -> str:
    """A kernel file that passes `check`'s fault scan, and whose build writes "SESSION CHILD"
    to ``flags/TAG.pids`` and then sleeps 60 s before it would compile anything."""
    return f'''import os, pathlib, subprocess, time
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

flags = pathlib.Path({str(flags)!r})
child = subprocess.Popen(["sleep", "60"], process_group=0)
(flags / "{tag}.tmp").write_text(f"{{os.getsid(0)}} {{child.pid}}")
os.replace(flags / "{tag}.tmp", flags / "{tag}.pids")
time.sleep(60)
ext = load_inline(name="slow_{tag}", cpp_sources="torch::Tensor f(torch::Tensor x);",
                  cuda_sources="torch::Tensor f(torch::Tensor x) {{ return x; }}",
                  functions=["f"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.f(x)
'''


@pytest.mark.skipif(not (CUDA_HOME / "bin" / "nvcc").is_file(),
                    reason="`check --build-only` needs a CUDA toolkit (CUDA_HOME)")
@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated"),
                                               (signal.SIGHUP, 143, "terminated")])
def test_a_signal_stops_the_builds_in_flight_at_once(tmp_path, sig, status, word):
    flags = tmp_path / "flags"
    flags.mkdir()
    kernels = []
    for tag in ("k1", "k2"):
        kernels.append(tmp_path / f"{tag}.py")
        kernels[-1].write_text(_kernel(flags, tag))
    env = {**os.environ, "EVOKERNEL_CACHE": str(tmp_path / "cache"), "CUDA_HOME": str(CUDA_HOME),
           "TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen([sys.executable, "-m", "evokernel", "check", "softmax",
                             *map(str, kernels), "--build-only"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    in_flight = min(2, default_build_workers())      # its builds at once (the same cores)
    pids: list[tuple[int, int]] = []
    try:
        for tag in ("k1", "k2")[:in_flight]:
            pids.append(wait_for_pids(flags / f"{tag}.pids", 90))
        t0 = time.monotonic()
        os.killpg(proc.pid, sig)                     # the whole group, as a terminal does
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        leftovers = [p for sid, _ in pids for p in live_in_session(sid)]
        for sid, _ in pids:                          # a failed test leaves no orphan either
            kill_session(sid)
    assert not leftovers, f"a build's processes live on: {leftovers}"
    assert proc.returncode == status, (out, err)
    assert took < 3, f"exited {took:.1f} s after the signal"
    line = err.strip().splitlines()[-1]
    n = f"{in_flight} build{'s' if in_flight > 1 else ''}"
    assert re.fullmatch(rf"evokernel: {word}; stopped {n} in flight; finished builds stay in "
                        r"the cache, run the same command again to go on", line), line
    assert not any(running(child) for _, child in pids), "a compiler stand-in lives on"
    assert not list((tmp_path / "cache" / "builds").glob("*"))
