"""The GPU trace of one call: which kernels (and copies) it launched, on which streams, and when
each ran on the GPU's own clock, with a marker kernel queued on the call's stream after it returns.

Two checks read it (evokernel.engine.stages.Kernels): whose kernels did the work (the
reference-fallback rule, evokernel.gate.fallback), and whether all of the call's work was done
on its own stream: every kernel and copy the call launched must end before the marker starts
(``CallTrace.late``). The times come from CUPTI's activity records through torch.profiler, taken
by the GPU itself.

So that how busy the host is cannot move this verdict, the GPU is held before the call: a kernel
that takes every thread slot of every SM (evokernel.timing.spin.spin_launch_shape) polls a flag
in pinned host memory, which the host sets only after it has launched the call *and* the marker.
Until then no kernel of the call, on any stream, can start; once the hold ends, the call's kernels
and the marker queued behind them on the call's stream run as the GPU schedules them, and the
marker starts when the call's own-stream work ends, whenever the host got round to launching it.
Without the hold, a host preempted between the call and the marker's launch (under load: ms,
results/h200-2026-12-01-s5/call2) let short side-stream work finish before the marker started.
The hold gives up after HOLD_MAX_MS; the trace then says so (``held`` False).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from loguru import logger

#: Bound at import, before any candidate module runs (as evokernel.timing.spin does).
_COMPILE_KERNEL = getattr(torch.cuda, "_compile_kernel", None)
#: The marker: an empty kernel with a name no library kernel has.
MARKER_NAME = "evokernel_stream_marker"
MARKER_SOURCE = 'extern "C" __global__ void evokernel_stream_marker() {}'
#: The hold: thread 0 of each block marks its block as started in ``started`` (pinned host memory,
#: one word per block), then polls the host's flag (sleeping 1 us between reads, so the pollers
#: cost little PCIe traffic) while the rest of the block waits at a barrier, every thread slot
#: taken. Block 0 writes 1 to ``seen`` when it saw the flag and 2 when it gave up after
#: ``max_us``. Only the host writes ``flag``; only the kernel writes ``started`` and ``seen``
#: (plain stores, no atomics: host-memory atomics over PCIe are not always supported). (torch's
#: NVRTC wrapper passes Python ints as 32-bit ints.)
HOLD_NAME = "evokernel_trace_hold"
HOLD_SOURCE = r"""
extern "C" __global__ void evokernel_trace_hold(volatile int* flag, volatile int* started,
                                                volatile int* seen, int max_us) {
    if (threadIdx.x == 0) {
        started[blockIdx.x] = 1;
        __threadfence_system();
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        int got = 0;
        do {
            got = *flag;
            if (got) break;
            __nanosleep(1000);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < 1000ull * (unsigned long long)max_us);
        if (blockIdx.x == 0) *seen = got ? 1 : 2;
    }
    __syncthreads();
}
"""
#: How long the host waits for every block of the hold to be resident before it calls (ms). A
#: kernel of the call launched on another stream before the hold is resident could take SMs
#: first (one of three passes of a short side-stream cheat under load went unseen that way,
#: results/h200-2026-12-01-s5/call4).
RESIDENT_WAIT_MS = 20.0
#: The longest the hold waits for the host (ms).
HOLD_MAX_MS = 500.0
#: A kernel ending this long after the marker's start is late (CUPTI's timestamps are exact to
#: well under a microsecond; a kernel on the marker's own stream ends before it starts).
LATE_AFTER_US = 1.0

_markers: dict[int, Any] = {}
_holds: dict[int, Any] = {}   # device index -> _Hold, or None when it cannot be made


@dataclass(frozen=True)
class TracedKernel:
    """One GPU activity of a traced call: a kernel, or a copy/memset (``copy``).
    start_us and end_us are on the profiler's clock, in microseconds."""

    name: str
    stream: int
    start_us: float
    end_us: float
    copy: bool = False

    @property
    def gpu_us(self) -> float:
        return max(0.0, self.end_us - self.start_us)


@dataclass(frozen=True)
class CallTrace:
    """What one call launched (``activities``, in start order, the marker and the hold left out),
    when the marker queued after it on the call's stream started (None when it was not recorded),
    whether the call left another stream current (``stream_changed``), and whether the GPU was
    held until the host had launched the call and the marker (``held``; False: the hold gave up,
    and short side-stream work may have ended before the marker was launched)."""

    activities: tuple[TracedKernel, ...]
    marker_start_us: float | None
    stream_changed: bool = False
    held: bool = True

    @property
    def kernels(self) -> list[tuple[str, float]]:
        """(name, device us) of each kernel, in launch order, copies left out (for the
        reference-fallback rule)."""
        return [(a.name, a.gpu_us) for a in self.activities if not a.copy]

    def late(self, after_us: float = LATE_AFTER_US) -> tuple[TracedKernel, ...]:
        """Activities that ended more than ``after_us`` after the marker started: work the call
        left running outside its stream. () when the marker was not recorded."""
        if self.marker_start_us is None:
            return ()
        return tuple(a for a in self.activities if a.end_us > self.marker_start_us + after_us)


def _marker(device: torch.device) -> Callable[[], None]:
    """A launcher of the marker kernel on the current stream (NVRTC through torch's wrapper; a
    one-thread ``torch.cuda._sleep`` where this torch has none)."""
    if _COMPILE_KERNEL is None:
        return lambda: torch.cuda._sleep(1)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _markers:
        with torch.cuda.device(index):
            _markers[index] = _COMPILE_KERNEL(MARKER_SOURCE, MARKER_NAME)
    kernel = _markers[index]
    return lambda: kernel(grid=(1, 1, 1), block=(1, 1, 1), args=[])


