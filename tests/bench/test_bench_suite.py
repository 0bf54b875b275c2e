"""The bench's suite phase on CPU, with fakes: both modes measured from their own empty caches,
kernels/min from the wall clock, the verdicts that differ listed, and the command line's
`--phases suite` checked without a GPU."""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest
from loguru import logger

from evokernel.bench import cli as bench_cli
from evokernel.bench.suite import SuiteDeps, suite_jobs, suite_markdown, suite_phase
from evokernel.config import EvalConfig
from evokernel.engine.problem_jobs import ProblemOutcome
from evokernel.errors import ConfigError
from evokernel.records import EvalResult, Reason, Verdict


def ok(c):
    return EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      reference_ms=1.0, candidate_ms=0.5)


class Clock:
    """A fake clock: each one-at-a-time evaluator costs 15 s, the whole set 20 s."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def fake_deps(clock, caches):
    class Ev:
        info = {"setup_steps_s": {"gate_reference": 3.0, "compile_baseline": 6.0}}

        def __init__(self, problem, config):
            caches.append(("one", config.cache_dir))

        def evaluate(self, cands):
            clock.t += 15.0
            return [ok(c) if "BLOCK" not in c.source or i else
                    EvalResult.failure(c.id, Reason.IMPOSSIBLE_SPEED, "x")
                    for i, c in enumerate(cands)]

        def close(self):
            pass

    def evaluate_set(jobs, config, warm_ahead=False):
        caches.append(("warm" if warm_ahead else "set", config.cache_dir))
        clock.t += 20.0
        return [ProblemOutcome(j.problem.name, [ok(c) for c in j.candidates],
                               {"setup_steps_s": {"gate_reference": 1.0 + i, "peaks": 0.5}}, 0)
                for i, j in enumerate(jobs)]

    def prepare(path):
        path.mkdir(parents=True, exist_ok=True)
        return path
    def prebuild(cands, config):
        caches.append(("prebuild", config.cache_dir))
        caches.append(("built", tuple(c.id for c in cands)))
        clock.t += 5.0

    return SuiteDeps(make_evaluator=Ev, evaluate_set=evaluate_set, prepare_cache=prepare,
                     now=clock, prebuild=prebuild)


def test_both_modes_from_their_own_caches(tmp_path):
    jobs = suite_jobs(["softmax", "matmul", "layernorm"], None, 2)
    assert [len(j.candidates) for j in jobs] == [2, 2, 2]
    caches = []
    report = suite_phase(jobs, EvalConfig(), tmp_path, fake_deps(Clock(), caches))
    assert report["kernels"] == 6
    one, together = report["modes"]["one_at_a_time"], report["modes"]["together"]
    assert one["wall_s"] == 50.0 and one["per_min"] == pytest.approx(7.2)   # 5 s of builds
    built = [v for k, v in caches if k == "built"]
    assert built == [tuple(c.id for j in jobs for c in j.candidates)]   # all, once, up front
    assert [k for k, _ in caches][:3] == ["prebuild", "built", "one"]
    assert together["wall_s"] == 20.0 and together["per_min"] == pytest.approx(18.0)
    assert report["speedup"] == pytest.approx(2.5)
    assert report["target"]["passed"] is True
    dirs = {kind: {d for k, d in caches if k == kind}
            for kind in ("one", "set", "warm", "prebuild")}
    assert dirs["one"] == dirs["prebuild"] == {str(tmp_path / "suite-one_at_a_time")}
    assert dirs["set"] == {str(tmp_path / "suite-together")}
    assert dirs["warm"] == {str(tmp_path / "suite-together_warm")}
    assert report["modes"]["together_warm"]["per_min"] == pytest.approx(18.0)
    firsts = [j.candidates[0].id for j in jobs if "BLOCK" in j.candidates[0].source]
    assert [d.split(":")[0] for d in report["differ"]] == sorted(firsts * 2)
    md = suite_markdown(report)
    assert "| together | 6 | 6 | 20.0 | 18.0 |" in md
    assert "impossible_speed vs together ok" in md and "vs together_warm ok" in md
    setup = report["modes"]["together"]["setup"]           # 3 problems: 1, 2, 3 s, + 0.5 s
    assert setup["problems"] == 3 and setup["median_total_s"] == 2.5
    assert setup["steps"]["gate_reference"] == {"median_s": 2.0, "max_s": 3.0}
    assert list(report["modes"]["one_at_a_time"]["setup"]["steps"]) == [
        "compile_baseline", "gate_reference"]                 # the largest step first
    assert "| gate_reference | 3.0 (3.0) | 2.0 (3.0) | 2.0 (3.0) |" in md
    assert "| peaks | - | 0.5 (0.5) | 0.5 (0.5) |" in md
    assert "| total (median) | 9.0 | 2.5 | 2.5 |" in md


def test_a_setup_clock_names_each_step_in_order(monkeypatch):
    from evokernel.engine import session
    ticks = iter([10.0, 10.5, 13.0])
    monkeypatch.setattr(session.time, "perf_counter", lambda: next(ticks))
    clock = session.SetupClock()
    clock.lap("problem_module"), clock.lap("gate_reference")
    assert clock.steps == {"problem_module": 0.5, "gate_reference": 2.5}
    assert list(clock.steps) == ["problem_module", "gate_reference"]


def test_kernels_from_a_folder(tmp_path):
    seed = Path(suite_jobs(["softmax"], None, 1)[0].problem.path).parent / "seeds"
    (tmp_path / "softmax.py").write_text((seed / "softmax.py").read_text())
    said = []
    sink = logger.add(lambda m: said.append(m.record["message"]), level="WARNING")
    try:
        jobs = suite_jobs(["softmax", "matmul"], str(tmp_path), 1)
        mapping = tmp_path / "map.json"
        mapping.write_text('{"softmax": "softmax.py", "matmul": "gone.py"}')
        mapped = suite_jobs(["softmax", "matmul"], str(mapping), 1)
    finally:
        logger.remove(sink)
    assert [j.problem.name for j in jobs] == ["softmax"]          # matmul has no file
    assert [j.problem.name for j in mapped] == ["softmax"]
    assert said == [f"bench: suite: matmul left out: {tmp_path} names no kernel for it",
                    f"bench: suite: matmul left out: no such kernel file {tmp_path / 'gone.py'}"]
    with pytest.raises(ConfigError, match="no problem"):
        suite_jobs(["matmul"], str(tmp_path), 1)


def test_cli_suite_phase_dry_run(capsys):
    assert bench_cli.main(["--phases", "suite", "--dry-run", "--suite-variants", "2"]) == 0
    out = capsys.readouterr().out
    assert "suite phase: 5 problems, 10 kernels" in out
    assert bench_cli.main(["--phases", "suite,cold", "--dry-run", "--suite-variants", "2"]) == 0
    out = capsys.readouterr().out          # with another phase, the suite's plan was left out
    assert "phases cold;" in out and "suite phase: 5 problems, 10 kernels" in out, out
    with pytest.raises(SystemExit):
        bench_cli.main(["--phases", "suit"])
    assert list(itertools.islice(bench_cli._phases_arg("cold,suite"), 2)) == ["cold", "suite"]


def test_cli_suite_phase_without_gpu_says_so(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert bench_cli.main(["--phases", "suite"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_the_modes_can_be_chosen_and_an_unknown_one_is_refused(tmp_path):
    jobs = suite_jobs(["softmax", "matmul"], None, 1)
    caches = []
    report = suite_phase(jobs, EvalConfig(), tmp_path, fake_deps(Clock(), caches),
                         modes=("together", "one_at_a_time"))
    assert list(report["modes"]) == ["one_at_a_time", "together"]     # MODES' order
    assert {k for k, _ in caches} == {"prebuild", "built", "one", "set"}   # no warm-ahead
    assert report["speedup"] == pytest.approx(35 / 20) and report["target"]["passed"] is False
    alone = suite_phase(jobs, EvalConfig(), tmp_path / "b", fake_deps(Clock(), []),
                        modes=("one_at_a_time",))
    assert alone["target"]["passed"] is None and "(not run)" in suite_markdown(alone)
    with pytest.raises(ConfigError, match="together_cold"):
        suite_phase(jobs, EvalConfig(), tmp_path, fake_deps(Clock(), []),
                    modes=("together_cold",))


def test_cli_suite_modes_flag(capsys):
    assert bench_cli.main(["--phases", "suite", "--suite-modes", "together,one_at_a_time",
                           "--dry-run"]) == 0
    assert "checked together, one_at_a_time" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench_cli.main(["--phases", "suite", "--suite-modes", "fast", "--dry-run"])
    assert "choose from one_at_a_time,together,together_warm" in capsys.readouterr().err


def test_the_committed_24_problem_set_resolves_to_one_kernel_per_problem():
    """tests/kernels/suite/set24.json: 24 problems, each with one kernel file that exists and,
    for the fixtures and the set's own kernels, names that problem on its PROBLEM line."""
    root = Path(__file__).resolve().parents[2]
    specs = [str(root / "problems"), str(root / "tests/kernels/problems"),
             str(root / "tests/kernels/suite/problems")]
    jobs = suite_jobs(specs, str(root / "tests/kernels/suite/set24.json"), 1)
    assert len(jobs) == 24 and all(len(j.candidates) == 1 for j in jobs)
    assert len({j.problem.name for j in jobs}) == 24
    for j in jobs:
        src = j.candidates[0].source
        assert "class ModelNew" in src, j.problem.name
        line = next((x for x in src.splitlines() if x.startswith("PROBLEM:")), None)
        if line is not None:
            assert Path(line.split(":", 1)[1].strip()).stem == j.problem.name


