"""Worker isolation: a hang, a segfault or a sticky CUDA fault costs one candidate, never the
next one, and the worker is respawned."""
import os
import time
from pathlib import Path

import pytest

from evokernel.errors import ProblemError
from evokernel.records import Candidate, Reason
from evokernel.engine.handle import WorkerHandle

ROOT = str(Path(__file__).resolve().parents[2])


def handle(tmp_path, name="p", recycle_after=50):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    setup = {"kind": "setup", "problem": {"name": name, "path": f"{name}.py"}}
    return WorkerHandle(setup, env=env, log_path=tmp_path / "worker.log", entry="tests.support.fake_worker",
                        setup_timeout_s=30, recycle_after=recycle_after)


def cand(idea, n=0):
    return Candidate(source=f"# {idea} {n}\nclass ModelNew: pass\n", idea=idea)


def test_faults_cost_one_candidate_and_respawn(tmp_path):
    w = handle(tmp_path)
    try:
        first = w.evaluate(cand("ok", 1), timeout_s=10)
        assert first.accepted
        pid = int(first.detail)
        hang = w.evaluate(cand("hang"), timeout_s=1.5)
        assert hang.reason is Reason.TIMEOUT and not hang.accepted
        after_hang = w.evaluate(cand("ok", 2), timeout_s=10)
        assert after_hang.accepted and int(after_hang.detail) != pid
        seg = w.evaluate(cand("segfault"), timeout_s=10)
        assert seg.reason is Reason.WORKER_CRASH and "SIGSEGV" in seg.detail
        assert "evaluating segfault" in seg.log          # the worker's log tail is kept
        after_seg = w.evaluate(cand("ok", 3), timeout_s=10)
        assert after_seg.accepted
        fault = w.evaluate(cand("fault"), timeout_s=10)
        assert fault.reason is Reason.CUDA_FAULT
        after_fault = w.evaluate(cand("ok", 4), timeout_s=10)
        assert after_fault.accepted and int(after_fault.detail) != int(after_seg.detail)
        assert w.spawns == 4
    finally:
        w.close()
    assert not w.alive()


def test_recycled_after_n_candidates(tmp_path):
    w = handle(tmp_path, recycle_after=2)
    try:
        pids = [int(w.evaluate(cand("ok", i), timeout_s=10).detail) for i in range(5)]
    finally:
        w.close()
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


def test_a_prepared_worker_is_the_one_set_up_and_warm_reaches_it_first(tmp_path):
    w = handle(tmp_path)
    try:
        w.warm()                                     # nothing prepared: nothing spawned
        assert w.proc is None
        w.prepare()
        pid = w.proc.pid
        w.warm()
        info = w.start()
        assert info["pid"] == pid and info["warmed"] is True
        assert info["predraw"] == "p"                # its problem came at once, to draw ahead
        w.warm()                                     # set up already: not sent again
        assert w.evaluate(cand("ok", 1), timeout_s=10).accepted and int(
            w.evaluate(cand("ok", 2), timeout_s=10).detail) == pid
    finally:
        w.close()
    cold = handle(tmp_path / "cold")
    try:
        info = cold.start()
        assert info["warmed"] is False and info["predraw"] is None
    finally:
        cold.close()


def test_setup_failure_names_the_problem(tmp_path):
    w = handle(tmp_path, name="broken")
    with pytest.raises(ProblemError, match=r"(?s)broken\.py.*NameError"):
        w.start()
    assert not w.alive()


def test_untrusted_answers_are_not_believed(tmp_path):
    """A candidate runs inside the worker, so the worker's answers are untrusted: they are JSON
    (never unpickled) and must be about the candidate that was sent."""
    w = handle(tmp_path)
    try:
        forged = w.evaluate(cand("forge"), timeout_s=10)
        assert forged.reason is Reason.WORKER_CRASH and "someone-else" in forged.detail
        pickled = w.evaluate(cand("pickle"), timeout_s=10)
        assert pickled.reason is Reason.WORKER_CRASH and not pickled.accepted
        assert w.evaluate(cand("ok", 9), timeout_s=10).accepted
    finally:
        w.close()


def test_a_killed_workers_processes_are_retired_for_the_gpu_guard(tmp_path, monkeypatch):
    """The guard must not take a hung candidate's own killed worker for another GPU user."""
    from evokernel.engine import gpu_share
    monkeypatch.setattr(gpu_share, "_retired", {})
    w = handle(tmp_path)
    try:
        pid = int(w.evaluate(cand("ok", 1), timeout_s=10).detail)
        hang = w.evaluate(cand("hang"), timeout_s=1.5)
        assert hang.reason is Reason.TIMEOUT
        assert pid in gpu_share._retired
    finally:
        w.close()



