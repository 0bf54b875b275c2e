"""CudaEvaluator.evaluate's flow without a GPU: static check, parallel builds, the built
candidates shared by the GPU workers' threads, each result merged with its build's, in input
order. The evaluator's GPU set-up (``__init__``) is skipped; its builder, workers and guards are
stand-ins with the interfaces it uses."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evokernel.build.builder import Builder, BuildResult, BuildStopped
from evokernel.config import EvalConfig
from evokernel.engine.evaluator import CudaEvaluator
from evokernel.engine.gpu_share import SharedGpuGuard
from evokernel.records import Candidate, Reason
from tests.build.test_build_stop import live_in_session, running, slow_candidate, wait_for_pids
from tests.support.runstores import accepted, kernel as cand


class NoOtherProcesses:
    def others(self) -> tuple[int, ...]:
        return ()


class StandInBuilder:
    """Builds "fail" candidates as errors, raises on "raise" ones, builds the rest."""

    workers = 2

    def __init__(self, fail: set[str], crash: set[str]):
        self.fail, self.crash, self.built = fail, crash, []

    def build(self, c: Candidate) -> BuildResult:
        self.built.append(c.id)
        if c.idea in self.crash:
            raise RuntimeError("builder bug")
        ok = c.idea not in self.fail
        return BuildResult(c.id, ok, None if ok else Reason.BUILD_ERROR, 1.5, False,
                           "" if ok else "error: x", (), ("arch: note",))


class StandInWorker:
    def __init__(self):
        self.seen, self.threads = [], set()

    def evaluate(self, c: Candidate, timeout_s: float):
        self.seen.append(c.id)
        self.threads.add(threading.current_thread().name)
        return accepted(c, candidate_ms=1.0)


def _evaluator(builder: StandInBuilder, workers: list[StandInWorker]) -> CudaEvaluator:
    ev = CudaEvaluator.__new__(CudaEvaluator)        # no GPU set-up
    ev.config = EvalConfig(eval_timeout_s=5)
    ev.builder, ev.workers = builder, workers
    ev.guards = [SharedGpuGuard(NoOtherProcesses(), None, policy="mark") for _ in workers]
    ev._pool = ThreadPoolExecutor(max_workers=2)
    return ev


def test_results_in_input_order_with_build_failures_and_a_builder_bug():
    good = [cand(f"g{i}", "good") for i in range(5)]
    bad, crash = cand("b", "fails"), cand("c", "crashes")
    no_model = Candidate(source="x = 1\n", idea="good")
    builder = StandInBuilder(fail={"fails"}, crash={"crashes"})
    workers = [StandInWorker(), StandInWorker()]
    ev = _evaluator(builder, workers)
    events, results_seen = [], []
    order = [good[0], bad, good[1], crash, no_model, good[2], good[3], good[0], good[4]]
    out = ev.evaluate(order, on_result=results_seen.append,
                      on_event=lambda kind, cid: events.append((kind, cid)))

    assert [r.candidate_id for r in out] == [c.id for c in order]
    by_id = {r.candidate_id: r for r in out}
    for g in good:
        r = by_id[g.id]
        assert r.accepted and r.build_s == 1.5 and r.flags[0] == "arch: note"
    assert by_id[bad.id].reason is Reason.BUILD_ERROR and by_id[bad.id].log == "error: x"
    assert by_id[crash.id].reason is Reason.BUILD_ERROR
    assert "builder error: builder bug" in by_id[crash.id].detail
    assert not by_id[no_model.id].accepted and no_model.id not in builder.built
    assert sorted(builder.built) == sorted({c.id for c in order} - {no_model.id})  # once each
    assert sorted(workers[0].seen + workers[1].seen) == sorted(g.id for g in good)
    assert len(results_seen) == len({c.id for c in order})
    for g in good:
        kinds = [k for k, cid in events if cid == g.id]
        assert kinds == ["build_started", "built", "gating", "gated", "timed"]
    assert [k for k, cid in events if cid == bad.id] == ["build_started", "build_failed"]
    ev._pool.shutdown()


def test_a_display_that_raises_costs_no_result():
    ev = _evaluator(StandInBuilder(set(), set()), [StandInWorker()])
    c = cand("only", "good")

    def broken(kind: str, cid: str) -> None:
        raise ValueError("display bug")

    (r,) = ev.evaluate([c], on_event=broken)
    assert r.accepted and r.candidate_id == c.id
    ev._pool.shutdown()


class ClosingWorker(StandInWorker):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_close_stops_the_build_in_flight(tmp_path):
    """`evokernel run` interrupted mid-build: the evaluator's close (in Evolution's finally)
    kills the build in flight, session and all; it used to leave it running (the evaluator
    never closed its Builder) and the driver's exit waited for it."""
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "slow").touch()
    worker = ClosingWorker()
    ev = _evaluator(Builder(tmp_path / "cache", arch="9.0", timeout_s=300, workers=1,
                            audit=False), [worker])
    future = ev._pool.submit(ev.builder.build, Candidate(slow_candidate(flags, "a")))
    sid, child = wait_for_pids(flags / "a.pids")
    t0 = time.monotonic()
    ev.close()
    assert time.monotonic() - t0 < 2 and worker.closed
    assert not live_in_session(sid) and not running(child)
    with pytest.raises(BuildStopped):
        future.result(timeout=5)
