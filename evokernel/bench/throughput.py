"""Throughput: candidates per minute cold, warm and sequential (one candidate at a time, each
built alone), the time per stage, and the throughput targets."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from loguru import logger

from evokernel.bench.deps import (BenchDeps, WallClock, close_all, bench_eval_config, open_evaluators,
                                  try_evaluate)
from evokernel.bench.plan import (NVRTC_PHASES, TARGET_COLD_OVER_SEQUENTIAL, TARGET_COLD_PER_MIN,
                                  TARGET_NVRTC_COLD_PER_MIN, TARGET_WARM_PER_MIN,
                                  THROUGHPUT_PHASES, TRIAL_OVERHEAD_MS, BenchPlan, Variant,
                                  sequential_subset)
from evokernel.config import TimingConfig
from evokernel.records import EvalResult


def per_minute(candidates: int, wall_s: float) -> float:
    """Candidates per minute: 60 x candidates / wall_s (0.0 when wall_s <= 0 or no candidate)."""
    return 60.0 * candidates / wall_s if wall_s > 0 and candidates > 0 else 0.0


def trials_in_detail(detail: str) -> int | None:
    m = re.search(r"(\d+) trials", detail or "")
    return int(m[1]) if m else None


def split_eval_s(r: EvalResult, timing: TimingConfig = TimingConfig()
                 ) -> tuple[float | None, float | None, bool]:
    """(gate_s, time_s, measured) of one result's ``eval_s``.

    Measured when the result carries ``time_s`` (the worker records it since 2026-11-30): the
    gate is then ``eval_s - time_s``. Otherwise (older run stores) estimated: the timing loop costs, for the reference and the candidate each,
    max(warmup_ms, 2 x its median) of warm-up plus trials x (median + TRIAL_OVERHEAD_MS), with
    the trial count from the detail text ("N trials"; min_trials when absent); the rest of
    eval_s (module load, gate, anti-cheat) is the gate. A result without times spent it all in
    the gate. Returns (None, None, False) when eval_s is None.
    """
    if r.eval_s is None:
        return None, None, False
    if r.time_s is not None:
        t_s = min(float(r.time_s), r.eval_s)
        return r.eval_s - t_s, t_s, True
    if not r.reference_ms or not r.candidate_ms:
        return r.eval_s, 0.0, False
    n = trials_in_detail(r.detail) or timing.min_trials
    ms = sum(max(timing.warmup_ms, 2 * t) + n * (t + TRIAL_OVERHEAD_MS)
             for t in (r.reference_ms, r.candidate_ms))
    t_s = min(r.eval_s, ms / 1e3)
    return r.eval_s - t_s, t_s, False


@dataclass(frozen=True)
class PhaseStats:
    """One throughput phase.

    candidates/accepted: evaluated and passing the gate. evaluate_s: wall of the evaluate()
    calls; setup_s: wall of creating the evaluators. build_s, eval_s, gate_s, time_s: sums over
    candidates (builds overlap, so build_s exceeds the wall). split_measured: gate_s/time_s came
    from the results (else estimated, see split_eval_s). per_min: 60 x candidates / evaluate_s;
    per_min_with_setup: the same over evaluate_s + setup_s. reasons: verdict reason -> count.
    of_total, projected_s: for a subset (sequential): the set's size and its projected
    evaluate wall (evaluate_s / candidates x of_total).
    """

    phase: str
    candidates: int
    accepted: int
    evaluate_s: float
    setup_s: float
    build_s: float
    eval_s: float
    gate_s: float
    time_s: float
    split_measured: bool
    per_min: float
    per_min_with_setup: float
    reasons: dict[str, int]
    of_total: int
    projected_s: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def phase_stats(phase: str, results: Sequence[EvalResult], *, evaluate_s: float,
                setup_s: float, of_total: int | None = None,
                timing: TimingConfig = TimingConfig(), note: str = "") -> PhaseStats:
    """Sum a phase's results (see PhaseStats). of_total defaults to len(results)."""
    n = len(results)
    splits = [split_eval_s(r, timing) for r in results]
    total = n if of_total is None else of_total
    return PhaseStats(
        phase=phase, candidates=n, accepted=sum(r.accepted for r in results),
        evaluate_s=evaluate_s, setup_s=setup_s,
        build_s=sum(r.build_s or 0.0 for r in results),
        eval_s=sum(r.eval_s or 0.0 for r in results),
        gate_s=sum(g or 0.0 for g, _, _ in splits), time_s=sum(t or 0.0 for _, t, _ in splits),
        split_measured=bool(splits) and all(m for _, _, m in splits),
        per_min=per_minute(n, evaluate_s), per_min_with_setup=per_minute(n, evaluate_s + setup_s),
        reasons=dict(Counter(r.reason.value for r in results)), of_total=total,
        projected_s=evaluate_s / n * total if n else 0.0, note=note)


