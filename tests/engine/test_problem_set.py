"""Many problems at the engine's speed (evokernel.engine.problem_set), on CPU: every build is
submitted before any problem is set up, the next problem's worker is started while the current
one runs, GPUs share one queue of problems, and a problem that cannot be set up costs only its
own row. The integration test runs real builds and the fake engine worker."""
from __future__ import annotations

import threading
import time
import types
from concurrent.futures import Future

from evokernel.config import EvalConfig
from evokernel.engine.problem_jobs import ProblemJob
from evokernel.engine.problem_set import AHEAD_SETUP_TIMEOUT_S, ProblemSetRun, evaluate_problem_set
from evokernel.errors import ProblemError
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason, Verdict
from tests.support.fake_gpu_worker import verdict

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
            "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"


def cand(tag: str) -> Candidate:
    return Candidate(source=f"# {tag}\nclass ModelNew:\n    pass\n", idea=tag)


def job(tmp_path, name: str, *tags: str) -> ProblemJob:
    path = tmp_path / f"{name}.py"
    path.write_text(REFERENCE)
    return ProblemJob(Problem(name=name, path=path, source=REFERENCE),
                      tuple(cand(f"{name}-{t}") for t in tags))


class Log:
    def __init__(self):
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def add(self, *event):
        with self.lock:
            self.events.append(event)


class FakeBuilder:
    def __init__(self, log):
        self.log = log

    def submit(self, c):
        self.log.add("build", c.id)
        f = Future()
        f.set_result(types.SimpleNamespace(ok=True, reason=None, build_s=1.0, flags=(),
                                           resources=(), log=""))
        return f


class FakeHandle:
    def __init__(self, log, problem, device):
        self.log, self.name, self.device = log, problem.name, device

    def prepare(self, warm=False):
        self.log.add("prepare", self.name, self.device)
        if self.name == "nospawn" and self.log.events.count(("prepare", "nospawn", 0)) == 1:
            raise OSError(24, "Too many open files")
        if warm:
            self.warm()

    def warm(self):
        self.log.add("warm", self.name)

    def start(self, timeout_s=None):
        self.log.add("setup_timeout", self.name, timeout_s)
        self.log.add("start", self.name, self.device)
        if self.name == "slow" and timeout_s is not None:      # a set-up ahead that hangs
            raise ProblemError("slow.py: the GPU worker could not set up the problem: no "
                               f"answer in {timeout_s} s")
        if self.name == "broken":
            raise ProblemError("broken.py: the GPU worker could not set up the problem")
        if self.name == "flaky" and not any(e[:2] == ("start", "flaky") for e in
                                            self.log.events[:-1]):     # out of memory, once
            raise ProblemError("flaky.py: CUDA out of memory")
        if self.name == "pipe" and self.log.events.count(("start", "pipe", 0)) == 1:
            raise BrokenPipeError(32, "Broken pipe")
        return {"device": "fake", "reference_ms": 1.0, "problem": self.name}

    def evaluate(self, c, timeout_s):
        self.log.add("evaluate", self.name, c.id, self.device)
        time.sleep(0.05)                               # long enough for the other GPU's thread
        if "hang" in c.idea:
            return EvalResult.failure(c.id, Reason.TIMEOUT, "killed after its timeout")
        return EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                          reference_ms=1.0, candidate_ms=0.5)

    def close(self):
        self.log.add("close", self.name, self.device)


class SlowBuilder(FakeBuilder):
    """Builds of the first problem's candidates end after ``delay_s``; the others at once."""

    def __init__(self, log, slow: str, delay_s: float):
        super().__init__(log)
        self.slow, self.delay_s = slow, delay_s

    def submit(self, c):
        f = super().submit(c)
        if not c.idea.startswith(self.slow + "-"):
            return f
        late = Future()
        threading.Timer(self.delay_s, lambda: late.set_result(f.result())).start()
        return late


