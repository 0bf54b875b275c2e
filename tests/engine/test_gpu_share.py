"""evokernel.engine.gpu_share on the CPU: waiting for another process to leave the GPU, measuring
a contended candidate again, marking what stays contended, the reference-drift watch, and the
process-tree test that tells our own workers from another user's processes."""
import subprocess
import sys

import pytest

from evokernel.engine import gpu_share
from evokernel.engine.gpu_share import (REFERENCE_DRIFT, NvmlProcesses, SharedGpuGuard,
                                        descendants, descends_from, retire)
from evokernel.records import EvalResult, Reason, Verdict


class Scripted:
    """other PIDs as scripted, one entry per look (the last repeats)."""

    def __init__(self, *looks):
        self.looks, self.n = list(looks), 0

    def others(self):
        look = self.looks[min(self.n, len(self.looks) - 1)]
        self.n += 1
        return tuple(look)


class Clock:
    def __init__(self):
        self.t = 0.0

    def now(self):
        return self.t

    def sleep(self, s):
        self.t += s


def accepted(ref_ms=1.07, cand_ms=1.9):
    return EvalResult("c1", Verdict.ACCEPT, Reason.OK, detail="accepted", reference_ms=ref_ms,
                      candidate_ms=cand_ms)


def guard(processes, policy="wait", wait_s=10.0, reference_ms=1.07):
    c = Clock()
    return SharedGpuGuard(processes, reference_ms, policy=policy, wait_s=wait_s, poll_s=1.0,
                          sleep=c.sleep, clock=c.now), c


def test_a_free_gpu_changes_nothing():
    g, _ = guard(Scripted(()))
    r = accepted()
    assert g.run(lambda: r) is r


def test_it_waits_for_another_process_to_leave_before_measuring():
    g, clock = guard(Scripted((4242,), (4242,), (4242,), ()))
    calls = []
    r = g.run(lambda: (calls.append(clock.t), accepted())[1])
    assert calls == [3.0] and r.accepted
    assert "gpu_waited_s:3" in r.flags and not any("contended" in f for f in r.flags)


def test_a_candidate_contended_while_measured_is_measured_again():
    # free before, another process appears during the first measurement, gone after a wait
    g, _ = guard(Scripted((), (77,), (77,), (), (), ()))
    results = iter([accepted(ref_ms=3.6, cand_ms=3.89), accepted(ref_ms=1.07, cand_ms=1.76)])
    r = g.run(lambda: next(results))
    assert r.candidate_ms == 1.76 and "gpu_remeasured" in r.flags
    assert not any(f.startswith("gpu_contended") for f in r.flags)


def test_what_stays_contended_is_marked_in_flags_and_detail():
    g, _ = guard(Scripted((99,)), wait_s=5.0)
    calls = []
    r = g.run(lambda: (calls.append(1), accepted())[1])
    assert len(calls) == 1                                     # still shared: not measured again
    assert any(f.startswith("gpu_contended:other processes on the GPU (pid 99)") for f in r.flags)
    assert "measured on a shared GPU" in r.detail and "gpu_waited_s:10" in r.flags   # 2 waits


def test_a_drifting_reference_is_noticed_without_nvml():
    g, _ = guard(Scripted(()))
    results = iter([accepted(ref_ms=3.60), accepted(ref_ms=3.55)])
    r = g.run(lambda: next(results))
    assert r.reference_ms == 3.55 and "gpu_remeasured" in r.flags
    why = next(f for f in r.flags if f.startswith("gpu_contended"))
    assert "the reference read 3.5500 ms against 1.0700 ms at set-up (+232%)" in why
    assert REFERENCE_DRIFT == 0.15
    assert not g.contention(accepted(ref_ms=1.07 * 1.1), ())       # within the drift allowed


def test_mark_only_never_waits_or_measures_again():
    g, clock = guard(Scripted((5,)), policy="mark")
    calls = []
    r = g.run(lambda: (calls.append(1), accepted())[1])
    assert clock.t == 0.0 and len(calls) == 1 and any("gpu_contended" in f for f in r.flags)


def test_a_gate_verdict_is_marked_but_not_measured_again():
    g, _ = guard(Scripted((), (5,), ()))
    calls = []
    wrong = EvalResult.failure("c1", Reason.WRONG_FUNCTION, "error beyond 1000x")
    r = g.run(lambda: (calls.append(1), wrong)[1])
    assert len(calls) == 1 and r.reason is Reason.WRONG_FUNCTION
    assert any(f.startswith("gpu_contended") for f in r.flags)


