"""evokernel.bench's NVRTC phases on the CPU: the NVRTC twins of the tune variants, cold and warm
of both candidate forms in one call (``--phases forms``) with a fake engine whose NVRTC builds
take a second and load_inline builds a minute, their targets, and carrying them over calls."""
from __future__ import annotations

import json

import pytest

from evokernel import bench
from evokernel.bench.plan import (DEFAULT_THROUGHPUT, FORM_PHASES, TARGET_NVRTC_COLD_PER_MIN,
                                  CostModel, estimate_wall_s, throughput_variants)
from evokernel.build.forms import form_name
from tests.bench.test_bench import (FakeClock, FakeEvaluator, FakeMachine, _args, _deps, _ok,
                                    _plan)


def test_the_nvrtc_variants_are_the_twins_of_the_load_inline_ones():
    li = throughput_variants(DEFAULT_THROUGHPUT)
    nv = throughput_variants(DEFAULT_THROUGHPUT, form="nvrtc")
    assert len(nv) == len(li) == 32
    assert [(v.problem, v.assignment) for v in nv] == [(v.problem, v.assignment) for v in li]
    assert all(v.form == "nvrtc" and form_name(v.candidate.source) == "nvrtc" for v in nv)
    assert not {v.candidate.id for v in nv} & {v.candidate.id for v in li}


class FormsEvaluator(FakeEvaluator):
    """As FakeEvaluator, but an NVRTC candidate's cold build costs 1 s per wave, not 60 s."""

    def evaluate(self, cands, on_result=None):
        cold = [c for c in cands if (self.config.cache_dir, c.id) not in self.m.built]
        wave = 1.0 if cands and form_name(cands[0].source) == "nvrtc" else 60.0
        self.m.clock.t += -(-len(cold) // self.workers) * wave
        out = []
        for c in cands:
            hit = (self.config.cache_dir, c.id) in self.m.built
            self.m.built.add((self.config.cache_dir, c.id))
            self.m.clock.t += 1.0
            out.append(_ok(c.id, cand=1.0, build_s=0.0004 if hit else wave, eval_s=1.0))
        return out


class FormsMachine(FakeMachine):
    def make_evaluator(self, problem, config):
        self.opened.append((problem.name, config))
        self.clock.t += 10.0
        return FormsEvaluator(self, problem, config)


def test_both_forms_cold_and_warm_in_one_call(tmp_path):
    clock = FakeClock()
    machine = FormsMachine(clock)
    plan = _plan(tmp_path, phases=FORM_PHASES, budget_s=2000)
    out = bench.run_bench(plan, _deps(machine, clock))
    tp = json.loads((plan.results_dir / "bench_throughput.json").read_text())
    phases = tp["phases"]
    assert set(phases) == set(FORM_PHASES)
    assert all(phases[p]["candidates"] == 32 == phases[p]["accepted"] for p in FORM_PHASES)
    # nvrtc cold: 4 waves of 1 s (layernorm 2, the others 1) + 32 x 1 s of gate and time
    assert phases["nvrtc_cold"]["evaluate_s"] == pytest.approx(4 + 32)
    assert phases["nvrtc_warm"]["evaluate_s"] == pytest.approx(32)
    targets = {t["name"]: t for t in tp["targets"]}
    nv = targets["nvrtc cold candidates/min"]
    assert nv["value"] == pytest.approx(32 * 60 / 36) and nv["bound"] == TARGET_NVRTC_COLD_PER_MIN
    assert nv["passed"] is True and targets["nvrtc warm candidates/min"]["passed"] is True
    forms = [c["form"] for c in tp["candidates"]]
    assert forms.count("nvrtc") == forms.count("load_inline") == 32
    assert all("nvrtc_cold" in c and "nvrtc_warm" in c for c in tp["candidates"]
               if c["form"] == "nvrtc")
    dirs = {cfg.cache_dir.rsplit("/", 1)[-1] for _, cfg in machine.opened}
    assert dirs == {"cold", "nvrtc"}
    assert out["table"].count("| throughput:") == 5
    md = (plan.results_dir / "bench_throughput.md").read_text()
    assert "| nvrtc_cold | 32 |" in md and "| layernorm | nvrtc |" in md
    # a later call measuring only sequential keeps both forms' phases of this one
    again = bench.run_bench(_plan(tmp_path, phases=("sequential",) + FORM_PHASES[2:],
                                  budget_s=2000, sequential_n=1), _deps(machine, clock))
    assert {"cold", "warm"} <= set(again["throughput"]["phases"])


def test_forms_phases_parse_estimate_and_skip_when_over_budget(tmp_path):
    assert _args(["--phases", "forms"]).phases == FORM_PHASES
    assert _args(["--phases", "nvrtc_cold,cold"]).phases == ("cold", "nvrtc_cold")
    est = estimate_wall_s(_plan(tmp_path, phases=FORM_PHASES), CostModel(), cores=16)
    assert list(est)[1:5] == list(FORM_PHASES)
    assert est["nvrtc_cold"] < est["cold"] / 3            # builds are no longer the cost
    clock = FakeClock()
    out = bench.run_bench(_plan(tmp_path, phases=FORM_PHASES, budget_s=330),
                          _deps(FormsMachine(clock), clock))
    assert any(s.startswith("nvrtc_cold: skipped") or s.startswith("nvrtc_warm: skipped")
               for s in out["throughput"]["skipped"])
