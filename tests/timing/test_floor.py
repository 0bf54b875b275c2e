"""evokernel.timing.floor: FLOP and byte counts, the floor, the impossible-speed rule, the peaks cache."""
import json

import pytest
import torch
import torch.nn as nn

from evokernel.timing.floor import (IMPOSSIBLE_MARGIN, DevicePeaks, bound, compute_floor_ms,
                                    count_flops, impossible, measure_peaks, memory_floor_ms,
                                    min_bytes, peaks_path)

PEAKS = DevicePeaks(device_name="Fake GPU", copy_gbs=4000.0, fp32_tflops=50.0, tf32_tflops=400.0,
                    bf16_tflops=800.0, torch_version=torch.__version__, measured_at="2025-01-01",
                    read_gbs=4200.0, write_gbs=3900.0)


class MatMul(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class DataDependent(nn.Module):
    """.item() has no meta value: count_flops must fall back to a real run."""

    def forward(self, a, b):
        scale = a.abs().sum().item()
        return torch.matmul(a, b) * scale


# ---- count_flops -----------------------------------------------------------------------------

@pytest.mark.parametrize("meta", [True, False])
def test_count_flops_matmul(meta):
    m, k, n = 3, 7, 5
    assert count_flops(MatMul(), (torch.randn(m, k), torch.randn(k, n)), meta=meta) == 2 * m * n * k


def test_count_flops_conv2d():
    # out 8x8: 2 * N(2) * C_out(8) * H_out W_out(64) * C_in(3) * kh kw(9) = 55,296 (bias not counted)
    conv = nn.Conv2d(3, 8, kernel_size=3)
    assert count_flops(conv, [torch.randn(2, 3, 10, 10)]) == 55_296
    # stride 2, padding 1, groups 2: out 5x5, C_in per group 2: 2 * 1 * 6 * 25 * 2 * 9 = 5,400
    grouped = nn.Conv2d(4, 6, kernel_size=3, stride=2, padding=1, groups=2)
    assert count_flops(grouped, [torch.randn(1, 4, 9, 9)]) == 5_400


def test_count_flops_linear_and_elementwise():
    lin = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Softmax(dim=-1))
    assert count_flops(lin, [torch.randn(4, 16)]) == 2 * 4 * 16 * 32   # ReLU/softmax count 0


def test_count_flops_falls_back_to_real_run():
    a, b = torch.randn(4, 6), torch.randn(6, 2)
    assert count_flops(DataDependent(), (a, b)) == 2 * 4 * 2 * 6