def test_a_close_mid_candidate_gives_no_verdict_and_starts_no_worker(tmp_path):
    """A shutdown (the evaluator closed from the main thread) while a GPU thread waits on a
    hung candidate: the wait ends in WorkerClosed, never a timeout or worker_crash verdict (the
    store would keep it; on the H200, 2026-12-02, it ended in an AttributeError traceback),
    and no worker is started after the close."""
    import threading
    import time

    from evokernel.errors import WorkerClosed
    w = handle(tmp_path)
    assert w.evaluate(cand("ok", 1), timeout_s=10).accepted
    got = []

    def gpu_thread():
        try:
            got.append(w.evaluate(cand("hang"), timeout_s=60))
        except WorkerClosed as e:
            got.append(e)
    t = threading.Thread(target=gpu_thread)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    w.close()
    t.join(timeout=20)
    assert not t.is_alive() and time.monotonic() - t0 < 20
    assert len(got) == 1 and isinstance(got[0], WorkerClosed), got
    assert "stays pending" in str(got[0]) and not w.alive()
    spawns = w.spawns
    with pytest.raises(WorkerClosed):
        w.evaluate(cand("ok", 2), timeout_s=10)
    assert w.spawns == spawns and not w.alive()


def test_a_close_during_a_respawns_set_up_is_no_fault_of_the_problem(tmp_path):
    """The stop lands while the next candidate's worker is being set up again (after a hang):
    WorkerClosed, not a ProblemError blaming the problem (a reviewer's race)."""
    import threading
    import time

    from evokernel.errors import WorkerClosed
    w = handle(tmp_path, name="slow")
    assert w.evaluate(cand("ok", 1), timeout_s=20).accepted
    assert w.evaluate(cand("hang"), timeout_s=1.5).reason is Reason.TIMEOUT
    got = []

    def gpu_thread():
        try:
            got.append(w.evaluate(cand("ok", 2), timeout_s=20))
        except Exception as e:  # noqa: BLE001 -- which one is the point
            got.append(e)
    t = threading.Thread(target=gpu_thread)
    t.start()
    time.sleep(1.0)                  # inside start(): the set-up takes 3 s
    w.close()
    t.join(timeout=20)
    assert len(got) == 1 and isinstance(got[0], WorkerClosed), got
    assert "set-up" in str(got[0]) and not w.alive()


def test_a_close_just_before_the_send_gives_no_worker_crash_verdict(tmp_path, monkeypatch):
    """The stop lands between the evaluation's checks and the send of the candidate: the send
    fails on the closed pipe, and that is WorkerClosed, never a worker_crash verdict the store
    would keep (a reviewer's race)."""
    import threading

    import evokernel.engine.handle as handle_module
    from evokernel.errors import WorkerClosed
    w = handle(tmp_path)
    assert w.evaluate(cand("ok", 1), timeout_s=10).accepted
    real = handle_module.protocol.send

    def send(conn, msg):
        if msg.get("kind") == "eval":
            closer = threading.Thread(target=w.close)
            closer.start()
            closer.join()
        return real(conn, msg)
    monkeypatch.setattr(handle_module.protocol, "send", send)
    with pytest.raises(WorkerClosed):
        w.evaluate(cand("ok", 2), timeout_s=10)
    assert not w.alive()


def test_start_takes_a_shorter_set_up_timeout_and_then_the_worker_is_gone(tmp_path):
    """A set-up made ahead of its turn gets less time (evokernel.engine.problem_set's
    AHEAD_SETUP_TIMEOUT_S): past it, ProblemError, and the worker is killed."""
    w = handle(tmp_path, name="slow")                    # its set-up sleeps 3 s
    try:
        t0 = time.perf_counter()
        with pytest.raises(ProblemError, match="stopped answering during set-up"):
            w.start(timeout_s=0.5)                       # 3 s would have set it up
        assert not w.alive()
        assert time.perf_counter() - t0 < 3.0            # no 5 s wait for a silent worker
        assert w.start()["pid"] > 0                      # the whole timeout: set up
    finally:
        w.close()


def test_every_set_up_sent_says_when_it_was_sent(tmp_path):
    """The driver's half of the worker's "load_wait": a fresh "sent_at" on every (re)spawn."""
    w = handle(tmp_path)
    try:
        t0 = time.time()
        first = w.start()
        t1 = time.time()
        w.kill()
        again = w.start()
        t2 = time.time()
    finally:
        w.close()
    assert t0 <= first["sent_at"] <= t1 <= again["sent_at"] <= t2
