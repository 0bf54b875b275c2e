"""Anti-cheat hooks inside the GPU worker: a candidate that monkey-patches the timers, or starts
threads or processes, is caught and named (Reason.TIMER_TAMPERING, Reason.THREADS).

Starts are attributed to the candidate only when its code (compiled by
evokernel.build.cache.load_candidate with a ``<candidate ...>`` filename) is on the call
stack, so PyTorch's own helper threads (e.g. torch.compile's worker-pool timer, seen on the
H200) are not blamed on it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from evokernel.engine.snapshot import ModuleSnapshot
from evokernel.records import Reason


def _build_step_files() -> tuple[str, ...]:
    """The files of evokernel's own build step: an in-worker build runs ninja as a subprocess on
    the candidate's behalf (evokernel.build.cache, split out of evokernel.build.builder). Only a
    subprocess is excused there, and only these files: a frame of an excused file lets through
    whatever a callable without a Python frame of its own starts under it (a builtin or a
    functools.partial the candidate hands in), so the list stays as short as the build needs.
    An NVRTC compile the worker runs for a candidate (a deferred build) starts nothing: its
    libraries are loaded at the worker's warm-up and it demangles in process
    (evokernel.build.demangle)."""
    import evokernel.build.builder as build
    import evokernel.build.cache as extension_cache
    return build.__file__, extension_cache.__file__


def _called_from_candidate(own_files: tuple[str, ...] | None = None) -> bool:
    """Whether candidate code (compiled with a ``<candidate ...>`` filename by
    evokernel.build.cache.load_candidate) is on the current call stack, and not through
    evokernel's own build step (``own_files``, default :func:`_build_step_files`; Tamper reads
    them once, so a candidate cannot rename them)."""
    own_files = own_files if own_files is not None else _build_step_files()
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name in own_files:
            return False
        if name.startswith("<candidate"):
            return True
        frame = frame.f_back
    return False


class Tamper:
    """Catches a candidate that monkey-patches the timers or starts threads or processes.

    Timers: the objects are snapshot at start-up and compared after each candidate, and so is
    evokernel's own code (evokernel.engine.snapshot: the timing loop, the spin's calibrated
    values, the gate's functions and their defaults); a change is undone and named. Threads and
    processes: the functions that start them are wrapped so that a start whose call stack holds
    candidate code is recorded; PyTorch's own helper threads (e.g. torch.compile's worker pool
    timer) are not the candidate's and are not counted.
    """

    def __init__(self, watch_spin: bool = False) -> None:
        """watch_spin: also watch torch's launch path and stream waits, which the spin that
        hides host time uses (``TimingConfig.hide_host_ms > 0``, evokernel.timing.spin). The
        spin's own code and calibrated values are in the snapshot of evokernel's modules, taken
        here: make the spin first (the worker does so at set-up)."""
        import _thread
        import multiprocessing
        import subprocess
        import torch
        self._objs = {
            "time.perf_counter": (time, "perf_counter"),
            "time.time": (time, "time"),
            "torch.cuda.synchronize": (torch.cuda, "synchronize"),
            "torch.cuda.Event": (torch.cuda, "Event"),
            "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time"),
            "torch.cuda.Event.record": (torch.cuda.Event, "record"),
            "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize"),
        }
        if watch_spin:
            self._objs.update({f"torch.cuda.Stream.{a}": (torch.cuda.Stream, a)
                               for a in ("wait_event", "wait_stream")})
            utils = getattr(torch.cuda, "_utils", None)
            for owner, attr, name in ((getattr(utils, "_CudaKernel", None), "__call__",
                                       "torch.cuda._utils._CudaKernel.__call__"),
                                      (utils, "_get_gpu_runtime_library",
                                       "torch.cuda._utils._get_gpu_runtime_library")):
                if owner is not None and hasattr(owner, attr):
                    self._objs[name] = (owner, attr)
        # evokernel's own code (timing, the spin and its calibration, the gate): see
        # evokernel.engine.snapshot. Taken after the worker's set-up made the spin.
        # The build step's modules load lazily (first candidate, first thread start): load them
        # now, so they are in the snapshot, and read their files once.
        self._own_files = _build_step_files()
        import evokernel.sandbox  # noqa: F401 - in the snapshot
        self._modules = ModuleSnapshot()
        self._saved = {k: getattr(o, a) for k, (o, a) in self._objs.items()}
        self.started: list[str] = []
        for owner, attr, what in ((_thread, "start_new_thread", "a thread"),
                                  (threading, "_start_new_thread", "a thread"),
                                  (multiprocessing.Process, "start", "a process"),
                                  (subprocess.Popen, "__init__", "a subprocess"),
                                  (os, "system", "a subprocess"),
                                  (os, "posix_spawn", "a subprocess"),
                                  (os, "posix_spawnp", "a subprocess"),
                                  (os, "fork", "a forked process"),
                                  (os, "forkpty", "a forked process")):
            if hasattr(owner, attr):
                setattr(owner, attr, self._watch(getattr(owner, attr), what))

    def _watch(self, fn: Any, what: str) -> Any:
        # the build step's files excuse a subprocess (its ninja), never a thread or a fork
        own = self._own_files if what == "a subprocess" else ()

        def watched(*args: Any, **kwargs: Any) -> Any:
            if _called_from_candidate(own):
                self.started.append(what)
            return fn(*args, **kwargs)
        return watched

    def check(self) -> tuple[Reason, str] | None:
        """A named reason when a timer was replaced or a thread/process was started."""
        changed = [k for k, (o, a) in self._objs.items() if getattr(o, a) is not self._saved[k]]
        changed += self._modules.changed()        # already put back
        if changed:
            for k, (o, a) in self._objs.items():  # restore, so later candidates are timed right
                setattr(o, a, self._saved[k])
            return Reason.TIMER_TAMPERING, f"replaced {', '.join(changed)}"
        if self.started:
            what, self.started = sorted(set(self.started)), []
            return Reason.THREADS, f"the candidate started {', '.join(what)}"
        return None
