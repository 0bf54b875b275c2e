"""A kernel that holds every thread slot of every multiprocessor for a set time, queued before a
trial's start event when ``TimingConfig.hide_host_ms > 0`` (evokernel.timing.interleaved).

While the GPU spins, the host runs the timed call's Python, dispatch and launches, so the event
time holds the GPU's work alone, as with ``triton.testing.do_bench``, whose queued repetitions also
let the host run ahead. On an H200 (results/h200-2026-11-30-s3/call4), hiding the host time this
way, with a one-thread ``torch.cuda._sleep`` spin, brought evokernel's times of the five seed
kernels and their references within 0.35% of do_bench's. Without it they were up to 6.6% apart:
each call had up to 55 us of host time (layernorm seed +26 us, cuDNN conv2d +55 us). With
this module's spin, the default since session 4, the five seeds' speedups agreed with do_bench
within 0.54% and varied at most 1.26% over five separate evaluators
(results/h200-2026-11-30-s4/call2/bench_fidelity.md), and every gate-report fixture kept its
verdict (call2/gate_report/).

A spin must not become a place to hide work. So that side-stream work still shows, the design is:
* The spin runs on a stream of the highest priority, so no stream of lower priority has its
  pending blocks placed ahead of the spin's (a candidate can create a stream of equal priority;
  the deviation below is the defence). The timed stream waits for the spin.
* Its blocks take every thread slot of every SM, so no other kernel's block can be resident
  beside them.
* A short spin comes first and keeps the GPU busy while the host queues the marker event and
  the main spin. The main spin then starts as the marker is stamped, and "marker -> start event"
  is its real length.
* Each spin thread polls ``%globaltimer`` for a fixed time from its own start. A kernel that took
  SMs before the spin's blocks delays it, and a patched launch skips it. Either way "marker ->
  start" moves away from the nominal length (plus a constant offset calibrated at set-up), and
  :meth:`DeviceSpin.deviation_ms` is added to the trial's whole-device time.
  ``timing.side_stream_suspect`` then sees it.

Known gaps: work queued ahead of the lead spin (possible only from a native thread launching
after the synchronize) is counted nowhere; a candidate in the same process that patches the
launch path could shrink the spin's grid (evokernel.engine.tamper watches those functions; the README
says what in-process checks cannot promise).

Not covered: a copy engine (``cudaMemcpyAsync`` on another stream) needs no SM, so a copy can
overlap the spin, and with it up to ``hide_host_ms`` (plus the 0.1 ms lead) of the host's own
work. ``TimingConfig`` caps hide_host_ms at 2 ms for this reason; the physical floor
(``Reason.IMPOSSIBLE_SPEED``) is the other bound.
"""
from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

#: Bound at import (evokernel.timing.clocks imports this module, before any candidate module runs), so
#: that replacing ``torch.cuda._compile_kernel`` later changes nothing (None where this torch has
#: no NVRTC wrapper). The launch path (``torch.cuda._utils._CudaKernel.__call__``) and the
#: stream waits are watched by evokernel.engine.tamper instead.
_COMPILE_KERNEL = getattr(torch.cuda, "_compile_kernel", None)

#: The spin: each thread polls the global nanosecond timer until ``spin_us`` have passed.
SPIN_SOURCE = r"""
extern "C" __global__ void evokernel_device_spin(int spin_us) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    const unsigned long long stop = start + 1000ull * (unsigned long long)spin_us;
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now < stop);
}
"""
SPIN_NAME = "evokernel_device_spin"
#: The short spin that covers the host's queueing of the marker and the main spin.
LEAD_US = 100