def fake_run(tmp_path, jobs, devices=(0,), warm_ahead=False, setup_ahead=0, free=1.0,
             builder=None, spawn_ahead=3):
    log = Log()
    guard = types.SimpleNamespace(run=lambda f: f())
    run = ProblemSetRun(jobs, EvalConfig(), devices=devices, arch="9.0",
                        builder=(builder or FakeBuilder)(log),
                        make_handle=lambda p, d: FakeHandle(log, p, d),
                        guard_for=lambda info: guard, warm_ahead=warm_ahead,
                        setup_ahead=setup_ahead, spawn_ahead=spawn_ahead,
                        free_memory=free if callable(free) else lambda info: free)
    return run.run(), log.events


def test_builds_go_up_front_and_the_next_worker_is_ready_before_the_current_closes(tmp_path):
    jobs = [job(tmp_path, "a", "1", "2"), job(tmp_path, "b", "1"), job(tmp_path, "c", "1", "2")]
    outcomes, events = fake_run(tmp_path, jobs)
    kinds = [e[0] for e in events]
    assert kinds[:5] == ["build"] * 5                   # all five, before any set-up
    assert "build" not in kinds[5:]
    # the first problem's next worker is spawned once its set-up saved the peaks...
    assert events.index(("start", "a", 0)) < events.index(("prepare", "b", 0)) \
        < events.index(("close", "a", 0))
    # ...later ones as the current set-up begins: their imports take longer than a verdict
    assert events.index(("prepare", "c", 0)) < events.index(("start", "b", 0))
    assert [o.problem for o in outcomes] == ["a", "b", "c"]
    assert [[r.candidate_id for r in o.results] for o in outcomes] == \
        [[c.id for c in j.candidates] for j in jobs]
    assert all(r.accepted and r.build_s == 1.0 for o in outcomes for r in o.results)
    for o in outcomes:                                  # where each problem's GPU time went
        assert set(o.steps_s) == {"start", "ahead", "build_wait", "verdicts", "close"}
        assert o.steps_s["verdicts"] >= 0.05 * len(o.results)      # the fake's 50 ms each


def live_workers(events, device=0):
    """The most worker processes of ``device`` alive at once (spawned and not yet closed)."""
    live = most = 0
    for e in events:
        if e[0] in ("prepare", "close") and e[-1] == device:
            live += 1 if e[0] == "prepare" else -1
            most = max(most, live)
    return most


