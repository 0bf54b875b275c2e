"""How the build host is shared: how many builds run at once, and below whom.

Session 20's suite bench on the H200 host (16 cores; results/h200-2026-12-04-s20/README.md,
chain/vmstat.txt) ran 8 builds at once: 100% CPU while each build's main.cpp and cuda.cu
compiled side by side, 50-60% once main.cpp had ended, in every wave; and a GPU worker's set-up
made beside them took 7.8 s against 3.0 s at its turn. Session 21's 12 builds at once
(results/h200-2026-12-04-s21/README.md) ended their first wave together, ~45 s in:
``BuildLadder`` ranks the running builds so that the oldest, needed first, get the CPU first.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
from typing import Callable, Iterator

from loguru import logger

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


def below_gpu(cmd: list[str], niceness: int = BUILD_NICENESS) -> list[str]:
    """``cmd`` run at ``niceness`` (default BUILD_NICENESS; a BuildLadder's rung), and its
    session's autogroup too, where ``nice`` and ``sh`` exist: with the kernel's scheduler
    autogroups each session competes as one and a nice value counts only inside it (two busy
    loops in two sessions shared a core 50/50 at nice 0 and 10, 90/10 with the autogroup's nice
    set too; a review, 2026-12-04). The caller starts the command in a session of its own
    (``sh`` is then its leader as it writes /proc/self/autogroup); ``sh`` and ``nice`` exec, so
    the process keeps its PID. Without CAP_SYS_ADMIN that write fails (EAGAIN) within 100 ms of
    another autogroup write on the host (BuildLadder), so a Builder writes it again itself."""
    nice, sh = shutil.which("nice"), shutil.which("sh")
    if nice:
        cmd = [nice, "-n", str(niceness), *cmd]
    if sh:
        cmd = [sh, "-c", f'echo {niceness} > /proc/self/autogroup 2>/dev/null; exec "$@"',
               "sh", *cmd]
    return cmd


def write_autogroup_nice(pid: int, niceness: int) -> None:
    """Set the nice value of the scheduler autogroup of process ``pid`` (its session's, proc(5)).
    Raises: OSError (BlockingIOError when rate-limited; FileNotFoundError without autogroups in
    the kernel or once the process is gone; PermissionError for another user's process)."""
    fd = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY)
    try:
        os.write(fd, str(niceness).encode())
    finally:
        os.close(fd)


class BuildLadder:
    """The builds running now, ranked by submission (oldest first), each at its rung's niceness.

    Why: session 21's suite bench on the H200 host (16 cores) built 24 candidates on 12 build
    workers, all at BUILD_NICENESS, so the first wave of 12 ended together ~45 s in, although
    the GPU side takes candidates in submission order (problem 1 first) and would have started
    ~20-30 s sooner had the oldest builds ended first (results/h200-2026-12-04-s21/README.md,
    "The suite bench"). Here the oldest running build gets BUILD_NICENESS, the next one more,
    ``BUILD_NICENESS + min(19 - BUILD_NICENESS, position)``; each nice step weighs ~1.25x in
    CFS (sched(7); the kernel's sched_prio_to_weight table: 110 at nice 10, 15 at 19, ~7x).
    Builds still get every core the others leave idle.

    Sequence numbers: smaller is older and more urgent; a retry of one candidate (the Builder's
    build "as written" after a failed light-header build) enters again with the same one.
    ``enter`` returns the niceness its command starts at (evokernel.build.host.below_gpu:
    ``nice -n`` and the autogroup's echo, the same value); ``started`` and ``leave`` write every
    running build's rung to its session's autogroup (/proc/<pid>/autogroup of the session
    leader, the Popen pid of a build started with start_new_session=True; proc(5): any value
    >= 0 for one's own processes), so the younger ones move up as older ones end. A process's
    own niceness is never changed after its start (lowering it needs privileges): with
    autogroups off only the initial one counts.

    Best effort, never failing a build: a write that fails is ignored (logged once, at debug
    level), except that the kernel takes at most one autogroup write per 100 ms from a process
    without CAP_SYS_ADMIN, host-wide (kernel/sched/autogroup.c, EAGAIN; a build's own echo
    counts too), so a write refused so is tried again ``retry_s`` later, from a timer thread.
    A child's echo that lands after a newer write from here (its rung changed within
    milliseconds of its start) leaves it one rung off until its rung changes again.

    Args:
        writer: ``writer(pid, niceness)`` (default write_autogroup_nice); raises OSError.
        retry_s: the wait before a write refused with EAGAIN is tried again.
    """

    def __init__(self, writer: Callable[[int, int], None] = write_autogroup_nice,
                 retry_s: float = 0.105):
        self._writer, self._retry_s = writer, retry_s
        self._lock = threading.Lock()                # the state below
        self._writing = threading.Lock()             # one writer at a time, in order
        self._pids: dict[int, int | None] = {}       # seq -> pid (None before its start)
        self._written: dict[int, int] = {}           # pid -> the niceness written (or tried)
        self._retry_armed = False
        self._logged = False

    @staticmethod
    def niceness(position: int) -> int:
        """The niceness of the build at ``position`` (0: the oldest running)."""
        return BUILD_NICENESS + min(19 - BUILD_NICENESS, position)

    def enter(self, seq: int) -> int:
        """Register build ``seq`` about to start. Returns: the niceness to start it at."""
        with self._lock:
            self._pids[seq] = None
            return self.niceness(sum(1 for s in self._pids if s < seq))

    def started(self, seq: int, pid: int) -> None:
        """Build ``seq`` runs as session ``pid``: write every running build's rung."""
        with self._lock:
            if seq in self._pids:
                self._pids[seq] = pid
        self._apply()

    def leave(self, seq: int) -> None:
        """Build ``seq`` has ended (or never started): the younger ones move up."""
        with self._lock:
            pid = self._pids.pop(seq, None)
            if pid is not None:
                self._written.pop(pid, None)
        self._apply()

    @contextlib.contextmanager
    def rung(self, seq: int) -> Iterator[int]:
        """``enter`` then, on the way out (even by an exception), ``leave``.
        Yields: the niceness to start the build at."""
        try:
            yield self.enter(seq)
        finally:
            self.leave(seq)

    def snapshot(self) -> dict[int, int]:
        """seq -> niceness of each running build, oldest first."""
        with self._lock:
            return {s: self.niceness(i) for i, s in enumerate(sorted(self._pids))}

    def _pending(self) -> list[tuple[int, int]]:
        """(pid, niceness) of each started build whose rung is not written yet, oldest first."""
        with self._lock:
            wanted = ((pid, self.niceness(i)) for i, (_, pid) in
                      enumerate(sorted(self._pids.items())) if pid is not None)
            return [(pid, n) for pid, n in wanted if self._written.get(pid) != n]

    def _apply(self) -> None:
        """Write the pending rungs; after EAGAIN, try again ``retry_s`` later."""
        with self._writing:
            for pid, n in self._pending():
                try:
                    self._writer(pid, n)
                except BlockingIOError:
                    self._retry_later()
                    return
                except OSError as e:
                    if not self._logged:
                        self._logged = True
                        logger.debug(f"build ladder: /proc/{pid}/autogroup not written ({e}); "
                                     "builds keep the niceness they started at")
                with self._lock:
                    if pid in self._pids.values():
                        self._written[pid] = n

    def _retry_later(self) -> None:
        """``_apply`` again in ``retry_s`` (one timer at a time)."""
        with self._lock:
            if self._retry_armed:
                return
            self._retry_armed = True
        timer = threading.Timer(self._retry_s, self._retry)
        timer.daemon = True
        timer.start()

    def _retry(self) -> None:
        with self._lock:
            self._retry_armed = False
        self._apply()
