"""evokernel.engine.device_sheet: the GPU sheet from device properties and measured peaks. The
properties below are H200-like values typed in for the test (not read from a device); the GPU
test reads the real ones."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from evokernel.engine.device_sheet import device_sheet

H200_LIKE = SimpleNamespace(
    name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
    regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=233472,
    shared_memory_per_block=49152, shared_memory_per_block_optin=232448,
    max_threads_per_multi_processor=2048, warp_size=32, L2_cache_size=60 * 2**20,
    total_memory=143771 * 2**20, clock_rate=1980000, memory_clock_rate=3201000,
    memory_bus_width=6144)
PEAKS = SimpleNamespace(copy_gbs=4021.5, read_gbs=4310.0, write_gbs=4150.0, fp32_tflops=51.2,
                        tf32_tflops=378.0, bf16_tflops=710.0)


def test_sheet_has_what_an_engineer_tunes_against():
    s = device_sheet(H200_LIKE, PEAKS, "9.0")
    assert s["device"] == "NVIDIA H200" and s["capability"] == "9.0" and s["arch"] == "9.0"
    assert (s["sm_count"], s["registers_per_sm"], s["max_threads_per_sm"]) == (132, 65536, 2048)
    assert (s["max_warps_per_sm"], s["max_blocks_per_sm"], s["max_threads_per_block"]) == \
        (64, 32, 1024)
    assert (s["shared_mem_per_sm_kb"], s["shared_mem_per_block_kb"],
            s["shared_mem_per_block_optin_kb"]) == (228, 48, 227)
    assert s["l2_mb"] == 60.0 and s["total_memory_gb"] == 140.4
    assert s["hbm_peak_gbs"] == 4917                    # 2 x 3.201 GHz x 768 bytes
    assert s["copy_gbs"] == 4021.5 and s["fp32_tflops"] == 51.2
    assert (s["read_gbs"], s["write_gbs"]) == (4310.0, 4150.0)
    assert s["fp32_peak_tflops"] == 66.9                # 132 SMs x 128 lanes x 2 x 1.98 GHz
    assert s["clusters"] is True and s["max_cluster_blocks_portable"] == 8
    assert "TMA" in s["async_copy"]


def test_no_rates_of_lower_precisions():
    s = device_sheet(H200_LIKE, PEAKS, "9.0")
    assert not any(k.startswith(("tf32", "bf16", "fp16")) for k in s)
    assert 378.0 not in s.values() and 710.0 not in s.values()


def test_older_or_sparse_devices_leave_unknown_keys_out():
    a100ish = SimpleNamespace(name="A100", major=8, minor=0, multi_processor_count=108)
    s = device_sheet(a100ish)
    assert s["clusters"] is False and "max_cluster_blocks_portable" not in s
    assert s["async_copy"] == "cp.async" and s["max_blocks_per_sm"] == 32
    assert "copy_gbs" not in s and "l2_mb" not in s and "fp32_peak_tflops" not in s
    with pytest.raises(ValueError, match="compute capability"):
        device_sheet(SimpleNamespace(name="x"))


@pytest.mark.gpu
def test_sheet_of_the_real_device():
    import torch
    s = device_sheet(torch.cuda.get_device_properties(0), None, "9.0")
    print(s)
    assert s["sm_count"] >= 1 and s["registers_per_sm"] >= 32768
    assert s["shared_mem_per_block_optin_kb"] >= s["shared_mem_per_block_kb"] >= 48
    assert s["max_threads_per_sm"] >= 1024