def test_spawn_ahead_keeps_that_many_workers_loading_before_their_turn(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abcdef"]
    outcomes, events = fake_run(tmp_path, jobs, spawn_ahead=3)
    at = events.index
    # after the first set-up (the peaks saved), three spawned before the first problem closes
    assert at(("start", "a", 0)) < at(("prepare", "b", 0)) < at(("prepare", "d", 0)) \
        < at(("close", "a", 0))
    # and one more as each later turn begins: three still loading while "b" sets up
    assert at(("prepare", "e", 0)) < at(("start", "b", 0))
    assert at(("prepare", "f", 0)) < at(("start", "c", 0))
    assert live_workers(events) == 4                     # the current one and three ahead
    assert [o.problem for o in outcomes] == list("abcdef")
    assert all(o.error is None and o.results[0].accepted for o in outcomes)
    for n in "abcdef":
        assert events.count(("prepare", n, 0)) == events.count(("close", n, 0)) == 1
    assert live_workers(fake_run(tmp_path, jobs, spawn_ahead=1)[1]) == 2   # one ahead


def test_with_several_gpus_each_holds_one_problem_ahead_at_most(tmp_path):
    """A problem a GPU took waits for it, even while another GPU is idle: behind a slow build,
    a GPU holding three (spawn_ahead) left them to the end while the other GPU had finished
    (review of c56020a). With several GPUs each holds one ahead, as before spawn_ahead."""
    jobs = [job(tmp_path, "a", "1")] + [job(tmp_path, f"p{i}", "1") for i in range(11)]
    outcomes, events = fake_run(tmp_path, jobs, devices=(0, 1), setup_ahead=4, builder=slow_a)
    assert [o.problem for o in outcomes] == [j.problem.name for j in jobs]
    assert all(o.error is None for o in outcomes) and {o.device for o in outcomes} == {0, 1}
    assert max(live_workers(events, d) for d in (0, 1)) <= 2
    slow_gpu = outcomes[0].device
    assert sum(o.device == slow_gpu for o in outcomes) <= 2    # "a" and the one it held


def test_warm_ahead_is_asked_for_after_the_current_set_up(tmp_path):
    jobs = [job(tmp_path, "a", "1"), job(tmp_path, "b", "1")]
    assert ("warm", "b") not in fake_run(tmp_path, jobs)[1]
    events = fake_run(tmp_path, jobs, warm_ahead=True)[1]
    # its CUDA context only once "a"'s reference is timed: never beside a set-up's timing
    assert events.index(("start", "a", 0)) < events.index(("warm", "b")) \
        < events.index(("start", "b", 0))


def test_a_problem_that_cannot_be_set_up_costs_only_its_row(tmp_path):
    jobs = [job(tmp_path, "a", "1"), job(tmp_path, "broken", "1"), job(tmp_path, "c", "1")]
    outcomes, events = fake_run(tmp_path, jobs)
    assert [o.error is None for o in outcomes] == [True, False, True]
    assert "could not set up" in outcomes[1].error and outcomes[1].results == []
    assert outcomes[2].results[0].accepted
    assert ("prepare", "c", 0) in events                # still started ahead


def test_gpus_share_one_queue_of_problems(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abcdef"]
    outcomes, events = fake_run(tmp_path, jobs, devices=(0, 1))
    assert [o.problem for o in outcomes] == list("abcdef")       # in the jobs' order
    used = {o.device for o in outcomes}
    assert used == {0, 1}
    for o in outcomes:                                  # each problem on one GPU, whole
        assert {e[-1] for e in events if e[0] == "evaluate" and e[1] == o.problem} == \
            {o.device}


def test_rejected_without_a_build_and_the_same_source_built_once(tmp_path):
    a = job(tmp_path, "a", "1")
    same = ProblemJob(job(tmp_path, "b").problem, (a.candidates[0], Candidate(source="x = 1\n")))
    outcomes, events = fake_run(tmp_path, [a, same])
    assert [e for e in events if e[0] == "build"] == [("build", a.candidates[0].id)]
    assert outcomes[1].results[1].reason is Reason.NO_CODE


def test_real_builds_and_the_fake_worker(tmp_path, monkeypatch):
    """evaluate_problem_set end to end on CPU: real (uncontained) builds, the fake engine
    worker for the GPU (torch told there is a GPU of arch 9.0)."""
    import torch

    from evokernel.build import builder
    from tests.support.dask_procs import ROOT
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(builder, "device_arch", lambda: "9.0")
    monkeypatch.setenv("PYTHONPATH", ROOT)
    jobs = [job(tmp_path, "a", "1", "2"), job(tmp_path, "broken", "1"), job(tmp_path, "c", "1")]
    wrong = Candidate(source="# wrong\nclass ModelNew:\n    pass\n", idea="wrong")
    jobs[2] = ProblemJob(jobs[2].problem, jobs[2].candidates + (wrong,))
    seen = []
    config = EvalConfig(sandbox=False, cache_dir=str(tmp_path / "cache"), build_workers=2,
                        eval_timeout_s=10)
    outcomes = evaluate_problem_set(jobs, config, devices=[0], entry="tests.support."
                                    "fake_gpu_worker", on_result=lambda n, r: seen.append(n))
    assert [o.error is None for o in outcomes] == [True, False, True]
    for j, o in zip(jobs, outcomes):
        if o.error is None:
            assert o.info["problem"] == j.problem.name      # its own worker's set-up
            assert [(r.reason, r.candidate_ms) for r in o.results] == \
                [(verdict(c).reason, verdict(c).candidate_ms) for c in j.candidates]
    assert outcomes[2].results[1].reason is Reason.WRONG_FUNCTION
    assert sorted(seen) == ["a", "a", "c", "c"]


def slow_a(log):
    return SlowBuilder(log, "a", 1.0)


def test_while_a_build_runs_the_next_problems_are_set_up_at_most_setup_ahead(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abcde"]
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_a)
    first_verdict = events.index(("evaluate", "a", jobs[0].candidates[0].id, 0))
    started_before = [e[1] for e in events[:first_verdict] if e[0] == "start"]
    assert started_before == ["a", "b", "c"]           # two ahead while a's build ran, no more
    assert all(o.error is None and o.results[0].accepted for o in outcomes)
    assert [o.problem for o in outcomes] == list("abcde")
    assert "start_ahead" in outcomes[1].steps_s and "start" not in outcomes[1].steps_s
    assert "start" in outcomes[3].steps_s               # d: at its turn
    assert outcomes[0].steps_s["build_wait"] >= 0.5
    for n in "abcde":                                    # every worker closed, once
        assert events.count(("close", n, 0)) == 1


def test_each_outcome_says_when_its_turn_began_its_builds_ended_and_its_verdicts_came(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abc"]
    outcomes, _ = fake_run(tmp_path, jobs, builder=slow_a)     # a's build: 1 s; the rest at once
    a, b, c = (o.timeline_s for o in outcomes)
    assert a["turn"] < 0.5 and 0.9 <= a["built"] <= a["done"]
    assert b["built"] < 0.5 < a["done"] <= b["turn"] < b["done"] <= c["turn"] < c["done"]


def test_nothing_is_set_up_ahead_without_free_memory_or_when_asked_not_to(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abc"]
    for kw in ({"setup_ahead": 2, "free": 0.4}, {"setup_ahead": 2, "free": None},
               {"setup_ahead": 0}):
        _, events = fake_run(tmp_path, jobs, builder=slow_a, **kw)
        first_verdict = events.index(("evaluate", "a", jobs[0].candidates[0].id, 0))
        assert [e[1] for e in events[:first_verdict] if e[0] == "start"] == ["a"], kw


def test_a_set_up_that_fails_ahead_is_done_again_at_its_turn(tmp_path):
    jobs = [job(tmp_path, "a", "1"), job(tmp_path, "flaky", "1"), job(tmp_path, "broken", "1"),
            job(tmp_path, "d", "1")]
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=3, builder=slow_a)
    assert events.count(("start", "flaky", 0)) == 2     # ahead (out of memory), then its turn
    second = [i for i, e in enumerate(events) if e == ("start", "flaky", 0)][1]
    assert ("start", "broken", 0) not in events[:second]   # alone: nothing set up past it
    assert outcomes[1].error is None and outcomes[1].results[0].accepted
    assert "could not set up" in outcomes[2].error      # a real failure stays one
    assert outcomes[3].error is None
    for n in ("a", "flaky", "broken", "d"):
        assert ("close", n, 0) in events


def test_a_set_up_ahead_is_given_less_time_and_done_again_at_its_turn_if_it_passes_it(tmp_path):
    jobs = [job(tmp_path, "a", "1"), job(tmp_path, "slow", "1"), job(tmp_path, "c", "1")]
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_a)
    timeouts = [e[1:] for e in events if e[0] == "setup_timeout"]
    assert timeouts[:3] == [("a", None), ("slow", AHEAD_SETUP_TIMEOUT_S), ("slow", None)]
    assert all(o.error is None and o.results[0].accepted for o in outcomes)
    assert "start" in outcomes[1].steps_s and "start_ahead" not in outcomes[1].steps_s
    assert events.count(("close", "slow", 0)) == 2      # the hung one, then its own


def test_a_problem_whose_set_up_ahead_failed_is_loading_again_before_its_turn(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in ("a", "slow", "c", "d")]
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_a)
    assert all(o.error is None for o in outcomes)
    killed = events.index(("close", "slow", 0))                  # the hung worker
    turn = [i for i, e in enumerate(events) if e == ("start", "slow", 0)][1]
    assert ("prepare", "slow", 0) in events[killed:turn]


def test_a_later_problems_spawn_or_pipe_failing_costs_the_current_problem_nothing(tmp_path):
    for bad in ("pipe", "nospawn"):
        jobs = [job(tmp_path, "a", "1", "2"), job(tmp_path, bad, "1"), job(tmp_path, "c", "1")]
        outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_a)
        assert [o.problem for o in outcomes] == ["a", bad, "c"]
        assert all(o.error is None and all(r.accepted for r in o.results) for o in outcomes), bad
        assert len(outcomes[0].results) == 2
        for n in ("a", bad, "c"):
            assert ("close", n, 0) in events


