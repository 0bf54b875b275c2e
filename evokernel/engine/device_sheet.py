"""The GPU's facts a kernel engineer tunes against: one dict, from torch's device properties and
the measured peaks (evokernel.timing.floor.DevicePeaks).

The GPU worker puts this dict into its info (``Session.info``), which the search passes to the
operators as ``SearchContext.device``; evokernel.operators.prompts renders its keys as the
prompts' GPU sheet. Keys carry their units; a key is left out when the device or the table
below does not give it. Only FP32 rates are listed: the rates of lower precisions (TF32, BF16)
are paths the precision gate rejects for an FP32 problem, so they are not kernel targets.

Figures not read from the device come from the CUDA C++ Programming Guide (release 13.0):
"Compute Capabilities", table "Technical Specifications per Compute Capability" (resident
blocks per SM, 255 registers per thread, 1024 threads per block) and "Arithmetic Instructions"
(FP32 add/multiply/FMA results per clock per SM); thread-block clusters, distributed shared
memory and the tensor memory accelerator (TMA) from its "Thread Block Clusters" and
"Asynchronous Data Copies" sections (compute capability 9.0 and later; 8 blocks per portable
cluster). ``cp.async`` needs compute capability 8.0.
"""
from __future__ import annotations

from typing import Any

#: FP32 fused multiply-add lanes per SM by compute capability (results per clock per SM).
FP32_LANES_PER_SM: dict[tuple[int, int], int] = {(8, 0): 64, (8, 6): 128, (8, 7): 128,
                                                  (8, 9): 128, (9, 0): 128}
#: Maximum resident thread blocks per SM by compute capability.
MAX_BLOCKS_PER_SM: dict[tuple[int, int], int] = {(8, 0): 32, (8, 6): 16, (8, 7): 16,
                                                  (8, 9): 24, (9, 0): 32}
MAX_REGISTERS_PER_THREAD = 255
PORTABLE_CLUSTER_BLOCKS = 8


def _prop(props: Any, name: str) -> int | None:
    value = getattr(props, name, None)
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def _kib(n: int | None) -> int | None:
    return None if n is None else n // 1024


def device_sheet(props: Any, peaks: Any = None, arch: str | None = None) -> dict[str, Any]:
    """The GPU sheet of one device.

    Args:
        props: ``torch.cuda.get_device_properties(device)`` (any object with its attribute
            names: name, major, minor, multi_processor_count, regs_per_multiprocessor,
            shared_memory_per_multiprocessor, shared_memory_per_block,
            shared_memory_per_block_optin, max_threads_per_multi_processor, warp_size,
            L2_cache_size, total_memory, clock_rate and memory_clock_rate in kHz,
            memory_bus_width in bits; missing ones are left out).
        peaks: the measured DevicePeaks (copy_gbs, fp32_tflops, and read_gbs / write_gbs where
            it has them), or None.
        arch: the arch the candidates are built for ("9.0"), or None.
    Returns: a dict with keys device, capability, arch, sm_count, registers_per_sm,
        max_registers_per_thread, max_threads_per_sm, max_warps_per_sm, max_threads_per_block,
        max_blocks_per_sm, shared_mem_per_sm_kb, shared_mem_per_block_kb,
        shared_mem_per_block_optin_kb, l2_mb, total_memory_gb, hbm_peak_gbs (2 x memory clock x
        bus width, double data rate), copy_gbs (measured: bytes read + written per second / 1e9
        of a 1 GiB device copy), read_gbs and write_gbs (measured read-only and write-only
        bandwidth, when the peaks have them), fp32_tflops (measured: an 8192^3 FP32 matmul,
        TF32 off),
        fp32_peak_tflops (SMs x FP32 lanes x 2 FLOP x clock), clusters (bool),
        max_cluster_blocks_portable, async_copy (the copy engines a kernel may use).
    Raises: ValueError if ``props`` has no major/minor compute capability.
    """
    major, minor = getattr(props, "major", None), getattr(props, "minor", None)
    if not isinstance(major, int) or not isinstance(minor, int):
        raise ValueError(f"device_sheet: props has no compute capability (major={major!r}, "
                         f"minor={minor!r})")
    cc = (major, minor)
    sms = _prop(props, "multi_processor_count")
    threads_sm, warp = _prop(props, "max_threads_per_multi_processor"), _prop(props, "warp_size")
    l2, total = _prop(props, "L2_cache_size"), _prop(props, "total_memory")
    mem_khz, bus_bits = _prop(props, "memory_clock_rate"), _prop(props, "memory_bus_width")
    clock_khz, lanes = _prop(props, "clock_rate"), FP32_LANES_PER_SM.get(cc)
    sheet: dict[str, Any] = {
        "device": str(getattr(props, "name", "unknown GPU")),
        "capability": f"{major}.{minor}", "arch": arch, "sm_count": sms,
        "registers_per_sm": _prop(props, "regs_per_multiprocessor"),
        "max_registers_per_thread": MAX_REGISTERS_PER_THREAD,
        "max_threads_per_sm": threads_sm,
        "max_warps_per_sm": threads_sm // warp if threads_sm and warp else None,
        "max_threads_per_block": _prop(props, "max_threads_per_block") or 1024,
        "max_blocks_per_sm": MAX_BLOCKS_PER_SM.get(cc),
        "shared_mem_per_sm_kb": _kib(_prop(props, "shared_memory_per_multiprocessor")),
        "shared_mem_per_block_kb": _kib(_prop(props, "shared_memory_per_block")),
        "shared_mem_per_block_optin_kb": _kib(_prop(props, "shared_memory_per_block_optin")),
        "l2_mb": round(l2 / 2**20, 1) if l2 else None,
        "total_memory_gb": round(total / 2**30, 1) if total else None,
        "hbm_peak_gbs": (round(2 * mem_khz * 1e3 * bus_bits / 8 / 1e9)
                         if mem_khz and bus_bits else None),
        "copy_gbs": getattr(peaks, "copy_gbs", None),
        "read_gbs": getattr(peaks, "read_gbs", None),
        "write_gbs": getattr(peaks, "write_gbs", None),
        "fp32_tflops": getattr(peaks, "fp32_tflops", None),
        "fp32_peak_tflops": (round(sms * lanes * 2 * clock_khz * 1e3 / 1e12, 1)
                             if sms and lanes and clock_khz else None),
        "clusters": cc >= (9, 0),
        "max_cluster_blocks_portable": PORTABLE_CLUSTER_BLOCKS if cc >= (9, 0) else None,
        "async_copy": ("cp.async, TMA (cp.async.bulk.tensor)" if cc >= (9, 0)
                       else "cp.async" if cc >= (8, 0) else "none"),
    }
    return {k: v for k, v in sheet.items() if v is not None}
