"""The worker's anti-cheat hooks: timer monkey-patching and threads/processes started by
candidate code are caught; PyTorch's own helper threads are not blamed on the candidate."""
import threading

from evokernel.records import Reason
from evokernel.tamper import Tamper as _Tamper  # noqa: N814
from evokernel.worker import classify_exception


def run_as_candidate(code: str) -> None:
    exec(compile(code, "<candidate evokernel_cand_test>", "exec"), {})


def test_threads_started_by_candidate_code_only():
    t = _Tamper()
    th = threading.Thread(target=lambda: None)   # the framework's (e.g. torch.compile's)
    th.start()
    th.join()
    assert t.check() is None
    run_as_candidate("import threading\nth = threading.Thread(target=lambda: None)\n"
                     "th.start()\nth.join()\n")
    assert t.check() == (Reason.THREADS, "the candidate started a thread")
    run_as_candidate("import subprocess\nsubprocess.run(['true'])\n")
    assert t.check() == (Reason.THREADS, "the candidate started a subprocess")
    assert t.check() is None


def test_timer_monkey_patching_is_caught_and_undone():
    import time
    real = time.perf_counter
    t = _Tamper()
    run_as_candidate("import time\ntime.perf_counter = lambda: 0.0\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and "time.perf_counter" in detail
    assert time.perf_counter is real


def test_patching_the_spins_launch_path_is_caught_and_undone():
    import pytest
    import torch
    kernel = getattr(getattr(torch.cuda, "_utils", None), "_CudaKernel", None)
    if kernel is None:
        pytest.skip("this torch has no NVRTC kernel wrapper")
    real_call, real_wait = kernel.__call__, torch.cuda.Stream.wait_event
    assert "torch.cuda.Stream.wait_event" not in _Tamper()._objs     # only with the spin on
    t = _Tamper(watch_spin=True)
    run_as_candidate("import torch\n"
                     "torch.cuda._utils._CudaKernel.__call__ = lambda self, **kw: None\n"
                     "torch.cuda.Stream.wait_event = lambda self, event: None\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING
    assert "_CudaKernel.__call__" in detail and "Stream.wait_event" in detail
    assert kernel.__call__ is real_call and torch.cuda.Stream.wait_event is real_wait


def test_changing_a_spins_calibrated_values_is_caught(monkeypatch):
    """A candidate that raises the calibrated gap could hide side-stream work behind it."""
    import torch
    from evokernel.device_spin import DeviceSpin
    spin = DeviceSpin.__new__(DeviceSpin)           # no GPU: the attributes tamper watches
    for a in ("blocks", "threads", "spin_us", "_kernel", "stream", "_marker", "_fence"):
        setattr(spin, a, object())
    spin.baseline_ms, spin.done_gap_ms = 0.003, 0.06
    monkeypatch.setitem(DeviceSpin._made, (torch.device("cuda", 0), 1000), spin)
    t = _Tamper(watch_spin=True)
    assert t.check() is None
    run_as_candidate("from evokernel.device_spin import DeviceSpin\n"
                     "for s in DeviceSpin._made.values():\n    s.done_gap_ms = 5.0\n")
    reason, detail = t.check()
    assert reason is Reason.TIMER_TAMPERING and "done_gap_ms" in detail
    assert spin.done_gap_ms == 0.06                   # restored


def test_exception_classes():
    import torch
    assert classify_exception(RuntimeError("CUDA error: an illegal memory access was "
                                           "encountered")) == (Reason.CUDA_FAULT, True)
    assert classify_exception(torch.cuda.OutOfMemoryError("CUDA out of memory")) == \
        (Reason.OUT_OF_MEMORY, False)
    assert classify_exception(ValueError("bad shape")) == (Reason.RUNTIME_ERROR, False)