def test_a_problem_set_up_ahead_is_let_go_if_it_leaves_too_little_memory(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abc"]
    reads = iter([0.9, 0.3] + [0.9] * 50)                # b's set-up takes too much
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_a,
                                free=lambda info: next(reads))
    first_verdict = events.index(("evaluate", "a", jobs[0].candidates[0].id, 0))
    assert [e[1] for e in events[:first_verdict] if e[0] == "start"] == ["a", "b"]
    assert events.count(("start", "b", 0)) == 2 and "start" in outcomes[1].steps_s
    assert all(o.error is None for o in outcomes)


def test_no_set_up_ahead_after_a_worker_was_killed(tmp_path):
    jobs = [job(tmp_path, "a", "hang", "1"), job(tmp_path, "b", "1"), job(tmp_path, "c", "1")]

    def slow_second(log):
        b = SlowBuilder(log, "a", 1.0)
        first = jobs[0].candidates[0].id
        submit = b.submit
        b.submit = lambda c: FakeBuilder.submit(b, c) if c.id == first else submit(c)
        return b
    outcomes, events = fake_run(tmp_path, jobs, setup_ahead=2, builder=slow_second)
    second_verdict = events.index(("evaluate", "a", jobs[0].candidates[1].id, 0))
    assert [e[1] for e in events[:second_verdict] if e[0] == "start"] == ["a"]
    assert outcomes[0].results[0].reason is Reason.TIMEOUT and outcomes[2].error is None