def spin_launch_shape(sm_count: int, max_threads_per_sm: int) -> tuple[int, int]:
    """(blocks, threads per block) that take every thread slot of every SM: the fewest blocks
    per SM whose size divides the SM's thread count, is a whole number of warps and is at most
    1024 (H200: 132 SMs x 2048 threads -> 264 blocks of 1024; 1536 threads -> 2 x 768).
    Raises ValueError for non-positive counts or a thread count no such block size divides."""
    if sm_count <= 0 or max_threads_per_sm <= 0:
        raise ValueError(f"need positive counts, got {sm_count} SMs, {max_threads_per_sm} "
                         "threads per SM")
    for per_sm in range(1, max_threads_per_sm // 32 + 1):
        threads, rest = divmod(max_threads_per_sm, per_sm)
        if not rest and threads <= 1024 and threads % 32 == 0:
            return sm_count * per_sm, threads
    raise ValueError(f"no block size of whole warps <= 1024 divides {max_threads_per_sm}")


class DeviceSpin:
    """The spin kernel for ``device``, compiled once per (device, length) and process (NVRTC,
    :meth:`get`), with its own highest-priority stream and marker events.

    :meth:`queue` queues the lead spin, the marker and the ``spin_ms`` spin, and makes the current
    stream wait for them (asynchronous). After the trial, :meth:`deviation_ms` reads how far the
    spin's real length was from ``spin_ms``.
    Raises: ValueError if spin_ms is not in (0, 1000]; RuntimeError if NVRTC is unavailable or
    the compile fails.
    """

    _made: dict[tuple[torch.device, int], "DeviceSpin"] = {}

    @classmethod
    def get(cls, device: torch.device, spin_ms: float) -> "DeviceSpin":
        """The process's DeviceSpin for (device, spin_ms), made (and calibrated) on first use.
        Not thread-safe: a worker times from one thread."""
        device = torch.device(device)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = (device, max(1, round(spin_ms * 1000)))
        if key not in cls._made:
            cls._made[key] = cls(device, spin_ms)
        return cls._made[key]

    def __init__(self, device: torch.device, spin_ms: float) -> None:
        if not 0 < spin_ms <= 1000:
            raise ValueError(f"spin_ms must be in (0, 1000], got {spin_ms}")
        if _COMPILE_KERNEL is None:
            raise RuntimeError(f"timing.hide_host_ms needs torch.cuda._compile_kernel (NVRTC, "
                               f"torch >= 2.8), which torch {torch.__version__} lacks; use "
                               f"torch >= 2.8, or set EvalConfig(timing=TimingConfig("
                               f"hide_host_ms=0)) to time with the host time counted")
        self.device = device
        self.spin_us = max(1, round(spin_ms * 1000))
        props = torch.cuda.get_device_properties(device)
        self.blocks, self.threads = spin_launch_shape(props.multi_processor_count,
                                                      props.max_threads_per_multi_processor)
        with torch.cuda.device(device):
            self._kernel: Any = _COMPILE_KERNEL(SPIN_SOURCE, SPIN_NAME)
            _, highest = torch.cuda.Stream.priority_range()
            self.stream = torch.cuda.Stream(device, priority=highest)
            self._marker = torch.cuda.Event(enable_timing=True)
            self._fence = torch.cuda.Event()
            self.baseline_ms, self.done_gap_ms = self.calibrate()

    def _launch(self, us: int) -> None:
        self._kernel(grid=(self.blocks, 1, 1), block=(self.threads, 1, 1), args=[us],
                     stream=self.stream)

    def queue(self) -> None:
        """Lead spin, marker, spin on the spin stream; the current stream waits for them."""
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        self._launch(LEAD_US)
        self._marker.record(self.stream)
        self._launch(self.spin_us)
        self._fence.record(self.stream)
        current.wait_event(self._fence)

    def marker_offset_ms(self, start: Any) -> float:
        """marker -> ``start`` minus the spin's length, in ms, once ``start`` (recorded on the
        current stream right after :meth:`queue`) has completed."""
        return float(self._marker.elapsed_time(start)) - self.spin_us / 1000.0

    def calibrate(self, trials: int = 21) -> tuple[float, float]:
        """Times ``trials`` empty trials (:func:`spin_trial` with a call that queues nothing).
        Returns, in ms:

        * ``baseline_ms``: the median marker offset (:meth:`marker_offset_ms`), the constant
          part of it (the main spin's start after the marker, the cross-stream wait);
        * ``done_gap_ms``: the median of start->done - start->end, the constant part of the
          whole-device time that is no GPU work: the host's wake-up from the synchronize and
          its queueing of the ``done`` event. On an H200 (session 4, call 1) it was 0.04-0.05 ms
          in a bare process and ~0.06 ms in a GPU worker, more than ``side_stream_suspect``'s
          slack leaves for kernels of a few tens of microseconds.

        Runs at set-up (:meth:`get`), before any candidate is loaded. Launches the spin, so a
        spin that cannot run fails here and not in a candidate's timing.
        Raises: RuntimeError (CUDA's) if the spin cannot be launched."""
        with torch.cuda.device(self.device):
            start, end, done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            offsets, gaps = [], []
            for _ in range(trials):
                event_ms, done_ms, offset_ms = spin_trial(
                    self, start, end, done, lambda: torch.cuda.synchronize(self.device),
                    lambda: None)
                offsets.append(offset_ms)
                gaps.append(done_ms - event_ms)
        return statistics.median(offsets), statistics.median(gaps)

    def deviation_ms(self, offset_ms: float) -> float:
        """|``offset_ms`` (:meth:`marker_offset_ms`) - calibrated baseline| in ms: how far the
        spin's real length was from its nominal one."""
        return abs(offset_ms - self.baseline_ms)

    def whole_device_ms(self, done_ms: float, offset_ms: float) -> float:
        """The trial's whole-device time in ms: start->done (``done_ms``) less the calibrated
        ``done_gap_ms``, plus the spin's :meth:`deviation_ms`. Work on any stream after the
        start event, or work that delayed the spin, makes it exceed the event time."""
        return done_ms - self.done_gap_ms + self.deviation_ms(offset_ms)


def spin_trial(spin: Any, start: Any, end: Any, done: Any, synchronize: Callable[[], None],
               call: Callable[[], object]) -> tuple[float, float, float]:
    """One trial with the host's time hidden, after the L2 flush: synchronize the whole device
    (the flush is done and nothing else runs), queue the spin (:meth:`DeviceSpin.queue`), record
    ``start``, call, record ``end``, synchronize the whole device, record ``done`` and wait for it.
    spin: a DeviceSpin (or any object with ``queue()`` and ``marker_offset_ms(start)``).
    Returns (start->end, start->done, marker offset) in ms: the call's GPU time on the current
    stream; the time from the start event until all of the device's work, side streams included,
    was done, plus the synchronize's wake-up and one event record; and the spin's
    :meth:`DeviceSpin.marker_offset_ms`."""
    synchronize()
    spin.queue()
    start.record()
    call()
    end.record()
    synchronize()
    done.record()
    done.synchronize()
    return (float(start.elapsed_time(end)), float(start.elapsed_time(done)),
            spin.marker_offset_ms(start))