def test_bad_policy():
    with pytest.raises(ValueError):
        SharedGpuGuard(Scripted(()), None, policy="ignore")


def test_our_own_workers_are_not_other_users():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        import os
        assert descends_from(child.pid, os.getpid())
        assert descends_from(os.getpid(), os.getpid())
        assert not descends_from(1, os.getpid())
        assert not descends_from(2**22 + 7, os.getpid())         # no such process
    finally:
        child.kill()
        child.wait()


class FakeNvml:
    """pynvml's one call the lister makes, listing ``pids`` on the GPU."""

    def __init__(self, pids):
        self.pids = pids

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [type("P", (), {"pid": p})() for p in self.pids]


def test_a_worker_we_killed_is_not_another_user_while_it_lives(monkeypatch):
    """The H200 case: a hung candidate's worker, killed, still listed by NVML and no longer our
    descendant, made the guard measure the hung candidate again (300 s more)."""
    monkeypatch.setattr(gpu_share, "_retired", {})
    outsider, dying = 2**22 + 11, 2**22 + 13           # neither descends from this process
    started = {outsider: 100, dying: 200}                # /proc start times, as the test sets them
    monkeypatch.setattr(gpu_share, "_start_time", lambda pid, proc=None: started.get(pid))
    gpu0 = NvmlProcesses("00000000-0000-0000-0000-000000000000")
    gpu0._nvml = FakeNvml([outsider, dying])
    gpu1 = NvmlProcesses("00000000-0000-0000-0000-000000000001")
    gpu1._nvml = FakeNvml([outsider])
    assert gpu0.others() == (outsider, dying)
    retire({dying})
    assert gpu1.others() == (outsider,)                 # another GPU's look keeps it retired
    assert gpu0.others() == (outsider,)
    started[dying] = 300                                 # its PID now another, newer process
    assert gpu0.others() == (outsider, dying) and gpu_share._retired == {}
    retire({dying})
    assert gpu0.others() == (outsider,)
    del started[dying]                                   # it exited (and left the GPU): forgotten
    gpu0._nvml.pids = [outsider]
    assert gpu0.others() == (outsider,) and gpu_share._retired == {}


def test_descendants_are_the_worker_and_its_children():
    outer = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                              "'-c', 'import time; time.sleep(30)']); time.sleep(30)"])
    try:
        import time
        for _ in range(100):
            found = descendants(outer.pid)
            if len(found) >= 2:
                break
            time.sleep(0.1)
        assert outer.pid in found and len(found) == 2, found
    finally:
        import os
        import signal
        for p in descendants(outer.pid) - {outer.pid}:
            os.kill(p, signal.SIGKILL)
        outer.kill()
        outer.wait()


def test_without_nvml_others_is_empty():
    lister = NvmlProcesses("00000000-0000-0000-0000-000000000000")
    assert lister.others() == ()


def test_show_and_report_say_what_sharing_did(tmp_path):
    """The view's account of a shared GPU, from the result flags and the set-up info."""
    import types

    from evokernel.runs.view import sharing_text
    ok = accepted()
    marked = ok.__class__(**{**ok.__dict__, "flags": ("gpu_waited_s:12", "gpu_remeasured")})
    stuck = ok.__class__(**{**ok.__dict__,
                            "flags": ("gpu_contended:other processes on the GPU (pid 9)",)})
    entries = [types.SimpleNamespace(result=r) for r in (ok, marked, stuck)]
    view = types.SimpleNamespace(device={"gpu_wait_at_setup_s": 31.5,
                                         "gpu_other_pids_at_setup": [12106]}, entries=entries)
    text = sharing_text(view)
    assert "waited 32 s at set-up for another process to leave the GPU (pid 12106)" in text
    assert "1 candidates waited 12 s" in text and "1 measured again" in text
    assert "1 marked as measured on a shared GPU (other processes on the GPU (pid 9))" in text
    quiet = types.SimpleNamespace(device={}, entries=[types.SimpleNamespace(result=ok)])
    assert sharing_text(quiet) is None


def test_free_memory_is_unknown_without_the_gpu(monkeypatch):
    import types

    from evokernel.engine.gpu_share import free_memory_fraction
    assert free_memory_fraction("no-such-gpu") is None        # no GPU here, or not that one

    class Info:
        free, total = 30, 120
    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetHandleByUUID=lambda n: n,
                                 nvmlDeviceGetMemoryInfo=lambda h: Info)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert free_memory_fraction("abc") == 0.25
    Info.total = 0
    assert free_memory_fraction("abc") is None