def test_with_several_gpus_one_sets_up_only_what_it_took(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "abcdef"]
    outcomes, events = fake_run(tmp_path, jobs, devices=(0, 1), setup_ahead=4, builder=slow_a)
    waiting = [o for o in outcomes if o.problem == "a"][0].device
    first_verdict = events.index(("evaluate", "a", jobs[0].candidates[0].id, waiting))
    ahead = [e[1] for e in events[:first_verdict] if e[0] == "start" and e[2] == waiting]
    assert len(ahead) <= 2                               # a, and the one it had taken
    assert [o.problem for o in outcomes] == list("abcdef") and all(o.error is None
                                                                    for o in outcomes)


def test_every_job_gets_an_outcome_even_if_a_gpus_loop_fails(tmp_path):
    jobs = [job(tmp_path, n, "1") for n in "ab"]
    run = ProblemSetRun(jobs, EvalConfig(), devices=(0,), arch="9.0",
                        builder=FakeBuilder(Log()), make_handle=lambda p, d: 1 / 0,
                        guard_for=lambda info: None)
    outcomes = run.run()
    assert [o.problem for o in outcomes] == ["a", "b"]
    assert all("could not be made: ZeroDivisionError" in o.error for o in outcomes)


class Raising(FakeHandle):
    """start raises OSError for "pipe0" (always), close raises for "leaky"."""

    def start(self, timeout_s=None):
        if self.name == "pipe0":
            self.log.add("start", self.name, self.device)
            raise BrokenPipeError(32, "Broken pipe")
        return super().start(timeout_s)

    def close(self):
        super().close()
        if self.name == "leaky":
            raise OSError("cleanup failed")


def test_a_first_problem_that_raises_or_a_close_that_fails_stops_nothing(tmp_path):
    log = Log()
    made = []

    def make(p, d):
        if p.name == "nomake":
            raise OSError(24, "Too many open files")
        made.append(p.name)
        return Raising(log, p, d)
    jobs = [job(tmp_path, n, "1") for n in ("pipe0", "leaky", "nomake", "d")]
    run = ProblemSetRun(jobs, EvalConfig(), devices=(0,), arch="9.0", builder=FakeBuilder(log),
                        make_handle=make, guard_for=lambda info: types.SimpleNamespace(
                            run=lambda f: f()), setup_ahead=2, free_memory=lambda info: 0.9)
    outcomes = run.run()
    assert [o.problem for o in outcomes] == ["pipe0", "leaky", "nomake", "d"]
    assert "BrokenPipeError" in outcomes[0].error
    assert outcomes[1].error is None and outcomes[3].error is None
    assert "could not be made: OSError" in outcomes[2].error
    for n in made:                                       # every worker made, closed once
        assert log.events.count(("close", n, 0)) == 1
