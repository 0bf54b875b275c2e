"""The clocks that time one trial: CUDA events with a whole-device time and an L2 flush
(:class:`CudaClock`), a host-only clock for CPU functions (:class:`HostClock`), and the buffer
that flushes L2 (:class:`L2Flusher`). evokernel.timing.interleaved runs the trials with them; the
method is described there and in docs/architecture.md (stage 7).

Timer functions (``time.perf_counter``, ``torch.cuda.synchronize``, ``torch.cuda.Event``) are
bound when this module is imported, so a candidate that monkey-patches torch's or time's later
does not change these timings. Patching this module's own names would; the GPU worker's
evokernel.engine.tamper snapshot of evokernel's modules catches and undoes that after each
candidate.
"""
from __future__ import annotations

import time
from typing import Callable, Protocol

import torch
from loguru import logger

from evokernel.config import DEFAULT_HIDE_HOST_MS
from evokernel.timing import spin as device_spin

_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event


def _cuda_device(device: torch.device | int | str | None) -> torch.device:
    """A CUDA device with its index filled in (None or 'cuda' -> the current device)."""
    dev = torch.device("cuda") if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"not a CUDA device: {device}")
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


class L2Flusher:
    """A buffer of 2x the device's L2 size; :meth:`flush` writes all of it (``zero_()``), so
    the next trial finds no useful data in L2 (and L2 full of dirty lines, so writes also pay
    the write-back). Sizes come from ``torch.cuda.get_device_properties(device).L2_cache_size``
    (H200: 60 MB, buffer 120 MB, ~30 us to flush at 4.3 TB/s).
    Raises: ValueError if ``device`` is not CUDA; RuntimeError (torch's) if the device cannot
    be used or allocation fails.
    """

    def __init__(self, device: torch.device | int | str | None = None) -> None:
        self.device = _cuda_device(device)
        l2_bytes = int(getattr(torch.cuda.get_device_properties(self.device),
                               "L2_cache_size", 0))
        if l2_bytes <= 0:
            l2_bytes = 128 * 2**20
            logger.warning("no L2 size reported for {}; flushing 2 x 128 MiB", self.device)
        self.nbytes = 2 * l2_bytes
        self._buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=self.device)

    def flush(self) -> None:
        """Write the whole buffer on the current stream (asynchronous)."""
        self._buffer.zero_()


class Clock(Protocol):
    """What :func:`time_interleaved` needs from a timer; swap in a fake to test on the CPU."""

    def now_s(self) -> float:
        """Monotonic wall time in seconds (for the warm-up and max_time_s budgets)."""

    def run(self, call: Callable[[], object]) -> None:
        """Call once and wait until the device has finished (warm-up)."""

    def trial(self, call: Callable[[], object]) -> tuple[float, float]:
        """One timed trial of ``call``: (event_ms, host_ms)."""


class CudaClock:
    """CUDA events plus a whole-device time (the spin's GPU clock, or host ``perf_counter``
    when ``hide_host_ms`` is 0), with an L2 flush and device-wide synchronizes around every
    trial (see the module docstring). Exceptions from the call or from the
    synchronize (a kernel fault) propagate. Pass ``flusher`` to reuse one L2Flusher (and its
    buffer) across calls; it must be on ``device``."""

    def __init__(self, device: torch.device | int | str | None = None,
                 flusher: L2Flusher | None = None,
                 hide_host_ms: float = DEFAULT_HIDE_HOST_MS) -> None:
        self.flusher = flusher if flusher is not None else L2Flusher(device)
        self.device = self.flusher.device
        if device is not None and _cuda_device(device) != self.device:
            raise ValueError(f"flusher is on {self.device}, not {device}")
        self.spin = None
        if hide_host_ms > 0:
            self.spin = device_spin.DeviceSpin.get(self.device, hide_host_ms)
        with torch.cuda.device(self.device):
            self._start = _CudaEvent(enable_timing=True)
            self._end = _CudaEvent(enable_timing=True)
            self._done = _CudaEvent(enable_timing=True)

    def now_s(self) -> float:
        return _perf_counter()

    def run(self, call: Callable[[], object]) -> None:
        with torch.cuda.device(self.device):
            call()
            _cuda_synchronize(self.device)

    def trial(self, call: Callable[[], object]) -> tuple[float, float]:
        with torch.cuda.device(self.device):     # entered and left outside the timed interval
            self.flusher.flush()
            if self.spin is not None:
                event_ms, done_ms, offset_ms = device_spin.spin_trial(
                    self.spin, self._start, self._end, self._done,
                    lambda: _cuda_synchronize(self.device), call)
                return event_ms, self.spin.whole_device_ms(done_ms, offset_ms)
            _cuda_synchronize(self.device)
            t0 = _perf_counter()
            self._start.record()
            call()
            self._end.record()
            _cuda_synchronize(self.device)
            t1 = _perf_counter()
            return float(self._start.elapsed_time(self._end)), (t1 - t0) * 1e3


class HostClock:
    """Host-only clock for CPU functions: event_ms = host_ms = perf_counter interval. No flush."""

    def now_s(self) -> float:
        return _perf_counter()

    def run(self, call: Callable[[], object]) -> None:
        call()

    def trial(self, call: Callable[[], object]) -> tuple[float, float]:
        t0 = _perf_counter()
        call()
        ms = (_perf_counter() - t0) * 1e3
        return ms, ms


def default_clock(device: torch.device | int | str | None = None,
                  flusher: L2Flusher | None = None,
                  hide_host_ms: float = DEFAULT_HIDE_HOST_MS) -> Clock:
    """CudaClock on a CUDA device (the flusher's, else the current one if ``device`` is None
    and CUDA is available), HostClock otherwise (which ignores ``hide_host_ms``)."""
    if device is None:
        if flusher is not None:
            return CudaClock(flusher=flusher, hide_host_ms=hide_host_ms)
        return CudaClock(hide_host_ms=hide_host_ms) if torch.cuda.is_available() else HostClock()
    if torch.device(device).type == "cuda":
        return CudaClock(device, flusher, hide_host_ms)
    return HostClock()
