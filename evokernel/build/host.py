"""How the build host is shared: how many builds run at once, below whom, and how a build's
processes end (``kill_session``).

Session 20's suite bench on the H200 host (16 cores; results/h200-2026-12-04-s20/README.md,
chain/vmstat.txt) ran 8 builds at once: 100% CPU while each build's main.cpp and cuda.cu
compiled side by side, 50-60% once main.cpp had ended, in every wave; and a GPU worker's set-up
made beside them took 7.8 s against 3.0 s at its turn. Session 21's 12 builds at once
(results/h200-2026-12-04-s21/README.md) ended their first wave together, ~45 s in:
``BuildLadder`` ranks the running builds so that the oldest, needed first, get the CPU first.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Protocol

from loguru import logger

#: Builds run at this niceness, below the GPU workers: session 20's set-ups made beside 8
#: builds took 7.8 s against 3.0 s at a problem's turn (results/h200-2026-12-04-s20/README.md),
#: and a worker timing a kernel launches it from the host. Builds still get every core the GPU
#: side leaves idle. Every build's processes start at it, whatever their rung on a BuildLadder
#: (which ranks only the builds' autogroups).
BUILD_NICENESS = 10


def default_build_workers(cores: int | None = None) -> int:
    """Builds at once on a host of ``cores`` CPU cores (default: this one's): three per four
    cores, at least 1. A build runs ninja with MAX_JOBS=2, main.cpp beside cuda.cu, but main.cpp
    ends first (12.4 s against cuda.cu's ~35 s with light headers, evokernel.build.headers), so
    a build keeps ~1.35 cores busy: at one build per two cores, session 20's H200 host (16
    cores, 8 builds) ran at 100% CPU while both compiled and at 50-60% after, in every wave
    (results/h200-2026-12-04-s20/README.md, chain/vmstat.txt). This host's cores are the ones
    this process may run on (its CPU affinity, as a container's cpuset narrows it), not all of
    the machine's; a CPU quota (cgroup cpu.max) is not read."""
    n = cores if cores is not None else usable_cores()
    return max(1, n * 3 // 4)


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity (Linux), else os.cpu_count(), else 2."""
    try:
        return len(os.sched_getaffinity(0)) or 2
    except (AttributeError, OSError):
        return os.cpu_count() or 2


def below_gpu(cmd: list[str], rung: int = BUILD_NICENESS) -> list[str]:
    """``cmd`` run at niceness BUILD_NICENESS, and its session's autogroup at ``rung`` (default
    BUILD_NICENESS; a BuildLadder's rung), where ``nice`` and ``sh`` exist: with the kernel's
    scheduler autogroups each session competes as one and a nice value counts only inside it
    (two busy loops in two sessions shared a core 50/50 at nice 0 and 10, 90/10 with the
    autogroup's nice set too; a review, 2026-12-04). The process niceness is BUILD_NICENESS
    whatever the rung: where autogroups count for nothing (sched_autogroup_enabled=0, or builds
    in a cpu cgroup other than the root one, as in Docker or Kubernetes) only it does, and every
    build is then at +10, as before the ladder; a rung there, never lowered afterwards without
    privileges, would leave a build started young below younger ones once the older ones end.
    The caller starts the command in a session of its own (``sh`` is then its leader as it
    writes /proc/self/autogroup); ``sh`` and ``nice`` exec, so the process keeps its PID.
    Without CAP_SYS_ADMIN that write fails (EAGAIN) within 100 ms of another autogroup write on
    the host (BuildLadder), so a Builder writes it again itself."""
    nice, sh = shutil.which("nice"), shutil.which("sh")
    if nice:
        cmd = [nice, "-n", str(BUILD_NICENESS), *cmd]
    if sh:
        cmd = [sh, "-c", f'echo {rung} > /proc/self/autogroup 2>/dev/null; exec "$@"',
               "sh", *cmd]
    return cmd


def kill_session(sid: int, rounds: int = 10) -> int:
    """SIGKILL every process of session ``sid`` (a process started with
    ``start_new_session=True`` has sid == its pid). Killing its process group is not enough:
    ninja starts each compiler in a process group of its own. Reads /proc (Linux).
    Returns: how many processes were signalled.
    """
    killed = 0
    for _ in range(rounds):                          # again, in case one forked meanwhile
        found = 0
        for stat_file in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat_file.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(stat_file.parent.name), signal.SIGKILL)
                    found += 1
        killed += found
        if not found:
            break
        time.sleep(0.01)
    return killed


class AutogroupHandle(Protocol):
    """What a BuildLadder writes a build's rung through (``Autogroup``, or a test's stand-in)."""

    def write(self, niceness: int) -> None: ...

    def close(self) -> None: ...


class Autogroup:
    """A handle on the scheduler autogroup of process ``pid`` (its session's, proc(5)): its
    /proc/<pid>/autogroup opened for writing once, while the caller knows the process exists
    (started, not reaped yet). The descriptor stays bound to that process: once it has been
    reaped a write fails with ESRCH and never reaches a later process given the same pid.
    Raises: OSError (FileNotFoundError without autogroups in the kernel; PermissionError for
    another user's process)."""

    def __init__(self, pid: int):
        self.pid = pid
        self._lock = threading.Lock()
        self._fd: int | None = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY | os.O_CLOEXEC)

    def write(self, niceness: int) -> None:
        """Set the autogroup's nice value. Raises: OSError (BlockingIOError when rate-limited;
        ProcessLookupError once the process has been reaped, or after ``close``)."""
        with self._lock:
            if self._fd is None:
                raise ProcessLookupError(errno.ESRCH, f"/proc/{self.pid}/autogroup: closed")
            os.write(self._fd, str(niceness).encode())

    def close(self) -> None:
        """Close the descriptor (again: nothing)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@dataclass
class _Started:
    """A started build on a BuildLadder: its session leader's pid, the handle on its autogroup
    (None where it could not be opened) and the rung last written (or tried) through it."""
    pid: int
    handle: AutogroupHandle | None
    written: int | None = None


class BuildLadder:
    """The builds running now, ranked by submission (oldest first), each one's autogroup at its
    rung's niceness.

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
    ``enter`` returns the rung its command's autogroup starts at (evokernel.build.host.below_gpu
    echoes it; the process itself starts at BUILD_NICENESS whatever the rung). ``started`` opens
    the build's autogroup (``opener(pid)``, an Autogroup: /proc/<pid>/autogroup of the session
    leader, the Popen pid of a build started with start_new_session=True; proc(5): any value
    >= 0 for one's own processes) while the process is known not to be reaped, and ``started``
    and ``leave`` write every running build's rung through those handles, so the younger ones
    move up as older ones end; ``leave`` closes the build's handle. A write after its process
    has ended fails (ESRCH), harmless: a pid reused by another process is never written. With
    autogroups off (or in a non-root cpu cgroup) the rungs count for nothing and every build
    runs at BUILD_NICENESS, as before the ladder.

    Best effort, never failing a build: a handle that cannot be opened leaves that build's
    autogroup where its own echo set it, and a write that fails is not repeated at that rung
    (each kind of failure logged once, at debug level; ESRCH, a build that has ended, not at
    all), except that the kernel takes at most one autogroup write per 100 ms from a process
    without CAP_SYS_ADMIN, host-wide (kernel/sched/autogroup.c, EAGAIN; a build's own echo
    counts too), so a write refused so is tried again ``retry_s`` later, from a timer thread.
    A child's echo that lands after a newer write from here (its rung changed within
    milliseconds of its start) leaves it one rung off until its rung changes again.

    Args:
        opener: ``opener(pid)`` -> an AutogroupHandle (default Autogroup); raises OSError.
        retry_s: the wait before a write refused with EAGAIN is tried again.
    """

    def __init__(self, opener: Callable[[int], AutogroupHandle] = Autogroup,
                 retry_s: float = 0.105):
        self._open, self._retry_s = opener, retry_s
        self._lock = threading.Lock()                # the state below
        self._writing = threading.Lock()             # one writer at a time, in order; closes too
        self._builds: dict[int, _Started | None] = {}  # seq -> its build (None before its start)
        self._retry_armed = False
        self._logged: set[tuple[str, int | None]] = set()  # (open/write, errno) logged once

    @staticmethod
    def niceness(position: int) -> int:
        """The niceness of the build at ``position`` (0: the oldest running)."""
        return BUILD_NICENESS + min(19 - BUILD_NICENESS, position)

    def enter(self, seq: int) -> int:
        """Register build ``seq`` about to start. Returns: the rung to start its autogroup at."""
        with self._lock:
            old = self._builds.get(seq)
            self._builds[seq] = None
            rung = self.niceness(sum(1 for s in self._builds if s < seq))
        self._close(old)
        return rung

    def started(self, seq: int, pid: int) -> None:
        """Build ``seq`` runs as session ``pid``, not reaped yet: open its autogroup, then write
        every running build's rung."""
        try:
            handle = self._open(pid)
        except OSError as e:
            handle = None
            self._log_once("open", e, f"build ladder: /proc/{pid}/autogroup not opened ({e}); "
                           "such builds' autogroups keep the rung they started at (if their "
                           f"echo took), not moved up as older builds end; processes at "
                           f"niceness {BUILD_NICENESS}")
        with self._lock:
            entered = self._builds.get(seq, False) is None
            if entered:
                self._builds[seq] = _Started(pid, handle)
        if not entered:                              # left already (or never entered)
            self._close(_Started(pid, handle))
            return
        self._apply()

    def leave(self, seq: int) -> None:
        """Build ``seq`` has ended (or never started): its handle closed, the younger ones move
        up. Again for the same build: nothing."""
        with self._lock:
            if seq not in self._builds:
                return
            build = self._builds.pop(seq)
        self._close(build)
        self._apply()

    @contextlib.contextmanager
    def rung(self, seq: int) -> Iterator[int]:
        """``enter`` then, on the way out (even by an exception), ``leave``.
        Yields: the rung to start the build's autogroup at."""
        try:
            yield self.enter(seq)
        finally:
            self.leave(seq)

    def snapshot(self) -> dict[int, int]:
        """seq -> niceness of each running build, oldest first."""
        with self._lock:
            return {s: self.niceness(i) for i, s in enumerate(sorted(self._builds))}

    def _close(self, build: _Started | None) -> None:
        """Close ``build``'s handle, never while ``_apply`` writes through it."""
        if build is not None and build.handle is not None:
            with self._writing:
                build.handle.close()

    def _pending(self) -> list[tuple[_Started, int]]:
        """(build, niceness) of each opened build whose rung is not written yet, oldest first."""
        with self._lock:
            wanted = ((b, self.niceness(i)) for i, (_, b) in enumerate(sorted(
                self._builds.items())) if b is not None and b.handle is not None)
            return [(b, n) for b, n in wanted if b.written != n]

    def _apply(self) -> None:
        """Write the pending rungs; after EAGAIN, try again ``retry_s`` later."""
        with self._writing:
            for build, n in self._pending():
                try:
                    build.handle.write(n)
                except BlockingIOError:
                    self._retry_later()
                    return
                except (ProcessLookupError, FileNotFoundError):
                    pass                             # the build has ended: its leave is near
                except OSError as e:
                    self._log_once("write", e, f"build ladder: /proc/{build.pid}/autogroup not "
                                   f"written ({e}); such builds' autogroups keep the last value "
                                   "they took, not re-ranked; processes at niceness "
                                   f"{BUILD_NICENESS}")
                with self._lock:
                    build.written = n

    def _log_once(self, stage: str, error: OSError, message: str) -> None:
        """``message`` at debug level, once per ``stage`` and errno."""
        key = (stage, error.errno)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        logger.debug(message)

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
