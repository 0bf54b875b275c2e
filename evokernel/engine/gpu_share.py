"""A GPU shared with another process, noticed: no verdict or time from a contended measurement is
recorded without saying so.

Two signals, read by the evaluator around every candidate (``SharedGpuGuard``):

* NVML (``pynvml``, from the nvidia-ml-py package) lists the processes with a context on the GPU;
  any that is not this process or one of its descendants (the build and GPU workers), nor a
  worker it killed (``retire``), is another user of the GPU. On an H200 it showed a matmul loop
  of another process at once, at 100% utilization (results/h200-2026-12-01-s5/call1/probe.txt). NVML missing or refused gives one
  warning, and the drift watch below still works.
* The reference (PyTorch eager) is timed again with every candidate, interleaved with it; a
  median more than REFERENCE_DRIFT away from the one the worker measured alone at set-up means
  the GPU is not what it was (another process read 1.07 ms as 3.60 ms in one run, issue 12).

Policy (EvalConfig.gpu_sharing): "wait" (default) waits up to ``gpu_wait_s`` for the other
processes to leave before a candidate, and measures a contended candidate once more after
waiting again; what is still contended is marked. "mark" only marks. A marked result carries the
flag ``gpu_contended:<why>`` and says so in its detail; a result measured again after waiting
carries ``gpu_remeasured``; waiting adds ``gpu_waited_s:<seconds>``. ``show`` and ``report``
count them.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from loguru import logger

from evokernel.records import EvalResult, Reason

#: A reference median this far (relative) from its set-up measurement marks the GPU contended.
REFERENCE_DRIFT = 0.15
#: Verdicts that depend on the measured times, so that another process can change them.
TIMING_VERDICTS = frozenset({Reason.OK, Reason.SIDE_STREAM, Reason.IMPOSSIBLE_SPEED,
                             Reason.TIMEOUT})

_warned = threading.Event()


class ProcessLister(Protocol):
    """What the guard needs: the PIDs of other processes on the GPU (() when none or unknown)."""

    def others(self) -> tuple[int, ...]: ...


def _stat_field(pid: int, index: int, proc: Path) -> int | None:
    """Field ``index`` of ``/proc/<pid>/stat`` counted from the state (0), after the command
    name; None when the process is gone or its stat unreadable (proc(5))."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[index])
    except (OSError, ValueError, IndexError):
        return None