class _Hold:
    """The hold kernel of one device and its words in pinned host memory: the host's flag, a
    started mark per block, and the kernel's status (module docstring). Nothing here launches a
    kernel other than the hold itself, so a trace holds only the call's own work."""

    def __init__(self, device: torch.device) -> None:
        from evokernel.timing.spin import spin_launch_shape
        props = torch.cuda.get_device_properties(device)
        self.blocks, self.threads = spin_launch_shape(props.multi_processor_count,
                                                      props.max_threads_per_multi_processor)
        with torch.cuda.device(device):
            self.kernel = _COMPILE_KERNEL(HOLD_SOURCE, HOLD_NAME)
        self.flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self.started = torch.zeros(self.blocks, dtype=torch.int32, pin_memory=True)
        self.seen = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self.resident = False

    def launch(self) -> None:
        """Hold the GPU (on the current stream) until :meth:`release`, and wait (at most
        RESIDENT_WAIT_MS) until every block of the hold runs."""
        self.flag.zero_()
        self.started.zero_()
        self.seen.zero_()
        self.kernel(grid=(self.blocks, 1, 1), block=(self.threads, 1, 1),
                    args=[self.flag, self.started, self.seen, int(HOLD_MAX_MS * 1000)])
        deadline = time.perf_counter() + RESIDENT_WAIT_MS / 1e3
        while int(self.started.sum()) < self.blocks and time.perf_counter() < deadline:
            pass
        self.resident = int(self.started.sum()) == self.blocks

    def release(self) -> None:
        self.flag[0] = 1

    def held(self) -> bool:
        """After a synchronize: whether every block of the hold was resident before the call
        and the hold saw the flag (did not give up)."""
        return self.resident and int(self.seen[0]) == 1


def _hold(device: torch.device) -> _Hold | None:
    """The device's hold, made on first use; None (traces then say ``held`` False) when this
    torch has no NVRTC wrapper or the hold cannot be made, which is logged once."""
    if _COMPILE_KERNEL is None:
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _holds:
        try:
            _holds[index] = _Hold(torch.device("cuda", index))
        except Exception as e:  # noqa: BLE001 -- traces go on unheld, and say so
            logger.warning("the trace's hold could not be made ({}: {}); traces are unheld",
                           type(e).__name__, e)
            _holds[index] = None
    return _holds[index]


def prepare(device: torch.device) -> None:
    """Compile the marker and the hold for ``device`` now (the worker does so at set-up, so that
    they are in place before any candidate runs). Raises: RuntimeError if NVRTC fails."""
    if device.type == "cuda":
        _marker(device)
        _hold(device)


def trace_call(call: Callable[[], object], device: torch.device) -> CallTrace | None:
    """Trace one ``call()`` on ``device``: synchronize, start torch.profiler (CUDA activities),
    call, queue the marker on the stream that was current before the call, synchronize, stop.

    Returns: the CallTrace; None when tracing is not possible (no CUDA, the profiler fails or
        records nothing at all). Exceptions from ``call`` propagate (the profiler is stopped).
    """
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    marker, hold = _marker(device), _hold(device)
    torch.cuda.synchronize(device)
    stream = torch.cuda.current_stream(device)
    try:
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as e:  # noqa: BLE001 -- profiler unavailable: the checks are skipped
        logger.warning("torch.profiler unavailable: {}", e)
        return None
    try:
        if hold is not None:
            hold.launch()
        try:
            call()
        finally:
            changed = torch.cuda.current_stream(device) != stream
            with torch.cuda.stream(stream):
                marker()
            if hold is not None:
                hold.release()
        torch.cuda.synchronize(device)
    except BaseException:
        try:
            prof.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 -- the candidate's exception is the one to report
            pass
        raise
    finally:
        if torch.cuda.current_stream(device) != stream:
            torch.cuda.set_stream(stream)
    try:
        prof.__exit__(None, None, None)
        events = prof.events()
    except Exception as e:  # noqa: BLE001
        logger.warning("torch.profiler: no events: {}", e)
        return None
    held = hold.held() if hold is not None else False
    return _trace_from(events, DeviceType.CUDA, changed, held)


def _trace_from(events: Any, cuda: Any, changed: bool, held: bool) -> CallTrace | None:
    acts, marker_start = [], None
    for ev in events:
        if getattr(ev, "device_type", None) != cuda:
            continue
        name = str(ev.name)
        try:
            start, end = float(ev.time_range.start), float(ev.time_range.end)
        except Exception:  # noqa: BLE001 -- an event without times counts as instantaneous
            start = end = 0.0
        if not (math.isfinite(start) and math.isfinite(end)):
            start = end = 0.0
        if MARKER_NAME in name or (_COMPILE_KERNEL is None and "spin_kernel" in name):
            marker_start = start if marker_start is None else max(marker_start, start)
            continue
        if HOLD_NAME in name:
            continue
        kind = str(getattr(ev, "activity_type", "") or "").lower()
        copy = name.startswith(("Memcpy", "Memset")) or "memcpy" in kind or "memset" in kind
        stream = int(getattr(ev, "device_resource_id", -1) or -1)
        acts.append(TracedKernel(name, stream, start, end, copy))
    if not acts and marker_start is None:
        return None
    acts.sort(key=lambda a: a.start_us)
    return CallTrace(tuple(acts), marker_start, changed, held)
