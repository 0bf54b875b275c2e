"""A kernel that holds every thread slot of every multiprocessor for a set time.

Timing (evokernel.timing, ``TimingConfig.hide_host_ms``) queues it before a trial's start event:
while the GPU spins, the host runs the timed call's Python, dispatch and launches, so the event
time holds the GPU's work alone, as with ``triton.testing.do_bench``, whose queued repetitions also
let the host run ahead. Because the spin fills every SM, no kernel of another stream can run beside
it: work a candidate moves to a side stream starts after the start event, where the device-wide
time of the trial still counts it (``timing.side_stream_suspect``).

Measured on an H200 (results/h200-2026-11-30-s3/call4): with the host's time hidden (a
``torch.cuda._sleep`` spin there), evokernel's times of the five seed kernels and their references
agreed with do_bench within 0.35%; with the device idle at the start event they differed by up to
6.6% (26-55 us of host time per call).

Not covered: a copy engine (``cudaMemcpyAsync`` on another stream) does not need an SM, so a copy
can overlap the spin; only the work of such a copy, not a kernel's, could hide there.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

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


def spin_launch_shape(sm_count: int, max_threads_per_sm: int) -> tuple[int, int]:
    """(blocks, threads per block) that take every thread slot of every SM: blocks of
    min(1024, max_threads_per_sm) threads, as many per SM as fit (H200: 132 SMs x 2048 threads
    -> 264 blocks of 1024). Raises ValueError for non-positive counts."""
    if sm_count <= 0 or max_threads_per_sm <= 0:
        raise ValueError(f"need positive counts, got {sm_count} SMs, {max_threads_per_sm} "
                         "threads per SM")
    threads = min(1024, max_threads_per_sm)
    return sm_count * (max_threads_per_sm // threads), threads


def _nvrtc_compiler() -> Callable[..., Any]:
    """torch's NVRTC kernel compiler (``torch.cuda.compile_kernel``, ``_compile_kernel`` before it
    was public). Raises RuntimeError naming the torch version where it has neither."""
    for name in ("compile_kernel", "_compile_kernel"):
        fn = getattr(torch.cuda, name, None)
        if callable(fn):
            return fn
    raise RuntimeError(f"hide_host_ms needs torch.cuda.compile_kernel (NVRTC), which torch "
                       f"{torch.__version__} lacks; set timing.hide_host_ms = 0")


class DeviceSpin:
    """The spin kernel, compiled once (NVRTC, ~0.1 s) for ``device``; :meth:`launch` queues it
    on the current stream for ``spin_ms`` milliseconds (asynchronous).

    Raises: ValueError if spin_ms is not in (0, 1000]; RuntimeError if NVRTC is unavailable or
    the compile fails.
    """

    def __init__(self, device: torch.device, spin_ms: float) -> None:
        if not 0 < spin_ms <= 1000:
            raise ValueError(f"spin_ms must be in (0, 1000], got {spin_ms}")
        self.device = device
        self.spin_us = max(1, round(spin_ms * 1000))
        props = torch.cuda.get_device_properties(device)
        self.blocks, self.threads = spin_launch_shape(props.multi_processor_count,
                                                      props.max_threads_per_multi_processor)
        with torch.cuda.device(device):
            self._kernel = _nvrtc_compiler()(SPIN_SOURCE, SPIN_NAME)

    def launch(self) -> None:
        self._kernel(grid=(self.blocks, 1, 1), block=(self.threads, 1, 1), args=[self.spin_us])