@dataclass(frozen=True)
class Target:
    """One benchmark target: value against bound (``at_least``: value >= bound, else <=)."""

    name: str
    value: float | None
    bound: float
    unit: str
    at_least: bool = True

    @property
    def passed(self) -> bool | None:
        if self.value is None or not math.isfinite(self.value):
            return None
        return self.value >= self.bound if self.at_least else self.value <= self.bound

    def to_dict(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), passed=self.passed)


def throughput_targets(phases: Mapping[str, PhaseStats]) -> list[Target]:
    """cold >= 10/min, warm >= 60/min, cold per_min / sequential per_min >= 5 (None where a
    phase is missing or measured nothing); when an NVRTC phase ran, also NVRTC cold >= 40/min
    (issue 19) and NVRTC warm >= 60/min."""
    def rate(name: str) -> float | None:
        s = phases.get(name)
        return s.per_min if s is not None and s.candidates else None
    cold, warm, seq = rate("cold"), rate("warm"), rate("sequential")
    ratio = cold / seq if cold is not None and seq else None
    out = [Target("cold candidates/min", cold, TARGET_COLD_PER_MIN, "/min"),
           Target("warm candidates/min", warm, TARGET_WARM_PER_MIN, "/min"),
           Target("cold / sequential", ratio, TARGET_COLD_OVER_SEQUENTIAL, "x")]
    if any(p in phases for p in NVRTC_PHASES):
        out += [Target("nvrtc cold candidates/min", rate("nvrtc_cold"),
                       TARGET_NVRTC_COLD_PER_MIN, "/min"),
                Target("nvrtc warm candidates/min", rate("nvrtc_warm"), TARGET_WARM_PER_MIN,
                       "/min")]
    return out


def _result_row(r: EvalResult, timing: TimingConfig) -> dict[str, Any]:
    gate, timed, measured = split_eval_s(r, timing)
    return {"verdict": r.verdict.value, "reason": r.reason.value, "build_s": r.build_s,
            "eval_s": r.eval_s, "gate_s": gate, "time_s": timed, "split_measured": measured,
            "reference_ms": r.reference_ms, "candidate_ms": r.candidate_ms,
            "speedup": r.speedup, "trials": trials_in_detail(r.detail), "detail": r.detail[:300],
            "log_tail": "" if r.accepted else (r.log or "")[-1500:]}


def throughput_phase(name: str, plan: BenchPlan, variants: Sequence[Variant], cache: Path,
                      deps: BenchDeps, report: dict[str, Any]) -> PhaseStats:
    """cold or warm (or their NVRTC twins, on ``variants`` of that form): one evaluator per
    problem (set up at once), one evaluate() per problem."""
    problems = list(dict.fromkeys(v.problem for v in variants))
    cfg = bench_eval_config(plan, cache)
    evs, setup_s = open_evaluators([(deps.load_problem(p), cfg) for p in problems], deps,
                                    plan.setup_concurrency)
    results: list[EvalResult] = []
    evaluate_s, notes = 0.0, []
    try:
        for p, ev in zip(problems, evs):
            batch = [v for v in variants if v.problem == p]
            if isinstance(ev, BaseException):
                notes.append(f"{p}: evaluator failed to start ({ev}); its {len(batch)} "
                             "candidates are not counted")
                continue
            report.setdefault("device", dict(getattr(ev, "info", {}) or {}))
            if getattr(ev, "builder", None) is not None:
                report["build_workers"] = ev.builder.workers
            t0 = deps.now()
            got, error = try_evaluate(lambda: ev.evaluate([v.candidate for v in batch]),
                                       f"{name}: {p}")
            if error:
                notes.append(f"{p}: {error}; its {len(batch)} candidates are not counted")
                continue
            wall = deps.now() - t0
            evaluate_s += wall
            results += got
            by_id = {c["id"]: c for c in report["candidates"]}
            for v, r in zip(batch, got):
                by_id[v.candidate.id][name] = _result_row(r, cfg.timing)
            logger.info("{}: {} {} candidates in {:.1f} s ({} accepted)", name, p, len(batch),
                        wall, sum(r.accepted for r in got))
    finally:
        close_all(evs)
    cold_builds = sum(1 for r in results if (r.build_s or 0.0) > 1.0)
    if name in ("warm", "nvrtc_warm") and cold_builds:
        notes.append(f"{cold_builds} builds took over 1 s: the cache was not warm for them")
    return phase_stats(name, results, evaluate_s=evaluate_s, setup_s=setup_s,
                       timing=cfg.timing, note="; ".join(notes))


