"""The build processes in flight, and stopping them at once (Ctrl-C, SIGTERM).

A Builder (evokernel.build.builder) starts each build in a session of its own, so that a
timeout can kill all of it (ninja, nvcc, cicc, ptxas) and no signal meant for the driver stops
a build half-way. That also keeps a terminal's Ctrl-C (SIGINT to the foreground process group)
away from the builds: ``evokernel check K1.py K2.py --build-only`` then printed "interrupted"
only once the build in flight had ended (18 s for a load_inline build on a 2-core host, as long
as the build took for a slow one), SIGTERM the same, and a second Ctrl-C ended the driver but
left the build, and the compilers under it, running as orphans.

``BuildSessions`` holds the sessions of one Builder's builds in flight: ``start`` starts and
registers one, ``ended`` unregisters it once reaped, ``stop`` kills every registered session
(evokernel.build.host.kill_session) and refuses new ones (BuildStopped). ``stop_all`` stops
every BuildSessions of this process not closed yet (evokernel.cli.main on Ctrl-C and SIGTERM:
also the builds of a Builder no ``with`` block left, e.g. an evaluator's), and
``stopped_count`` counts the builds stopped in this process so far, so that the CLI can say how
many it stopped.

The build cache stays whole: a build writes only its candidate's folder, and only a finished
build (its marker written last) is moved into the cache, by rename (evokernel.build.publish),
so a killed build is never taken for a built one; the same command builds it again.
"""
from __future__ import annotations

import subprocess
import threading
import time
import weakref
from typing import Callable

from evokernel.build.host import kill_session
from evokernel.errors import EvokernelError

_lock = threading.Lock()                              # the two below
_open: "weakref.WeakSet[BuildSessions]" = weakref.WeakSet()
_stopped = 0                                          # builds stopped in this process


class BuildStopped(EvokernelError):
    """The Builder was stopped (Ctrl-C, SIGTERM, ``Builder.stop``) before or while this build
    ran: it has no result, and it builds again next time, unless it had finished as it was
    stopped (then it was published, evokernel.build.publish.publish_finished)."""


class BuildSessions:
    """The sessions (leaders' pids) of one Builder's builds running now; see the module
    docstring. Listed for ``stop_all`` until ``close`` or ``stop``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running: set[int] = set()
        self._killed: set[int] = set()               # sessions a stop() has counted
        self._stopped = False
        with _lock:
            _open.add(self)

    @property
    def stopped(self) -> bool:
        """``stop`` was called: builds in flight were killed, new ones are refused."""
        return self._stopped

    def start(self, popen: Callable[[], subprocess.Popen]) -> subprocess.Popen:
        """Start a build with ``popen()`` (a process started with ``start_new_session=True``)
        and register its session; the caller calls ``ended`` once it has reaped it.
        Returns: the process. Raises: BuildStopped after ``stop`` (nothing is started); what
        ``popen`` raises."""
        with self._cond:                              # so stop() sees every build it started
            if self._stopped:
                raise BuildStopped("the builds were stopped (interrupted)")
            proc = popen()
            self._running.add(proc.pid)
        return proc

    def ended(self, pid: int) -> None:
        """The build of session ``pid`` has been reaped."""
        with self._cond:
            self._running.discard(pid)
            self._cond.notify_all()

    def stop(self, wait_s: float = 5.0) -> int:
        """Kill the whole session of every build in flight and refuse new builds; wait up to
        ``wait_s`` for their drivers to reap them. Called again (a second Ctrl-C may have cut
        the first call short), it kills what is still running and counts only builds not
        counted before; it stays listed for ``stop_all`` until every kill was sent.
        Returns: how many builds this call stopped that no earlier call had."""
        global _stopped
        with self._cond:
            self._stopped = True
            sessions = sorted(self._running)
            new = [sid for sid in sessions if sid not in self._killed]
            self._killed.update(new)
        with _lock:
            _stopped += len(new)
        for sid in sessions:
            kill_session(sid)
        self.close()
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._cond.wait_for(lambda: not self._running.intersection(sessions),
                                max(0.0, deadline - time.monotonic()))
        return len(new)

    def close(self) -> None:
        """No longer listed for ``stop_all`` (the Builder is closed)."""
        with _lock:
            _open.discard(self)


def stop_all(wait_s: float = 5.0) -> int:
    """``stop`` every BuildSessions of this process not closed or stopped yet.
    Returns: how many builds this call stopped."""
    with _lock:
        listed = list(_open)
    return sum(s.stop(wait_s) for s in listed)


def stopped_count() -> int:
    """How many builds ``stop`` has stopped in this process so far (every BuildSessions)."""
    with _lock:
        return _stopped