def descends_from(pid: int, root: int, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants, by walking the parent PIDs in
    ``/proc/<pid>/stat``. A process whose stat cannot be read counts as not descending."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid == root:
            return True
        parent = _stat_field(pid, 1, proc)
        if parent is None:
            return False
        pid, seen = parent, seen + 1
    return pid == root


#: PIDs of this process's own workers (and their children) that it killed, with each one's start
#: time: NVML may list one for a while after (its context torn down while a hung kernel spins),
#: and once reparented it no longer descends from this process. On the H200 (2026-12-02) a hung
#: candidate's own killed worker was taken for another process, and the hung candidate was
#: measured again: 300 s more. An entry is dropped once its process is gone or its PID belongs to
#: a process started later (PID reuse). Shared by the guards of every GPU.
_retired: dict[int, int] = {}
_retired_lock = threading.Lock()


def _start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat, in clock ticks since
    boot), or None when it is gone or unreadable."""
    return _stat_field(pid, 19, proc)


def descendants(root: int, proc: Path = Path("/proc")) -> set[int]:
    """``root`` and every live process that descends from it (by ``/proc``)."""
    out = {root}
    for entry in proc.iterdir():
        if entry.name.isdecimal() and descends_from(int(entry.name), root, proc):
            out.add(int(entry.name))
    return out


def retire(pids: set[int]) -> None:
    """Count ``pids`` (a worker about to be killed, and its children) as this process's own
    while each lives."""
    with _retired_lock:
        for pid in pids:
            started = _start_time(pid)
            if started is not None:
                _retired[pid] = started


def _own_retired() -> set[int]:
    with _retired_lock:
        for pid, started in list(_retired.items()):
            if _start_time(pid) != started:     # gone, or its PID taken by a newer process
                del _retired[pid]
        return set(_retired)


def _nvml_device(uuid: str) -> tuple[Any, Any]:
    """pynvml (initialised) and the handle of the GPU with ``uuid`` (torch's device uuid, with or
    without the "GPU-" prefix). Raises: whatever pynvml raises (missing, refused, unknown)."""
    import pynvml
    pynvml.nvmlInit()
    name = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    return pynvml, pynvml.nvmlDeviceGetHandleByUUID(name)


class NvmlProcesses:
    """The processes NVML sees on the GPU with ``uuid`` (torch's device uuid, with or without
    the "GPU-" prefix), less this process's own tree. Without NVML, ``others()`` is always ()
    and one warning is logged per process."""

    def __init__(self, uuid: str, root_pid: int | None = None) -> None:
        self.root_pid = os.getpid() if root_pid is None else root_pid
        self._nvml = self._handle = None
        try:
            self._nvml, self._handle = _nvml_device(uuid)
        except Exception as e:  # noqa: BLE001 -- missing, refused, or an unknown uuid
            if not _warned.is_set():
                _warned.set()
                logger.warning("NVML is not available ({}: {}); a GPU shared with another "
                               "process will be noticed only by the reference time drifting",
                               type(e).__name__, e)

    def others(self) -> tuple[int, ...]:
        if self._nvml is None:
            return ()
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:  # noqa: BLE001 -- a transient NVML error: nothing known
            return ()
        listed = {p.pid for p in procs} - _own_retired()
        return tuple(sorted(p for p in listed if not descends_from(p, self.root_pid)))


def free_memory_fraction(uuid: str) -> float | None:
    """The fraction of the memory of the GPU with ``uuid`` (as NvmlProcesses takes it) that is
    free now, from NVML (nvmlDeviceGetMemoryInfo); None when NVML, the GPU or its total is
    unknown. Never raises."""
    try:
        nvml, handle = _nvml_device(uuid)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return float(info.free) / float(info.total) if info.total else None
    except Exception:  # noqa: BLE001 -- missing, refused, or an unknown uuid: not known
        return None


class SharedGpuGuard:
    """Waits for, re-measures and marks candidates evaluated while the GPU was shared.

    Args:
        processes: lists other processes on the GPU (NvmlProcesses, or a fake in tests).
        reference_ms: the reference's median time measured alone at set-up (None: no drift watch).
        policy: "wait" or "mark" (module docstring).
        wait_s: the longest wait for other processes to leave, per wait.
        poll_s: how often to look while waiting.
        sleep, clock: time.sleep and time.monotonic (tests pass fakes).
    """

    def __init__(self, processes: ProcessLister, reference_ms: float | None, *,
                 policy: str = "wait", wait_s: float = 120.0, poll_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if policy not in ("wait", "mark"):
            raise ValueError(f"gpu_sharing must be 'wait' or 'mark', got {policy!r}")
        self.processes, self.reference_ms = processes, reference_ms
        self.policy, self.wait_s, self.poll_s = policy, wait_s, poll_s
        self.sleep, self.clock = sleep, clock

    def wait_until_free(self) -> tuple[float, tuple[int, ...]]:
        """With policy "wait", poll until no other process is on the GPU or ``wait_s`` passed.
        Returns (seconds waited, the other PIDs still there)."""
        others = self.processes.others()
        start = self.clock()
        if others and self.policy == "wait":
            logger.warning("another process uses the GPU (pid {}); waiting up to {:.0f} s",
                           ", ".join(map(str, others)), self.wait_s)
            while others and self.clock() - start < self.wait_s:
                self.sleep(self.poll_s)
                others = self.processes.others()
        return self.clock() - start, others

    def contention(self, result: EvalResult, before: tuple[int, ...]) -> str:
        """Why ``result`` was measured on a shared GPU ("" when it was not): other processes
        before or after it, or a reference median that drifted from its set-up measurement."""
        after = self.processes.others()
        pids = sorted(set(before) | set(after))
        if pids:
            return f"other processes on the GPU (pid {', '.join(map(str, pids))})"
        ref = result.reference_ms
        if self.reference_ms and ref and abs(ref / self.reference_ms - 1.0) > REFERENCE_DRIFT:
            return (f"the reference read {ref:.4f} ms against {self.reference_ms:.4f} ms at "
                    f"set-up ({ref / self.reference_ms - 1.0:+.0%})")
        return ""

    def run(self, evaluate: Callable[[], EvalResult]) -> EvalResult:
        """``evaluate()`` once the GPU is free (or the wait is over); a contended timing verdict
        is measured once more after waiting again; what is still contended is marked."""
        waited, before = self.wait_until_free()
        result = evaluate()
        why = self.contention(result, before)
        remeasured = False
        if why and self.policy == "wait" and result.reason in TIMING_VERDICTS:
            more, still = self.wait_until_free()
            waited += more
            if not still:
                logger.info("measuring {} again: {}", result.candidate_id, why)
                result, remeasured = evaluate(), True
                why = self.contention(result, ())
        return mark(result, why, waited, remeasured)


def mark(result: EvalResult, why: str, waited_s: float, remeasured: bool) -> EvalResult:
    """``result`` with the sharing flags and note (module docstring); unchanged when the GPU was
    free and nothing was waited for."""
    flags = list(result.flags)
    detail = result.detail
    if waited_s >= 0.5:
        flags.append(f"gpu_waited_s:{waited_s:.0f}")
    if remeasured:
        flags.append("gpu_remeasured")
    if why:
        flags.append(f"gpu_contended:{why}"[:200])
        detail = f"{detail}; measured on a shared GPU: {why}, so its times may be off"
    if flags == list(result.flags):
        return result
    return dataclasses.replace(result, flags=tuple(flags), detail=detail)
