"""How the build host is shared: how many builds run at once, and below whom.

Session 20's suite bench on the H200 host (16 cores; results/h200-2026-12-04-s20/README.md,
chain/vmstat.txt) ran 8 builds at once: 100% CPU while each build's main.cpp and cuda.cu
compiled side by side, 50-60% once main.cpp had ended, in every wave; and a GPU worker's set-up
made beside them took 7.8 s against 3.0 s at its turn.
"""
from __future__ import annotations

import os
import shutil

#: Builds run at this niceness, below the GPU workers: session 20's set-ups made beside 8
#: builds took 7.8 s against 3.0 s at a problem's turn (results/h200-2026-12-04-s20/README.md),
#: and a worker timing a kernel launches it from the host. Builds still get every core the GPU
#: side leaves idle.
BUILD_NICENESS = 10


def default_build_workers(cores: int | None = None) -> int:
    """Builds at once on a host of ``cores`` CPU cores (default: this one's): three per four
    cores, at least 1. A build runs ninja with MAX_JOBS=2, main.cpp beside cuda.cu, but main.cpp
    ends first (12.4 s against cuda.cu's ~35 s with light headers, evokernel.build.headers), so
    a build keeps ~1.35 cores busy: at one build per two cores, session 20's H200 host (16
    cores, 8 builds) ran at 100% CPU while both compiled and at 50-60% after, in every wave
    (results/h200-2026-12-04-s20/README.md, chain/vmstat.txt)."""
    n = cores if cores is not None else (os.cpu_count() or 2)
    return max(1, n * 3 // 4)


def below_gpu(cmd: list[str]) -> list[str]:
    """``cmd`` run at niceness BUILD_NICENESS, and its session's autogroup too, where ``nice``
    and ``sh`` exist: with the kernel's scheduler autogroups each session competes as one and a
    nice value counts only inside it (two busy loops in two sessions shared a core 50/50 at nice
    0 and 10, 90/10 with the autogroup's nice set too; a review, 2026-12-04). The caller starts
    the command in a session of its own (``sh`` is then its leader as it writes
    /proc/self/autogroup); ``sh`` and ``nice`` exec, so the process keeps its PID."""
    nice, sh = shutil.which("nice"), shutil.which("sh")
    if nice:
        cmd = [nice, "-n", str(BUILD_NICENESS), *cmd]
    if sh:
        cmd = [sh, "-c", f'echo {BUILD_NICENESS} > /proc/self/autogroup 2>/dev/null; exec "$@"',
               "sh", *cmd]
    return cmd