class Spy(nn.Module):
    """Records the devices its forward sees, parameters included."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 2))
        self.seen = []

    def forward(self, a):
        self.seen.append((a.device.type, self.w.device.type))
        return a @ self.w


def test_count_flops_runs_on_meta_without_compute():
    spy = Spy()
    assert count_flops(spy, [torch.randn(4, 6)]) == 2 * 4 * 2 * 6
    assert spy.seen == [("meta", "meta")]
    assert spy.w.device.type == "cpu"                        # the model itself is untouched
    assert count_flops(spy, [torch.randn(4, 6)], meta=False) == 2 * 4 * 2 * 6
    assert spy.seen[-1] == ("cpu", "cpu")


# ---- min_bytes -------------------------------------------------------------------------------

def test_min_bytes_counts_inputs_params_and_outputs():
    lin = nn.Linear(5, 3)                                    # weight 15 + bias 3 fp32
    x = torch.randn(4, 5)                                    # 20 fp32
    y = lin(x).half()                                        # 12 fp16
    assert min_bytes([x, *lin.parameters()], y) == 4 * (20 + 15 + 3) + 2 * 12


def test_min_bytes_dedup_broadcast_nesting():
    x = torch.randn(4, 5)
    row = torch.randn(1, 5).expand(4, 5)                     # 5 distinct elements
    assert min_bytes([x, x], []) == 80                       # same tensor passed twice
    assert min_bytes([row], None) == 20
    assert min_bytes({"a": [x, 3, "s"], "b": (row,)}, (torch.empty(0),)) == 100
    assert min_bytes([x[:2], x[2:]], []) == 80               # disjoint views of one storage
    meta = torch.empty(10, 10, device="meta", dtype=torch.bfloat16)
    assert min_bytes([meta], [meta]) == 400


# ---- the memory floor, the compute floor, impossible --------------------------------------

def test_the_memory_floor_uses_the_fastest_measured_byte_rate():
    nbytes = 2 * 4096 * 65536 * 4                            # softmax: read once, write once
    assert PEAKS.bandwidth_gbs == 4200.0                     # the read rate beats the copy's
    assert memory_floor_ms(nbytes, PEAKS) == pytest.approx(nbytes / 4200e9 * 1e3)


def test_the_compute_floor_is_the_fp32_rate_and_only_information():
    n = 4096
    flops, nbytes = 2 * n**3, 3 * n * n * 4
    fp32 = compute_floor_ms(flops, PEAKS)
    assert fp32 == pytest.approx(flops / 50e12 * 1e3)        # the FP32 rate, not TF32's
    assert compute_floor_ms(flops, PEAKS, torch.bfloat16) == pytest.approx(flops / 800e12 * 1e3)
    memory = memory_floor_ms(nbytes, PEAKS)
    assert bound(memory, fp32) == "compute" and bound(memory, 0.0) == "memory"


def test_diag_matmul_computed_elementwise_is_not_impossible():
    """KernelBench level 1 problem 12, torch.diag(A) @ B with N = 4096: an exact element-wise
    kernel measured 0.0849 ms on an H200, which the old FLOP floor (0.3452 ms) rejected. Its
    memory floor, A and B read once and the output written once, is far below that time."""
    n = 4096
    nbytes = (n + 2 * n * n) * 4
    h200 = DevicePeaks(device_name="H200", copy_gbs=4300.0, fp32_tflops=51.0, tf32_tflops=400.0,
                       bf16_tflops=780.0, torch_version="x", measured_at="x", read_gbs=4400.0,
                       write_gbs=4100.0)
    floor = memory_floor_ms(nbytes, h200)
    assert floor == pytest.approx(0.0305, rel=0.02)
    assert not impossible(0.0849, floor)
    assert compute_floor_ms(2 * n**3, h200) > 0.0849          # the FLOP figure would have


def test_floors_reject_bad_arguments():
    with pytest.raises(ValueError):
        compute_floor_ms(-1, PEAKS)
    with pytest.raises(ValueError):
        memory_floor_ms(-1, PEAKS)
    with pytest.raises(ValueError):
        compute_floor_ms(10, PEAKS, torch.int8)
    zero = DevicePeaks(**{**PEAKS.to_dict(), "copy_gbs": 0.0, "read_gbs": 0.0, "write_gbs": 0.0})
    with pytest.raises(ValueError):
        memory_floor_ms(10, zero)


def test_impossible():
    assert IMPOSSIBLE_MARGIN == 0.8
    assert impossible(0.79, 1.0)
    assert not impossible(0.8, 1.0)
    assert not impossible(1.2, 1.0)
    assert impossible(0.99, 1.0, margin=1.0)
    assert not impossible(0.5, 0.0)                          # no floor: nothing is impossible
    with pytest.raises(ValueError):
        impossible(1.0, 1.0, margin=1.5)
    with pytest.raises(ValueError):
        impossible(float("nan"), 1.0)


def test_old_peaks_without_read_and_write_rates_are_measured_again(tmp_path):
    path = peaks_path(tmp_path, "Fake GPU", torch.__version__)
    path.parent.mkdir(parents=True)
    old = {k: v for k, v in PEAKS.to_dict().items() if k not in ("read_gbs", "write_gbs")}
    path.write_text(json.dumps(old))
    calls = []
    got = measure_peaks(0, tmp_path, measure_fn=lambda d: (calls.append(d), PEAKS)[1],
                        device_name="Fake GPU")
    assert got == PEAKS and calls == [0]


# ---- measure_peaks cache ---------------------------------------------------------------------

def test_peaks_cache_round_trip(tmp_path):
    calls = []

    def fake_measure(device):
        calls.append(device)
        return PEAKS

    first = measure_peaks("cuda:0", tmp_path, measure_fn=fake_measure, device_name="Fake GPU")
    path = peaks_path(tmp_path, "Fake GPU", torch.__version__)
    assert first == PEAKS and calls == ["cuda:0"]
    assert path.parent == tmp_path / "peaks" and path.exists()
    assert json.loads(path.read_text())["copy_gbs"] == 4000.0
    second = measure_peaks("cuda:0", tmp_path, measure_fn=fake_measure, device_name="Fake GPU")
    assert second == PEAKS and len(calls) == 1                # read from the cache


def test_peaks_cache_remeasures_on_mismatch_or_corruption(tmp_path):
    calls = []

    def fake_measure(device):
        calls.append(device)
        return PEAKS

    path = peaks_path(tmp_path, "Fake GPU", torch.__version__)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert measure_peaks(0, tmp_path, measure_fn=fake_measure, device_name="Fake GPU") == PEAKS
    path.write_text(json.dumps({**PEAKS.to_dict(), "torch_version": "1.0"}))
    assert measure_peaks(0, tmp_path, measure_fn=fake_measure, device_name="Fake GPU") == PEAKS
    assert len(calls) == 2
    assert DevicePeaks.from_dict(json.loads(path.read_text())) == PEAKS
    assert list(path.parent.glob("*.tmp")) == []


def test_peaks_path_slug(tmp_path):
    p = peaks_path(tmp_path, "NVIDIA H200", "2.11.0+cu130")
    assert p == tmp_path / "peaks" / "nvidia-h200-torch-2.11.0-cu130.json"


@pytest.mark.gpu
def test_measure_device_peaks_on_gpu():
    from evokernel.timing.floor import measure_device_peaks
    p = measure_device_peaks(torch.device("cuda"))
    assert 100 < p.copy_gbs < 20_000 and 100 < p.read_gbs < 20_000 and 100 < p.write_gbs < 20_000
    assert 1 < p.fp32_tflops < p.tf32_tflops < p.bf16_tflops < 5_000
    assert torch.backends.cuda.matmul.allow_tf32 is False      # flags restored (default off)
