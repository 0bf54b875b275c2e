"""evokernel.gate.trace and the worker's use of it: which of a traced call's kernels ran after the
marker on its stream, the per-kernel times kept in the result, and the side-stream verdict that
host load cannot move. CPU tests on constructed traces; the GPU test traces real streams."""
import pytest
import torch

from evokernel.engine.stages import kernel_times, side_stream_detail
from evokernel.gate.trace import LATE_AFTER_US, CallTrace, TracedKernel, trace_call

OWN = "row_sum_kernel(float const*, float*, int)"
COPY = "Memcpy DtoD (Device -> Device)"


def trace(*acts, marker=100.0, changed=False):
    return CallTrace(tuple(TracedKernel(*a) for a in acts), marker, changed)


def test_work_on_the_calls_stream_ends_before_the_marker():
    t = trace((OWN, 7, 10.0, 60.0), (OWN, 7, 61.0, 99.5))
    assert t.late() == () and side_stream_detail(t) == ""


def test_a_kernel_still_running_after_the_marker_is_late_whatever_its_length():
    short = trace((OWN, 7, 10.0, 20.0), ("hidden_kernel(float*)", 13, 15.0, 104.0))
    assert [a.name for a in short.late()] == ["hidden_kernel(float*)"]
    why = side_stream_detail(short)
    assert "hidden_kernel" in why and "stream 13" in why and "4.0 us after the marker" in why
    copy = trace((OWN, 7, 10.0, 20.0), (COPY, 14, 30.0, 250.0, True))
    assert copy.late() and "Memcpy" in side_stream_detail(copy)


def test_the_clock_tolerance_is_a_microsecond():
    assert LATE_AFTER_US == 1.0
    assert trace((OWN, 13, 1.0, 100.9)).late() == ()
    assert trace((OWN, 13, 1.0, 101.1)).late()


def test_a_call_that_leaves_another_stream_current_is_named():
    t = trace((OWN, 7, 10.0, 20.0), changed=True)
    assert "another CUDA stream current" in side_stream_detail(t)


def test_no_marker_recorded_means_no_verdict_from_the_trace():
    assert trace((OWN, 13, 1.0, 900.0), marker=None).late() == ()


def test_kernel_times_sum_per_name_and_stream_and_mark_own_kernels():
    t = trace((OWN, 7, 0.0, 10.0), ("void at::native::fill_kernel()", 7, 11.0, 12.0),
              (OWN, 7, 13.0, 23.5), (COPY, 7, 30.0, 32.0, True))
    rows = kernel_times(t, own=(OWN,))
    assert [(r.name, r.stream, r.gpu_us, r.launches, r.own) for r in rows] == [
        (OWN, 7, 20.5, 2, True), ("void at::native::fill_kernel()", 7, 1.0, 1, False),
        (COPY, 7, 2.0, 1, False)]
    assert t.kernels == [(OWN, 10.0), ("void at::native::fill_kernel()", 1.0), (OWN, 10.5)]


def test_no_trace_without_cuda():
    assert trace_call(lambda: None, torch.device("cpu")) is None


@pytest.mark.gpu
def test_a_real_side_stream_kernel_is_late_and_a_same_stream_one_is_not():
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    side = torch.cuda.Stream()

    def same():
        return a @ a

    def hidden():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return a @ a

    def leaves_it_current():
        torch.cuda.set_stream(side)
        return a @ a
    first = trace_call(same, dev)
    assert first is not None and first.marker_start_us is not None and first.late() == ()
    assert any("gemm" in k.lower() or "xmma" in k.lower() or "nvjet" in k.lower()
               for k, _ in first.kernels), first.kernels
    late = trace_call(hidden, dev)
    assert late.late(), late
    changed = trace_call(leaves_it_current, dev)
    assert changed.stream_changed and torch.cuda.current_stream() != side   # put back