def sequential_phase(plan: BenchPlan, variants: Sequence[Variant], n_max: int, cache: Path,
                      clock: WallClock, reserve_s: float, deps: BenchDeps,
                      report: dict[str, Any]) -> PhaseStats:
    """KernelBench style: each candidate built alone (one build worker, fresh cache), then gated
    and timed, then the next. Stops early when the next one would eat into ``reserve_s``."""
    cfg = bench_eval_config(plan, cache, build_workers=1)
    subset = sequential_subset(variants, n_max)
    per_est = deps.cost.sequential_s(deps.cores)
    evaluators: dict[str, Any] = {}
    results: list[EvalResult] = []
    evaluate_s = setup_s = 0.0
    stopped = ""
    try:
        for i, v in enumerate(subset):
            per = evaluate_s / len(results) if results else per_est
            need = per + (0.0 if v.problem in evaluators else deps.cost.setup_s)
            if i > 0 and clock.left() - reserve_s < need:
                stopped = (f"stopped after {i} of {len(subset)} planned: the next needs "
                           f"~{need:.0f} s, {clock.left() - reserve_s:.0f} s left before the "
                           "later phases' reserve")
                break
            if v.problem not in evaluators:
                evs, s = open_evaluators([(deps.load_problem(v.problem), cfg)], deps, 1)
                setup_s += s
                evaluators[v.problem] = evs[0]
            ev = evaluators[v.problem]
            if isinstance(ev, BaseException):
                stopped = f"{v.problem}: evaluator failed to start ({ev})"
                break
            t0 = deps.now()
            r, error = try_evaluate(lambda: ev.evaluate([v.candidate])[0],
                                     f"sequential: {v.problem}")
            if error:
                stopped = f"{v.problem}: {error}"
                break
            wall = deps.now() - t0
            evaluate_s += wall
            results.append(r)
            row = next(c for c in report["candidates"] if c["id"] == v.candidate.id)
            row["sequential"] = dict(_result_row(r, cfg.timing), wall_s=wall)
            logger.info("sequential: {} [{}] in {:.1f} s (build {:.1f} s, {})", v.problem,
                        v.label, wall, r.build_s or 0.0, r.reason.value)
    finally:
        close_all(list(evaluators.values()))
    note = (f"measured on {len(results)} of the {len(variants)} candidates (round-robin over "
            "problems, each built alone in a fresh cache); the rate is scaled to the set")
    if stopped:
        note += "; " + stopped
    return phase_stats("sequential", results, evaluate_s=evaluate_s, setup_s=setup_s,
                       of_total=len(variants), timing=cfg.timing, note=note)


def earlier_phases(results_dir: Path, variants: Sequence[Variant],
                    phases: Sequence[str]) -> dict[str, PhaseStats]:
    """Throughput phases measured by an earlier bench into the same results folder, on the same
    candidates of the phase's form, that this run does not measure again (so a bench split over
    two device calls still compares cold with sequential). {} when there is none or it does not
    match."""
    path = Path(results_dir) / "bench_throughput.json"
    if not variants or not path.is_file():
        return {}

    def ids(rows: Sequence[Any], form: str) -> list[str]:
        return [r["id"] for r in rows if r.get("form", "load_inline") == form]
    try:
        old = json.loads(path.read_text())
        new = [{"id": v.candidate.id, "form": v.form} for v in variants]
        names = {f.name for f in dataclasses.fields(PhaseStats)}
        out = {}
        for k, d in old.get("phases", {}).items():
            form = "nvrtc" if k in NVRTC_PHASES else "load_inline"
            same = ids(new, form) and ids(old.get("candidates", []), form) == ids(new, form)
            if k in THROUGHPUT_PHASES and k not in phases and same:
                out[k] = PhaseStats(**{f: v for f, v in d.items() if f in names})
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("{}: unreadable ({}); earlier phases not carried over", path, e)
        return {}