def test_without_one_at_a_time_nothing_differs_and_no_speedup_is_printed(tmp_path):
    jobs = suite_jobs(["softmax"], None, 1)
    report = suite_phase(jobs, EvalConfig(), tmp_path, fake_deps(Clock(), []),
                         modes=("together",))
    assert report["differ"] == [] and report["speedup"] is None
    assert "together / one at a time: -" in suite_markdown(report)


def test_each_problems_gpu_time_is_split_by_step_in_both_modes(tmp_path):
    clock, caches = Clock(), []
    base = fake_deps(clock, caches)

    class Slow(base.make_evaluator):
        def __init__(self, problem, config):
            clock.t += 4.0 if problem.name == "softmax" else 2.0       # spawn and set-up
            super().__init__(problem, config)

        def close(self):
            clock.t += 0.5

    def evaluate_set(jobs, config, warm_ahead=False):
        return [ProblemOutcome(j.problem.name, [ok(c) for c in j.candidates],
                               {"predrawn": {"sets": 8 - i, "s": 0.5}}, 0,
                               steps_s={"start": 1.0 + i, "build_wait": 30.0 * (i == 0),
                                        "verdicts": 0.5, "close": 0.25},
                               timeline_s={"turn": 2.0 + 5 * i, "built": 40.0 + i,
                                           "done": 45.0 + 5 * i})
                for i, j in enumerate(jobs)]

    deps = dataclasses.replace(base, make_evaluator=Slow, evaluate_set=evaluate_set)
    jobs = suite_jobs(["softmax", "matmul", "layernorm"], None, 1)
    report = suite_phase(jobs, EvalConfig(), tmp_path, deps, modes=("one_at_a_time", "together"))
    one = report["modes"]["one_at_a_time"]["loop"]["steps"]
    assert one["start"] == {"median_s": 2.0, "max_s": 4.0}
    assert one["verdicts"] == {"median_s": 15.0, "max_s": 15.0}
    assert one["close"] == {"median_s": 0.5, "max_s": 0.5}
    together = report["modes"]["together"]["loop"]
    assert together["steps"]["build_wait"] == {"median_s": 0.0, "max_s": 30.0}
    assert together["median_total_s"] == 3.75           # 31.75, 2.75, 3.75: the middle one
    md = suite_markdown(report)
    assert "one problem on its GPU" in md
    assert "| start | 2.0 (4.0) | 2.0 (3.0) |" in md
    assert "| build_wait | - | 0.0 (30.0) |" in md
    assert report["modes"]["together"]["timeline"] == {"first_turn_s": 2.0, "last_built_s": 42.0,
                                                       "last_done_s": 55.0}
    assert report["modes"]["one_at_a_time"]["timeline"] == {}
    # each problem's own time line, steps and part made ahead, in the JSON
    mm = report["modes"]["together"]["per_problem"]["matmul"]
    assert mm["timeline"] == {"turn": 7.0, "built": 41.0, "done": 50.0}
    assert mm["loop"]["start"] == 2.0 and mm["ahead"] == {"sets": 7, "s": 0.5}
    assert report["modes"]["one_at_a_time"]["per_problem"]["matmul"]["ahead"] is None
    assert "together, seconds after the builds were submitted: the first problem's turn 2.0, " \
        "the last build done 42.0, the last verdict 55.0" in md


def test_a_set_up_made_ahead_is_not_counted_twice_in_the_totals():
    from evokernel.bench.suite import setup_summary
    got = setup_summary({"a": {"start": 2.0, "ahead": 3.0, "verdicts": 1.0},
                         "b": {"start_ahead": 3.0, "verdicts": 1.0},
                         "c": {"start": 2.0, "verdicts": 1.0}})
    assert got["median_total_s"] == 3.0                  # 6, 1, 3: b's set-up is in a's ahead
    assert got["steps"]["start_ahead"] == {"median_s": 3.0, "max_s": 3.0}


def test_a_workers_load_wait_is_shown_but_not_counted_as_set_up():
    from evokernel.bench.suite import setup_summary
    got = setup_summary({"a": {"load_wait": 5.0, "gate_reference": 1.0},
                         "b": {"load_wait": 0.0, "gate_reference": 2.0}})
    assert got["median_total_s"] == 1.5                  # 1 and 2: the waits left out
    assert got["steps"]["load_wait"] == {"median_s": 2.5, "max_s": 5.0}
