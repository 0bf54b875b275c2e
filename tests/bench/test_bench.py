"""evokernel.bench on the CPU: the tune variants it measures, its statistics and reports, the
whole run with a fake engine and clock, the do_bench process's measurement with a fake timer,
and the command line (including the message shown without a GPU)."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evokernel import bench
from evokernel.bench import (BenchDeps, BenchPlan, CostModel, PhaseStats, Target,
                             count_assignments, estimate_wall_s, fidelity_groups, fidelity_row,
                             per_minute, phase_stats, rel_diff, sequential_fit, sequential_subset,
                             split_eval_s, spread, summary_table, throughput_targets,
                             throughput_variants, tune_assignments, tune_variants)
from evokernel.config import EvalConfig, TimingConfig
from evokernel.errors import ConfigError, NoGPUError, ProblemError
from evokernel.problem import load_problem
from evokernel.records import EvalResult, Reason, Verdict
from evokernel.operators.tunables import find_tunables

SEEDS = {name: load_problem(name).seed_source
         for name in ("softmax", "layernorm", "matmul", "conv2d", "conv2d_relu_maxpool")}


# -- the variants ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [("softmax", 5), ("conv2d", 5), ("matmul", 8),
                                            ("conv2d_relu_maxpool", 25), ("layernorm", 120)])
def test_every_assignment_is_distinct_and_counted(name, expected):
    src = SEEDS[name]
    every = list(tune_assignments(src))
    assert count_assignments(src) == len(every) == expected
    assert len({tuple(sorted(a.items())) for a in every}) == expected
    assert every[0] == {}                              # the seed itself first


def test_assignments_come_nearest_first_and_deterministic():
    src = SEEDS["layernorm"]
    every = list(tune_assignments(src))
    changes = [len(a) for a in every]
    assert changes == sorted(changes)                  # 0, then 1 change, then 2, then 3
    assert changes.count(1) == 4 + 5 + 3               # BLOCK, CHUNK, EW_BLOCK alternatives
    assert every == list(tune_assignments(src))
    assert every[1] == {"BLOCK": "64"}                 # listed order within a constant


def test_variants_are_valid_distinct_sources():
    variants = tune_variants("layernorm", SEEDS["layernorm"], 16)
    assert len({v.candidate.id for v in variants}) == 16
    assert variants[0].candidate.source == SEEDS["layernorm"]
    assert variants[0].candidate.operator == "seed" and variants[0].label == "seed"
    seed_values = {t.name: t.value for t in find_tunables(SEEDS["layernorm"])}
    for v in variants:
        tunables = {t.name: t for t in find_tunables(v.candidate.source)}
        assert set(tunables) == set(seed_values)       # markers survive the substitution
        want = dict(seed_values, **dict(v.assignment))
        for name, t in tunables.items():
            assert t.value == want[name]
            assert t.value in t.choices                 # only listed values are used
        compile(v.candidate.source, "variant.py", "exec")
        assert "class ModelNew" in v.candidate.source
        if v.assignment:
            assert v.candidate.operator == "tune" and "tune" in v.candidate.idea


def test_default_throughput_set_is_32_distinct_candidates_in_whole_waves():
    assert sum(n for _, n in bench.DEFAULT_THROUGHPUT) >= 32
    assert all(n % 8 == 0 for _, n in bench.DEFAULT_THROUGHPUT)    # 8 builds at once
    variants = throughput_variants(bench.DEFAULT_THROUGHPUT, SEEDS)
    ids = [v.candidate.id for v in variants]
    assert len(ids) == len(set(ids)) == 32
    assert ids == [v.candidate.id for v in throughput_variants(bench.DEFAULT_THROUGHPUT)]
    problems = [v.problem for v in variants]
    assert problems == sorted(problems, key=[p for p, _ in bench.DEFAULT_THROUGHPUT].index)


def test_too_few_variants_says_how_many_there_are():
    with pytest.raises(ValueError, match="5 distinct tune assignments"):
        tune_variants("softmax", SEEDS["softmax"], 6)
    with pytest.raises(ValueError, match=">= 1"):
        tune_variants("softmax", SEEDS["softmax"], 0)


def test_a_source_without_tunables_has_only_itself():
    src = "class ModelNew:\n    pass\n"
    assert list(tune_assignments(src)) == [{}]
    assert [v.candidate.source for v in tune_variants("x", src, 1)] == [src]


def test_sequential_subset_goes_round_robin():
    variants = throughput_variants((("layernorm", 3), ("matmul", 2), ("softmax", 1)), SEEDS)
    sub = sequential_subset(variants, 5)
    assert [v.problem for v in sub] == ["layernorm", "matmul", "softmax", "layernorm", "matmul"]
    assert sub[0] is variants[0] and sub[3] is variants[1]
    assert sequential_subset(variants, 0) == []
    assert len(sequential_subset(variants, 99)) == 6


# -- statistics -----------------------------------------------------------------------------

def _ok(cid: str, *, ref=2.0, cand=1.0, build_s=60.0, eval_s=1.0, trials=20) -> EvalResult:
    return EvalResult(cid, Verdict.ACCEPT, Reason.OK,
                      detail=f"accepted: ... (95% CI 0.99-1.01, {trials} trials)",
                      reference_ms=ref, candidate_ms=cand, build_s=build_s, eval_s=eval_s)


def test_rates_spread_and_relative_difference():
    assert per_minute(32, 192.0) == pytest.approx(10.0)
    assert per_minute(0, 10.0) == 0.0 and per_minute(5, 0.0) == 0.0
    assert spread([1.0, 1.02, 1.01]) == pytest.approx(0.02)
    assert spread([3.0]) == 0.0
    with pytest.raises(ValueError):
        spread([])
    with pytest.raises(ValueError):
        spread([1.0, 0.0])
    assert rel_diff(1.03, 1.0) == pytest.approx(0.03)
    assert rel_diff(0.97, 1.0) == pytest.approx(-0.03)
    with pytest.raises(ValueError):
        rel_diff(1.0, 0.0)


def test_gate_and_time_split_is_estimated_from_trials():
    timing = TimingConfig(warmup_ms=25.0)
    # reference 2 ms, candidate 1 ms, 20 trials: warm-up 25 + 25 ms, trials 20 x (2.1 + 1.1) ms
    gate, timed, measured = split_eval_s(_ok("a", eval_s=1.0), timing)
    assert not measured
    assert timed == pytest.approx((50 + 20 * 3.2) / 1e3)
    assert gate + timed == pytest.approx(1.0)
    # a slow kernel: warm-up is two calls, and time never exceeds eval_s
    gate, timed, _ = split_eval_s(_ok("b", ref=50.0, cand=40.0, eval_s=1.0, trials=400), timing)
    assert timed == pytest.approx(1.0) and gate == pytest.approx(0.0)
    rejected = EvalResult.failure("c", Reason.WRONG_FUNCTION, "wrong", eval_s=0.7)
    assert split_eval_s(rejected, timing) == (0.7, 0.0, False)
    assert split_eval_s(EvalResult.failure("d", Reason.BUILD_ERROR, "x")) == (None, None, False)


def test_gate_and_time_split_uses_the_recorded_timing_seconds():
    r = dataclasses.replace(_ok("a", eval_s=0.8), time_s=0.5)
    gate, timed, measured = split_eval_s(r)
    assert measured and timed == pytest.approx(0.5) and gate == pytest.approx(0.3)
    round_trip = EvalResult.from_dict(r.to_dict())               # the run store keeps it
    assert round_trip.time_s == 0.5
    legacy = {k: v for k, v in r.to_dict().items() if k != "time_s"}   # older stores
    assert EvalResult.from_dict(legacy).time_s is None


def test_phase_stats_arithmetic():
    results = [_ok(f"c{i}", build_s=60.0, eval_s=1.0) for i in range(8)]
    results.append(EvalResult.failure("bad", Reason.LOWER_PRECISION, "fp16", build_s=60.0,
                                      eval_s=0.5))
    s = phase_stats("cold", results, evaluate_s=90.0, setup_s=18.0)
    assert (s.candidates, s.accepted) == (9, 8)
    assert s.per_min == pytest.approx(6.0)
    assert s.per_min_with_setup == pytest.approx(60 * 9 / 108)
    assert s.build_s == pytest.approx(540.0) and s.eval_s == pytest.approx(8.5)
    assert s.gate_s + s.time_s == pytest.approx(8.5)
    assert s.reasons == {"ok": 8, "lower_precision": 1}
    assert s.of_total == 9 and s.projected_s == pytest.approx(90.0)
    sub = phase_stats("sequential", results[:2], evaluate_s=120.0, setup_s=12.0, of_total=32)
    assert sub.per_min == pytest.approx(1.0) and sub.projected_s == pytest.approx(1920.0)


def _stats(per_min: float, n: int = 32) -> PhaseStats:
    return phase_stats("x", [_ok(f"i{i}") for i in range(n)], evaluate_s=60.0 * n / per_min,
                       setup_s=0.0)


def test_throughput_targets():
    got = {t.name: t for t in throughput_targets(
        {"cold": _stats(12.0), "warm": _stats(50.0), "sequential": _stats(1.0, n=2)})}
    assert got["cold candidates/min"].passed is True
    assert got["warm candidates/min"].passed is False
    assert got["cold / sequential"].value == pytest.approx(12.0)
    assert got["cold / sequential"].passed is True
    missing = {t.name: t for t in throughput_targets({"cold": _stats(4.0)})}
    assert missing["cold candidates/min"].passed is False
    assert missing["warm candidates/min"].passed is None
    assert missing["cold / sequential"].value is None
    assert Target("x", 0.02, 0.02, "", at_least=False).passed is True


def _run(i, speedup, ref=2.0, verdict="accept"):
    return {"run": i, "verdict": verdict, "reason": "ok", "reference_ms": ref,
            "candidate_ms": ref / speedup, "speedup": speedup}


def test_fidelity_row_spread_and_agreement():
    runs = [_run(1, 2.00), _run(2, 2.01), _run(3, 2.02), _run(4, 1.99), _run(5, 2.00)]
    db = {"reference_ms": 2.0, "candidate_ms": 0.98, "speedup": 2.0 / 0.98,
          "inproc_speedup": 2.0}
    row = fidelity_row("softmax", runs, db)
    assert row.speedup_median == pytest.approx(2.00)
    assert row.speedup_spread == pytest.approx(2.02 / 1.99 - 1)
    assert row.spread_ok is True
    assert row.agreement == pytest.approx(2.00 / (2.0 / 0.98) - 1)      # -2%
    assert row.agreement_ok is True
    assert row.candidate_ms_agreement == pytest.approx(1.0 / 0.98 - 1)
    assert row.inproc_agreement == pytest.approx(2.0 / (2.0 / 0.98) - 1)
    wide = fidelity_row("x", [_run(1, 2.0), _run(2, 2.1)], {"speedup": 2.2})
    assert wide.spread_ok is False and wide.agreement_ok is False


def test_fidelity_row_failures_fail_or_say_why():
    runs = [_run(1, 2.0), {"run": 2, "verdict": None, "error": "evaluator failed"}]
    row = fidelity_row("x", runs, {"error": "Traceback ...\nRuntimeError: no triton"})
    assert row.spread_ok is False and row.agreement_ok is None
    assert "1 of 2 runs not accepted" in row.note and "no triton" in row.note
    none = fidelity_row("x", [], None)
    assert none.speedup_median is None and none.spread_ok is None
    assert "do_bench not run" in none.note


# -- the estimate ---------------------------------------------------------------------------

def _plan(tmp_path: Path, **kw) -> BenchPlan:
    return BenchPlan(results_dir=tmp_path / "results", work_dir=tmp_path / "work", **kw)


def test_estimate_formulas_on_the_h200(tmp_path):
    plan = _plan(tmp_path)
    cost = CostModel()
    est = estimate_wall_s(plan, cost, cores=16, sequential_n=2)
    assert cost.build_latency_s(8, 16) == cost.build_single_s       # 8 on 16 cores: 30-36 s
    wave = cost.build_latency_s(12, 16)                 # the default on 16 cores: 12 at once
    assert wave == pytest.approx(cost.build_single_s * 1.1 * 1.35 * 12 / 16)
    assert est["cold"] == pytest.approx(cost.setup_group_s(3, 16) + 4 * wave   # 16 = 12 + 4
                                        + (12 + 8 + 8) * cost.eval_s)
    assert est["warm"] == pytest.approx(cost.setup_group_s(3, 16) + 32 * cost.eval_s)
    assert est["sequential"] == pytest.approx(2 * cost.setup_s
                                              + 2 * (cost.build_single_s + cost.eval_s))
    assert list(est) == ["start", "cold", "warm", "fidelity", "sequential", "total"]
    assert est["total"] == pytest.approx(sum(v for k, v in est.items() if k != "total"))
    assert 300 < est["total"] < 700                          # minutes, not an hour
    fit = sequential_fit(plan, cost, cores=16)
    assert 0 <= fit <= plan.sequential_n
    only_seq = _plan(tmp_path, phases=("sequential",), budget_s=600)
    assert sequential_fit(only_seq, cost, cores=16) >= 8 or \
        estimate_wall_s(only_seq, cost, cores=16, sequential_n=8)["total"] > 600


def test_fidelity_groups_hold_whole_runs():
    groups = fidelity_groups(5, 5, 10)
    assert [len(g) for g in groups] == [10, 10, 5]
    assert [pair for g in groups for pair in g] == [(r, p) for r in range(5) for p in range(5)]
    assert [len(g) for g in fidelity_groups(5, 5, 3)] == [5] * 5     # at least one run


def test_plan_rejects_bad_values(tmp_path):
    for kw in ({"phases": ("nope",)}, {"throughput": (("softmax", 0),)},
               {"throughput": (("softmax", 2), ("softmax", 3))}, {"fidelity_runs": 1},
               {"budget_s": 0}, {"sequential_n": 0}, {"setup_concurrency": 0}):
        with pytest.raises(ValueError):
            _plan(tmp_path, **kw)


# -- the whole run, with a fake engine and a fake clock -------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeMachine:
    """Evaluators that advance the clock like the H200 would: set-up 10 s, builds 60 s per
    wave of `workers`, gate and time 1 s each; the cache remembers builds per cache folder."""

    def __init__(self, clock: FakeClock, *, fail_problem: str | None = None):
        self.clock, self.fail_problem = clock, fail_problem
        self.built: set[tuple[str, str]] = set()
        self.opened: list[tuple[str, EvalConfig]] = []
        self.closed = 0
        self.do_bench_specs: list[dict] = []

    def make_evaluator(self, problem, config):
        self.opened.append((problem.name, config))
        self.clock.t += 10.0
        if problem.name == self.fail_problem:
            raise RuntimeError("set-up failed")
        return FakeEvaluator(self, problem, config)

    def prebuild(self, cands, config):
        self.clock.t += 55.0
        for c in cands:
            self.built.add((config.cache_dir, c.id))
        return [type("B", (), {"ok": True, "build_s": 55.0, "cache_hit": False})()
                for _ in cands]

    def do_bench(self, spec):
        self.do_bench_specs.append(spec)
        self.clock.t += 30.0
        return {"versions": {"triton": "fake"},
                "problems": {p["name"]: {"reference_ms": 2.0, "candidate_ms": 1.0,
                                         "speedup": 2.0, "inproc_speedup": 1.99}
                             for p in spec["problems"]}}


class FakeEvaluator:
    info = {"device": "fake H200", "torch": "x"}

    def __init__(self, machine: FakeMachine, problem, config: EvalConfig):
        self.m, self.problem, self.config = machine, problem, config
        self.workers = config.build_workers or 8

    def evaluate(self, cands, on_result=None):
        cold = [c for c in cands if (self.config.cache_dir, c.id) not in self.m.built]
        self.m.clock.t += math.ceil(len(cold) / self.workers) * 60.0
        out = []
        for c in cands:
            hit = (self.config.cache_dir, c.id) in self.m.built
            self.m.built.add((self.config.cache_dir, c.id))
            self.m.clock.t += 1.0
            out.append(_ok(c.id, cand=1.0 + (int(c.id, 16) % 7) * 1e-3,
                           build_s=0.0004 if hit else 60.0, eval_s=1.0))
        return out

    def close(self):
        self.m.closed += 1


def _deps(machine: FakeMachine, clock: FakeClock) -> BenchDeps:
    # The fake's builds cost what full-header builds did (60 s per wave of 8 = 55 s x 1.1).
    return BenchDeps(make_evaluator=machine.make_evaluator, prebuild=machine.prebuild,
                     do_bench=machine.do_bench, now=clock, cores=16,
                     cost=CostModel(build_single_s=55.0))


def test_run_bench_end_to_end_with_fakes(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock)
    plan = _plan(tmp_path, budget_s=2000)
    out = bench.run_bench(plan, _deps(machine, clock))
    res = plan.results_dir
    for name in ("throughput", "fidelity", "faults"):
        assert (res / f"bench_{name}.json").is_file() and (res / f"bench_{name}.md").is_file()
    assert (res / "bench_summary.md").read_text().count("| throughput:") == 3
    tp = json.loads((res / "bench_throughput.json").read_text())
    cold, warm, seq = (tp["phases"][k] for k in ("cold", "warm", "sequential"))
    assert cold["candidates"] == warm["candidates"] == 32 and cold["accepted"] == 32
    # cold: layernorm 2 waves + 2 x 1 wave of 60 s, plus 1 s of gate/time each
    assert cold["evaluate_s"] == pytest.approx(4 * 60 + 32)
    assert cold["setup_s"] == pytest.approx(30.0)          # fake set-ups advance one clock
    assert warm["evaluate_s"] == pytest.approx(32) and warm["per_min"] == pytest.approx(60.0)
    assert warm["build_s"] < 0.1                          # all cache hits
    assert seq["candidates"] == 8 and seq["of_total"] == 32
    assert seq["per_min"] == pytest.approx(60 / 61)
    targets = {t["name"]: t for t in tp["targets"]}
    assert targets["cold candidates/min"]["value"] == pytest.approx(32 * 60 / 272)
    assert targets["cold / sequential"]["passed"] is True
    rows = {c["id"]: c for c in tp["candidates"]}
    assert all("cold" in r and "warm" in r for r in rows.values())
    assert sum("sequential" in r for r in rows.values()) == 8
    # sequential: fresh cache, one build worker; cold and warm share the engine's default
    seq_cfgs = [cfg for _, cfg in machine.opened if cfg.build_workers == 1]
    assert seq_cfgs and all(cfg.cache_dir.endswith("sequential") for cfg in seq_cfgs)
    assert all(not cfg.measure_compile for _, cfg in machine.opened)
    # fidelity: 5 runs x 5 problems, each its own evaluator; do_bench on the same cache
    fid = json.loads((res / "bench_fidelity.json").read_text())
    assert [len(r["runs"]) for r in fid["problems"]] == [5] * 5
    assert all(r["spread_ok"] and r["agreement_ok"] for r in fid["problems"])
    spec = machine.do_bench_specs[0]
    assert spec["cache_dir"].endswith("cold") and len(spec["problems"]) == 5
    assert machine.closed == len(machine.opened)           # every evaluator closed
    assert "| fidelity: softmax |" in out["table"] and "PASS" in out["table"]


def test_run_bench_cuts_later_phases_to_the_budget(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock)
    plan = _plan(tmp_path, budget_s=380)        # cold 302 s, warm 62 s: 16 s left
    out = bench.run_bench(plan, _deps(machine, clock))
    assert out["fidelity"]["problems"] == []
    assert "fidelity: skipped" in out["fidelity"]["skipped"][0]
    tp = out["throughput"]
    assert "sequential" not in tp["phases"]
    assert any(s.startswith("sequential: skipped") for s in tp["skipped"])
    targets = {t["name"]: t for t in tp["targets"]}
    assert targets["cold / sequential"]["passed"] is None
    assert "skipped" in (plan.results_dir / "bench_fidelity.md").read_text()


def test_sequential_stops_when_the_next_candidate_would_not_fit(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock)
    plan = _plan(tmp_path, phases=("sequential",), budget_s=200, sequential_n=8)
    out = bench.run_bench(plan, _deps(machine, clock))
    seq = out["throughput"]["phases"]["sequential"]
    assert 1 <= seq["candidates"] < 8
    assert clock.t <= 200 + 61                    # at most one candidate past the budget
    assert "stopped after" in seq["note"] or seq["candidates"] == plan.sequential_n


def test_a_second_call_reuses_the_first_calls_cold_phase(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock)
    bench.run_bench(_plan(tmp_path, phases=("cold", "warm"), budget_s=2000),
                    _deps(machine, clock))
    out = bench.run_bench(_plan(tmp_path, phases=("sequential",), budget_s=2000,
                                sequential_n=2), _deps(machine, clock))
    tp = out["throughput"]
    assert set(tp["phases"]) == {"cold", "warm", "sequential"}
    assert any("earlier bench_throughput.json" in s for s in tp["skipped"])
    ratio = {t["name"]: t for t in tp["targets"]}["cold / sequential"]
    assert ratio["value"] is not None and ratio["passed"] is True


def test_calls_split_over_one_results_folder_all_show_in_the_table(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock)
    faults = {"returncode": 0, "tail": "1 passed"}
    deps = _deps(machine, clock)
    deps.run_faults = lambda log: faults
    bench.run_bench(_plan(tmp_path, phases=("cold", "warm", "sequential", "faults"),
                          budget_s=3000, sequential_n=1), deps)
    out = bench.run_bench(_plan(tmp_path, phases=("fidelity",), budget_s=3000), deps)
    assert out["throughput"] is None
    assert "throughput: cold / sequential" in out["table"] and "fidelity: matmul" in out["table"]
    assert "| faults |" in out["table"] and "PASS" in out["table"].split("| faults |")[1]
    kept = json.loads((tmp_path / "results" / "bench_faults.json").read_text())
    assert kept["ran"] is True and kept["passed"] is True


def test_an_evaluate_that_raises_is_a_note_not_a_crash(tmp_path, monkeypatch):
    clock = FakeClock()
    machine = FakeMachine(clock)

    def boom(self, cands, on_result=None):
        if self.problem.name == "matmul":
            raise RuntimeError("the GPU worker could not set up the problem again")
        return original(self, cands, on_result)

    original = FakeEvaluator.evaluate
    monkeypatch.setattr(FakeEvaluator, "evaluate", boom)
    out = bench.run_bench(_plan(tmp_path, phases=("cold",), budget_s=3000),
                          _deps(machine, clock))
    cold = out["throughput"]["phases"]["cold"]
    assert cold["candidates"] == 24 and "evaluate() raised RuntimeError" in cold["note"]
    assert machine.closed == len(machine.opened)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error path without a GPU")
def test_the_do_bench_process_reports_a_missing_gpu_as_an_error(tmp_path):
    p = load_problem("softmax")
    spec = {"cache_dir": str(tmp_path / "c"), "arch": "9.0", "warmup_ms": 25, "rep_ms": 100,
            "rounds": 1, "problems": [{"name": p.name, "path": str(p.path), "source": p.source,
                                       "seed_source": p.seed_source}]}
    out = bench.run_do_bench_process(spec, tmp_path / "r", timeout_s=120)
    assert "error" in out and ("triton" in out["error"] or "CUDA" in out["error"])
    assert not (tmp_path / "r" / "do_bench_spec.json").exists()


def test_an_evaluator_that_fails_to_start_is_reported_not_fatal(tmp_path):
    clock = FakeClock()
    machine = FakeMachine(clock, fail_problem="matmul")
    plan = _plan(tmp_path, phases=("cold", "fidelity"), budget_s=5000)
    out = bench.run_bench(plan, _deps(machine, clock))
    cold = out["throughput"]["phases"]["cold"]
    assert cold["candidates"] == 24 and "matmul: evaluator failed to start" in cold["note"]
    matmul = next(r for r in out["fidelity"]["problems"] if r["problem"] == "matmul")
    assert matmul["spread_ok"] is False and "not accepted" in matmul["note"]


def test_work_folders_are_deleted_only_when_the_bench_made_them(tmp_path):
    mine = bench.fresh_dir(tmp_path / "cache")
    (mine / "builds").mkdir()
    assert bench.fresh_dir(mine) == mine and not (mine / "builds").exists()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "precious.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="refusing to delete"):
        bench.fresh_dir(theirs)
    assert (theirs / "precious.txt").exists()


# -- reports --------------------------------------------------------------------------------

def test_reports_render_missing_pieces():
    table = summary_table(None, None, {"ran": False})
    assert "faults" in table and "not run in this call" in table
    md = bench.throughput_markdown({"phases": {}, "targets": [], "candidates": []})
    assert md.startswith("# Engine throughput")
    assert "not split" not in bench.fidelity_markdown({"problems": [], "runs": 5})
    faults = bench.faults_markdown({"ran": True, "returncode": 0, "passed": True, "wall_s": 56,
                                    "tail": "1 passed", "log": "x.txt"})
    assert "tests/engine/test_gpu_faults.py" in faults and "1 passed" in faults


# -- the do_bench process's measurement, on the CPU -----------------------------------------

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''
KERNEL = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x * self.scale
'''


def test_measure_do_bench_times_both_models_with_the_given_timer(tmp_path):
    calls = []

    def fake_do_bench(fn, *, warmup, rep, return_mode):
        out = fn()
        calls.append((warmup, rep, return_mode, out.clone()))
        return 2.0 if len(calls) % 2 else 1.0       # reference, then candidate

    got = bench.measure_do_bench(
        {"name": "tiny", "path": str(tmp_path / "tiny.py"), "source": PROBLEM,
         "seed_source": KERNEL}, cache_dir=tmp_path, arch="9.0", device=torch.device("cpu"),
        bench=fake_do_bench, warmup_ms=25.0, rep_ms=100.0, rounds=3,
        timing=TimingConfig(warmup_ms=1.0, min_trials=5, max_trials=5))
    assert len(calls) == 6 and all(c[:3] == (25.0, 100.0, "median") for c in calls)
    assert torch.equal(calls[0][3], calls[1][3])   # the candidate got the reference's weights
    assert got["reference_ms"] == 2.0 and got["candidate_ms"] == 1.0 and got["speedup"] == 2.0
    assert got["inproc_trials"] == 5 and got["inproc_reference_ms"] > 0


# -- the command line -----------------------------------------------------------------------

def _args(argv):
    return bench.build_parser().parse_args(argv)


@pytest.mark.parametrize("argv, message", [
    (["--phases", "cold,lukewarm"], "unknown phase"),
    (["--throughput", "softmax"], "PROBLEM=COUNT"),
    (["--throughput", "softmax=0"], "COUNT >= 1"),
    (["--fidelity-runs", "zero"], "invalid int value"),
    (["--fidelity-runs", "1"], "must be >= 2, got 1"),
    (["--hide-host-ms", "-1"], "must be in [0, 2] ms"),
    (["--hide-host-ms", "nan"], "must be in [0, 2] ms"),
    (["--hide-host-ms", "3"], "must be in [0, 2] ms"),
    (["--hide-host-ms", "fast"], "invalid number"),
    (["--sequential-n", "0"], "must be >= 1"),
])
def test_bad_arguments_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        _args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_arguments_make_a_plan(tmp_path):
    args = _args(["--phases", "warm,cold", "--throughput", "matmul=8,softmax=5",
                  "--fidelity-problems", "softmax,matmul", "--fidelity-runs", "3",
                  "--budget-s", "300", "--results-dir", str(tmp_path / "r"),
                  "--work-dir", str(tmp_path / "w"), "--build-workers", "4"])
    plan = bench.plan_from_args(args)
    assert plan.phases == ("cold", "warm")           # always in run order
    assert plan.throughput == (("matmul", 8), ("softmax", 5)) and plan.candidates == 13
    assert plan.fidelity_problems == ("softmax", "matmul") and plan.fidelity_runs == 3
    assert plan.build_workers == 4 and plan.budget_s == 300
    assert _args(["--phases", "all"]).phases == bench.PHASES


def test_dry_run_prints_the_estimate_without_a_gpu(tmp_path, capsys):
    argv = ["--dry-run", "--cores", "16", "--results-dir", str(tmp_path / "r"),
            "--work-dir", str(tmp_path / "w")]
    assert bench.cmd_bench(_args(argv)) == 0
    out = capsys.readouterr().out
    assert "estimate on 16 cores with 12 build workers" in out and "total ~" in out
    assert "32 candidates" in out
    assert not (tmp_path / "w").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_too_many_variants_or_an_unknown_problem_is_a_usage_error(dry, capsys):
    extra = ["--dry-run"] if dry else []
    assert bench.main(extra + ["--throughput", "softmax=9"]) == 2
    err = capsys.readouterr().err
    assert "--throughput: softmax" in err and "5 distinct tune assignments" in err
    assert bench.main(extra + ["--throughput", "nosuchproblem=2"]) == 2
    assert "not a built-in problem" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_without_a_gpu_the_error_says_what_is_needed_and_what_works(tmp_path, capsys):
    args = _args(["--results-dir", str(tmp_path / "r"), "--work-dir", str(tmp_path / "w")])
    with pytest.raises(NoGPUError) as e:
        bench.cmd_bench(args)
    assert str(e.value).startswith("evokernel bench:")
    assert "needs a CUDA GPU" in str(e.value) and "--dry-run" in str(e.value)
    assert not (tmp_path / "w").exists()             # nothing touched before the check
    assert bench.main(["--phases", "cold", "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "make test" in err


def test_import_has_no_side_effects():
    code = ("import sys, evokernel.bench; "
            "assert 'torch' not in sys.modules and 'litellm' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_wiring_as_the_lead_will_add_it():
    import argparse
    parser = argparse.ArgumentParser(prog="evokernel")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="measure the evaluation engine")
    bench.add_bench_arguments(b)
    b.set_defaults(func=bench.cmd_bench)
    args = parser.parse_args(["bench", "--dry-run", "--phases", "fidelity"])
    assert args.func is bench.cmd_bench and args.phases == ("fidelity",)


def test_fidelity_markdown_shows_each_timing_method_of_the_do_bench_process():
    db = {"reference_ms": 8.35, "candidate_ms": 0.50, "speedup": 16.7,
          "inproc_reference_ms": 8.40, "inproc_candidate_ms": 0.576, "inproc_speedup": 14.58,
          "visible_reference_ms": 8.34, "visible_candidate_ms": 0.501, "visible_speedup": 16.65}
    row = bench.fidelity_row("layernorm", [{"run": 1, "verdict": "accept", "reason": "ok",
                                            "reference_ms": 8.4, "candidate_ms": 0.58,
                                            "speedup": 14.5}], db)
    md = bench.fidelity_markdown({"runs": 1, "problems": [row.to_dict()]})
    assert "| layernorm | evokernel timing there | - | 8.4000 | 0.5760 | 14.5800 |" in md
    assert "| layernorm | host time visible there | - | 8.3400 | 0.5010 | 16.6500 |" in md
    assert row.agreement_ok is False                 # 14.5 / 16.7 - 1 = -13%


@pytest.mark.parametrize("flag, expected", [("0.5", 0.5), ("0", 0.0), (None, 1.0)])
def test_hide_host_ms_reaches_every_evaluator_config(tmp_path, flag, expected):
    """Bad values are usage errors: test_bad_arguments_are_usage_errors."""
    from evokernel.bench.deps import bench_eval_config
    argv = (["--hide-host-ms", flag] if flag else []) + ["--results-dir", str(tmp_path)]
    plan = bench.plan_from_args(_args(argv))
    assert plan.hide_host_ms == expected
    assert bench_eval_config(plan, tmp_path).timing.hide_host_ms == expected


def test_fidelity_problems_are_checked_before_anything_runs(capsys):
    with pytest.raises(ConfigError, match="twice"):
        bench.cmd_bench(_args(["--phases", "fidelity", "--fidelity-problems", "softmax,softmax",
                               "--dry-run"]))
    with pytest.raises(ProblemError, match="nosuch"):
        bench.cmd_bench(_args(["--phases", "fidelity", "--fidelity-problems", "nosuch",
                               "--dry-run"]))
