"""Benchmarks of the evaluation engine itself (issue 4): throughput, fidelity, faults.

    python -m evokernel.bench [--phases cold,warm,fidelity,sequential] [--results-dir DIR] ...
    evokernel bench ...                                   (the same flags, once wired in cli.py)
    python -m evokernel.bench --dry-run                   (the plan and its time estimate; no GPU)

1. **Throughput.** Distinct tune-operator variants of the seed kernels (``problems/seeds``: each
   an assignment of the constants marked ``// tune:``, nearest to the seed first) go through
   build, gate and time, one ``CudaEvaluator`` per problem and one ``evaluate()`` call per
   problem, as a search's generation does:

   * ``cold``: an empty build cache (``WORK_DIR/cold``);
   * ``warm``: the same candidates again, new evaluators (new worker processes), warm cache;
   * ``sequential``: the KernelBench-style baseline: one candidate at a time, its build alone
     (one build worker) in a fresh cache (``WORK_DIR/sequential``), then its gate and time, then
     the next. It runs last (after fidelity), on a subset (round-robin over the problems) of as
     many candidates as the time left allows, and its rate is scaled to the whole set (the
     per-candidate cost is one build alone, ~55 s on the H200, which varies by a few %).

   Candidates per minute = 60 x candidates / wall seconds of the ``evaluate()`` calls; setting up
   the evaluators (worker start, fp64 truths, floor) is measured and reported separately, because
   a search pays it once per run. Time per stage: ``build_s`` and ``eval_s`` of each EvalResult;
   ``eval_s`` is not split into gate and time by the worker, so the time part is estimated from
   the trial count, warm-up budget and medians (:func:`split_eval_s`), unless results carry
   measured ``gate_s``/``time_s``. Targets: cold >= 10/min, warm >= 60/min, cold >= 5x sequential.
2. **Fidelity.** Each headline problem's seed kernel is re-measured in ``--fidelity-runs``
   separate evaluators (separate worker processes); the speedup's spread (max / min - 1) must be
   <= 2%. A separate process then loads the same kernel module from the warm cache
   (``evokernel.build.load_candidate``) and the reference, and times both with
   ``triton.testing.do_bench`` (its own L2 flush, warm-up and rep budgets, return_mode="median",
   interleaved rounds); the median speedup of the runs must agree with it within 3%. The same
   process also times them with evokernel's own method, which tells a method difference from a
   process-to-process one.
3. **Faults** are ``tests/test_gpu_faults.py`` (``gpu``-marked; passes on the H200,
   ``results/h200-2026-11-30/gpu_faults.txt``); the report references it, and ``--phases faults``
   runs it.

Each benchmark writes ``bench_<name>.json`` and ``bench_<name>.md`` under the results folder
(rewritten after every phase, so a run killed by its time limit leaves what it measured), and
the command prints a short table last. The wall-time estimate printed first comes from the
H200's numbers of 2026-11-30 (:class:`CostModel`); phases that no longer fit the budget are
shortened (sequential) or skipped, and say so.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from loguru import logger

from evokernel.config import EvalConfig, TimingConfig
from evokernel.errors import ConfigError, EvokernelError, NoGPUError
from evokernel.records import Candidate, EvalResult
from evokernel.tunables import Tunable, find_tunables, set_tunables

PHASES = ("cold", "warm", "fidelity", "sequential", "faults")
DEFAULT_PHASES = ("cold", "warm", "fidelity", "sequential")
HEADLINE = ("softmax", "layernorm", "matmul", "conv2d", "conv2d_relu_maxpool")
#: 32 candidates in whole waves of 8 builds (16 cores / MAX_JOBS=2): layernorm has 120 distinct
#: assignments, conv2d_relu_maxpool 25, matmul 8, softmax and conv2d only 5 each.
DEFAULT_THROUGHPUT = (("layernorm", 16), ("conv2d_relu_maxpool", 8), ("matmul", 8))
TARGET_COLD_PER_MIN = 10.0
TARGET_WARM_PER_MIN = 60.0
TARGET_COLD_OVER_SEQUENTIAL = 5.0
MAX_SPEEDUP_SPREAD = 0.02
MAX_DO_BENCH_DISAGREEMENT = 0.03
#: Per function and trial, besides the function itself: L2 flush (120 MB on an H200, ~0.03 ms),
#: two device synchronizes and two event records. Used only by the gate/time estimate.
TRIAL_OVERHEAD_MS = 0.1
_MARKER = ".evokernel_bench_cache"       # a folder the bench may delete holds this file
FAULTS_TEST = "tests/test_gpu_faults.py"


# ---------------------------------------------------------------------------------------------
# Tune variants of the seed kernels
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One benchmark candidate: a seed kernel with its marked constants set to ``assignment``
    (only the constants that differ from the seed; {} is the seed itself)."""

    problem: str
    assignment: tuple[tuple[str, str], ...]
    candidate: Candidate

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.assignment) or "seed"


def _alternatives(t: Tunable) -> list[str]:
    return list(dict.fromkeys(c for c in t.choices if c != t.value))


def count_assignments(source: str) -> int:
    """How many distinct sources the marked constants of ``source`` give (the source included):
    the product over constants of (1 + distinct listed values other than the current one)."""
    return math.prod(1 + len(_alternatives(t)) for t in find_tunables(source))


def tune_assignments(source: str) -> Iterator[dict[str, str]]:
    """Every assignment of the constants marked ``// tune:`` in ``source``, nearest first.

    Order: by how many constants change (0: the source itself, then one at a time, ...); within
    that, by which constants (in source order, ``itertools.combinations``) and then by the
    position of the new values in their ``// tune:`` lists. Deterministic, lazy (large spaces are
    never enumerated in full), and every assignment gives a different source text. Values are
    the listed text, only constants that change are in the dict.
    """
    tunables = [t for t in find_tunables(source)]
    alts = [_alternatives(t) for t in tunables]
    for k in range(len(tunables) + 1):
        for idxs in itertools.combinations(range(len(tunables)), k):
            for combo in itertools.product(*(alts[i] for i in idxs)):
                yield {tunables[i].name: v for i, v in zip(idxs, combo)}


def tune_variants(problem: str, source: str, n: int) -> list[Variant]:
    """The first ``n`` of :func:`tune_assignments` as candidates (operator "seed" for the source
    itself, "tune" for the others; generation 0).

    Raises: ValueError if n < 1 or the source has fewer than ``n`` distinct assignments (the
        message says how many it has).
    """
    if n < 1:
        raise ValueError(f"{problem}: need n >= 1 variants, got {n}")
    available = count_assignments(source)
    if available < n:
        raise ValueError(f"{problem}: its seed kernel has {available} distinct tune "
                         f"assignments, fewer than the {n} asked")
    out = []
    for values in itertools.islice(tune_assignments(source), n):
        text = set_tunables(source, values) if values else source
        items = tuple(sorted(values.items()))
        idea = ("bench: tune " + ", ".join(f"{k}={v}" for k, v in items)) if items \
            else "bench: seed kernel"
        out.append(Variant(problem, items, Candidate(source=text, idea=idea,
                                                     operator="tune" if items else "seed")))
    if len({v.candidate.id for v in out}) != len(out):      # set_tunables changes the text
        raise ValueError(f"{problem}: tune assignments gave duplicate sources")
    return out


def throughput_variants(spec: Sequence[tuple[str, int]],
                        sources: Mapping[str, str] | None = None) -> list[Variant]:
    """Variants for ``spec`` ((problem, count) pairs), in that order.

    sources: problem -> seed kernel text; default: each built-in problem's seed kernel.
    Raises: ProblemError for an unknown problem or one without a seed kernel; ValueError as
        :func:`tune_variants`, or when two problems' variants coincide.
    """
    out: list[Variant] = []
    for name, n in spec:
        src = sources[name] if sources is not None else _seed_source(name)
        out += tune_variants(name, src, n)
    if len({v.candidate.id for v in out}) != len(out):
        raise ValueError("throughput set: two candidates have the same source")
    return out


def sequential_subset(variants: Sequence[Variant], n: int) -> list[Variant]:
    """``n`` variants taken round-robin over the problems, in their order (the first of each
    problem, then the second of each, ...)."""
    by_problem: dict[str, list[Variant]] = {}
    for v in variants:
        by_problem.setdefault(v.problem, []).append(v)
    order = [v for group in itertools.zip_longest(*by_problem.values()) for v in group
             if v is not None]
    return order[:max(0, n)]


def _seed_source(name: str) -> str:
    from evokernel.problem import load_problem
    from evokernel.errors import ProblemError
    p = load_problem(name)
    if not p.seed_source:
        raise ProblemError(f"{p.path}: no seed kernel (seeds/{p.path.name}) to make variants of")
    return p.seed_source


# ---------------------------------------------------------------------------------------------
# The plan and its wall-time estimate
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchPlan:
    """What ``evokernel bench`` runs.

    phases: a subset of PHASES, run in that order (cold before warm: warm uses its cache).
    throughput: (problem, number of variants) for cold, warm and sequential.
    sequential_n: the most candidates the sequential baseline measures (the budget may cut it).
    fidelity_problems, fidelity_runs: seed kernels re-measured, and in how many evaluators.
    budget_s: wall seconds the whole bench may take; later phases adapt to what is left.
    work_dir: build caches (``cold/``, ``sequential/``), deleted and refilled by the bench.
    build_workers: the engine's builds at once (None: its default, cores // 2).
    compile_baseline: also time torch.compile in every worker set-up (off: it costs set-up time
        and is not part of what is measured here).
    do_bench_warmup_ms, do_bench_rep_ms, do_bench_rounds: triton.testing.do_bench's warm-up and
        rep budgets per call, and how many interleaved rounds (reference, candidate, ...) per
        kernel; the median over rounds of each call's median is kept.
    setup_concurrency: evaluators set up (and alive) at once; fidelity sets up whole runs, at
        least one run per group.
    """

    results_dir: Path
    work_dir: Path
    phases: tuple[str, ...] = DEFAULT_PHASES
    throughput: tuple[tuple[str, int], ...] = DEFAULT_THROUGHPUT
    sequential_n: int = 8
    fidelity_problems: tuple[str, ...] = HEADLINE
    fidelity_runs: int = 5
    budget_s: float = 530.0
    build_workers: int | None = None
    compile_baseline: bool = False
    do_bench_warmup_ms: float = 25.0
    do_bench_rep_ms: float = 100.0
    do_bench_rounds: int = 3
    setup_concurrency: int = 10

    def __post_init__(self) -> None:
        bad = [p for p in self.phases if p not in PHASES]
        if bad or not self.phases:
            raise ValueError(f"phases: unknown {bad}; known: {', '.join(PHASES)}")
        if any(n < 1 for _, n in self.throughput) or not self.throughput:
            raise ValueError("throughput: need at least one problem, each with >= 1 variant")
        if len({p for p, _ in self.throughput}) != len(self.throughput):
            raise ValueError("throughput: a problem is listed twice")
        if self.sequential_n < 1:
            raise ValueError(f"sequential_n must be >= 1, got {self.sequential_n}")
        if self.fidelity_runs < 2:
            raise ValueError(f"fidelity_runs must be >= 2 (a spread needs two), got "
                             f"{self.fidelity_runs}")
        if not self.fidelity_problems:
            raise ValueError("fidelity_problems must not be empty")
        if not self.budget_s > 0:
            raise ValueError(f"budget_s must be > 0, got {self.budget_s}")
        if self.build_workers is not None and self.build_workers < 1:
            raise ValueError(f"build_workers must be >= 1, got {self.build_workers}")
        if self.do_bench_rounds < 1 or not self.do_bench_rep_ms > 0 or self.do_bench_warmup_ms < 0:
            raise ValueError("do_bench: need rounds >= 1, rep_ms > 0, warmup_ms >= 0")
        if self.setup_concurrency < 1:
            raise ValueError(f"setup_concurrency must be >= 1, got {self.setup_concurrency}")

    @property
    def candidates(self) -> int:
        return sum(n for _, n in self.throughput)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["results_dir"], d["work_dir"] = str(self.results_dir), str(self.work_dir)
        return d


@dataclass(frozen=True)
class CostModel:
    """Today's H200 costs behind the estimate (results/h200-2026-11-30, 16 cores).

    build_single_s: one build alone (run_softmax generation 0: 54.5 s; 4 at once: 53-58 s).
    build_crowding: per-build latency = build_single_s x max(1, crowding x 2 x workers / cores):
        8 builds at once (MAX_JOBS=2 each) on 16 cores took 60.5-62.9 s (prebuild.txt) -> 1.1.
    eval_s: gate + time of one candidate (run stores: 0.3-3.9 s, mostly 0.4-1.5 s).
    setup_s, setup_cpu_s: one CudaEvaluator's set-up (worker start, fp64 truths, floor;
        9-16 s from the runs' logs) and the CPU seconds of it that k concurrent set-ups share
        over the cores (a guess; not measured yet).
    start_s: interpreter, imports and the first CUDA context.
    close_s: closing a group of evaluators at once (their workers exit).
    do_bench_start_s, do_bench_problem_s: the do_bench process (torch + triton import, CUDA) and
        each problem in it (cache-hit load, inputs, do_bench rounds, evokernel's timing).
    faults_s: tests/test_gpu_faults.py (56 s with warm builds, ~190 s cold with the 30 s hang).
    """

    build_single_s: float = 55.0
    build_crowding: float = 1.1
    eval_s: float = 1.2
    setup_s: float = 12.0
    setup_cpu_s: float = 8.0
    start_s: float = 10.0
    close_s: float = 2.0
    do_bench_start_s: float = 15.0
    do_bench_problem_s: float = 5.0
    faults_s: float = 190.0

    def build_latency_s(self, workers: int, cores: int) -> float:
        return self.build_single_s * max(1.0, self.build_crowding * 2 * workers / max(1, cores))

    def setup_group_s(self, k: int, cores: int) -> float:
        return 0.0 if k <= 0 else self.setup_s + self.setup_cpu_s * (k - 1) / max(1, cores)


def engine_build_workers(plan: BenchPlan, cores: int) -> int:
    """The build workers the engine will use: the plan's, else EvalConfig's default."""
    return plan.build_workers or max(1, cores // 2)


def estimate_wall_s(plan: BenchPlan, cost: CostModel = CostModel(), *, cores: int | None = None,
                    sequential_n: int | None = None,
                    prebuilt: int | None = None) -> dict[str, float]:
    """Estimated wall seconds of each selected phase, in run order, and their ``total``
    (``start`` included).

    cores: CPU cores of the machine (default: this one's). sequential_n: candidates of the
    sequential phase (default: the plan's). prebuilt: fidelity seed kernels that need a build
    (default: those whose problem is not in the throughput set when cold runs, else all).
    Formulas (w = build workers, L = build latency with w at once):
      cold = set-up of its evaluators at once + per problem ceil(n / w) x L + the last wave's
          gate and time (min(n, w) x eval_s: its builds end together);
      warm = set-up + candidates x eval_s;
      fidelity = per group of whole runs (fidelity_groups) its set-up + close_s, the first
          overlapped by the seed builds, + runs x problems x eval_s + the do_bench process;
      sequential = one set-up per problem it touches + n x (one build alone + eval_s).
    """
    cores = cores or os.cpu_count() or 1
    w = engine_build_workers(plan, cores)
    wave = cost.build_latency_s(w, cores)
    est: dict[str, float] = {"start": cost.start_s}
    if "cold" in plan.phases:
        est["cold"] = (cost.setup_group_s(len(plan.throughput), cores)
                       + sum(math.ceil(n / w) * wave + min(n, w) * cost.eval_s
                             for _, n in plan.throughput))
    if "warm" in plan.phases:
        est["warm"] = (cost.setup_group_s(len(plan.throughput), cores)
                       + plan.candidates * cost.eval_s)
    if "fidelity" in plan.phases:
        if prebuilt is None:
            in_cold = {p for p, _ in plan.throughput} if "cold" in plan.phases else set()
            prebuilt = len([p for p in plan.fidelity_problems if p not in in_cold])
        builds = math.ceil(prebuilt / w) * cost.build_latency_s(min(w, prebuilt), cores) \
            if prebuilt else 0.0
        n_p = len(plan.fidelity_problems)
        groups = [cost.setup_group_s(len(g), cores) + cost.close_s for g in
                  fidelity_groups(plan.fidelity_runs, n_p, plan.setup_concurrency)]
        est["fidelity"] = (max(builds, groups[0]) + sum(groups[1:])
                           + plan.fidelity_runs * n_p * cost.eval_s + cost.do_bench_start_s
                           + n_p * cost.do_bench_problem_s)
    if "sequential" in plan.phases:
        n = plan.sequential_n if sequential_n is None else sequential_n
        touched = min(n, len(plan.throughput))
        est["sequential"] = (touched * cost.setup_s
                             + n * (cost.build_latency_s(1, cores) + cost.eval_s))
    if "faults" in plan.phases:
        est["faults"] = cost.faults_s
    est["total"] = sum(est.values())
    return est


def sequential_fit(plan: BenchPlan, cost: CostModel = CostModel(), *,
                   cores: int | None = None) -> int:
    """How many sequential candidates fit in the budget after the other phases (at most
    plan.sequential_n; 0 if none fits or sequential is not selected)."""
    if "sequential" not in plan.phases:
        return 0
    cores = cores or os.cpu_count() or 1
    others = estimate_wall_s(plan, cost, cores=cores, sequential_n=0)["total"]
    per = cost.build_latency_s(1, cores) + cost.eval_s
    n = 0
    while n < plan.sequential_n:
        touched = min(n + 1, len(plan.throughput))
        if others + touched * cost.setup_s + (n + 1) * per > plan.budget_s:
            break
        n += 1
    return n


# ---------------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------------

def per_minute(candidates: int, wall_s: float) -> float:
    """Candidates per minute: 60 x candidates / wall_s (0.0 when wall_s <= 0 or no candidate)."""
    return 60.0 * candidates / wall_s if wall_s > 0 and candidates > 0 else 0.0


def spread(values: Sequence[float]) -> float:
    """max / min - 1 of positive values (0.02 = 2%). Raises ValueError if empty or not > 0."""
    if not values or min(values) <= 0:
        raise ValueError(f"spread needs positive values, got {list(values)}")
    return max(values) / min(values) - 1.0


def rel_diff(a: float, b: float) -> float:
    """a / b - 1 (signed; 0.03 = a is 3% above b). Raises ValueError if b <= 0."""
    if not b > 0:
        raise ValueError(f"rel_diff: b must be > 0, got {b}")
    return a / b - 1.0


def _trials(detail: str) -> int | None:
    m = re.search(r"(\d+) trials", detail or "")
    return int(m[1]) if m else None


def split_eval_s(r: EvalResult, timing: TimingConfig = TimingConfig()
                 ) -> tuple[float | None, float | None, bool]:
    """(gate_s, time_s, measured) of one result's ``eval_s``.

    Measured when the result carries ``gate_s`` and ``time_s`` (a worker that records them).
    Otherwise estimated: the timing loop costs, for the reference and the candidate each,
    max(warmup_ms, 2 x its median) of warm-up plus trials x (median + TRIAL_OVERHEAD_MS), with
    the trial count from the detail text ("N trials"; min_trials when absent); the rest of
    eval_s (module load, gate, anti-cheat) is the gate. A result without times spent it all in
    the gate. Returns (None, None, False) when eval_s is None.
    """
    gate, timed = getattr(r, "gate_s", None), getattr(r, "time_s", None)
    if gate is not None and timed is not None:
        return float(gate), float(timed), True
    if r.eval_s is None:
        return None, None, False
    if not r.reference_ms or not r.candidate_ms:
        return r.eval_s, 0.0, False
    n = _trials(r.detail) or timing.min_trials
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
    phase is missing or measured nothing)."""
    def rate(name: str) -> float | None:
        s = phases.get(name)
        return s.per_min if s is not None and s.candidates else None
    cold, warm, seq = rate("cold"), rate("warm"), rate("sequential")
    ratio = cold / seq if cold is not None and seq else None
    return [Target("cold candidates/min", cold, TARGET_COLD_PER_MIN, "/min"),
            Target("warm candidates/min", warm, TARGET_WARM_PER_MIN, "/min"),
            Target("cold / sequential", ratio, TARGET_COLD_OVER_SEQUENTIAL, "x")]


@dataclass(frozen=True)
class FidelityRow:
    """One problem's fidelity: its seed kernel in every run, and do_bench's view of it.

    runs: per run {run, verdict, reason, reference_ms, candidate_ms, speedup, error}.
    speedup_spread, candidate_ms_spread, reference_ms_spread: max / min - 1 over accepted runs.
    speedup_median: median speedup of the accepted runs.
    do_bench: {reference_ms, candidate_ms, speedup, inproc_reference_ms, inproc_candidate_ms,
        inproc_speedup, error} from the separate process.
    agreement: speedup_median / do_bench speedup - 1; candidate_ms_agreement: median candidate
        ms / do_bench candidate ms - 1; inproc_agreement: evokernel's method in the do_bench
        process against do_bench there (a method difference, not a process one).
    spread_ok, agreement_ok: within MAX_SPEEDUP_SPREAD / MAX_DO_BENCH_DISAGREEMENT (None:
        not measurable).
    """

    problem: str
    runs: tuple[dict[str, Any], ...]
    speedup_median: float | None
    speedup_spread: float | None
    candidate_ms_spread: float | None
    reference_ms_spread: float | None
    do_bench: dict[str, Any]
    agreement: float | None
    candidate_ms_agreement: float | None
    inproc_agreement: float | None
    spread_ok: bool | None
    agreement_ok: bool | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["runs"] = list(self.runs)
        return d


def fidelity_row(problem: str, runs: Sequence[Mapping[str, Any]],
                 do_bench: Mapping[str, Any] | None) -> FidelityRow:
    """Combine one problem's runs (dicts as in FidelityRow.runs) with its do_bench dict."""
    ok = [r for r in runs if r.get("verdict") == "accept" and r.get("speedup")]
    notes = []
    if len(ok) < len(runs):
        notes.append(f"{len(runs) - len(ok)} of {len(runs)} runs not accepted")

    def sp(key: str) -> float | None:
        vals = [float(r[key]) for r in ok if r.get(key)]
        return spread(vals) if len(vals) >= 2 else None

    med = statistics.median(float(r["speedup"]) for r in ok) if ok else None
    cand_med = statistics.median(float(r["candidate_ms"]) for r in ok) if ok else None
    db = dict(do_bench or {})
    agree = cand_agree = inproc = None
    if db.get("speedup") and med:
        agree = rel_diff(med, float(db["speedup"]))
    if db.get("candidate_ms") and cand_med:
        cand_agree = rel_diff(cand_med, float(db["candidate_ms"]))
    if db.get("inproc_speedup") and db.get("speedup"):
        inproc = rel_diff(float(db["inproc_speedup"]), float(db["speedup"]))
    if db.get("error"):
        notes.append(f"do_bench: {str(db['error']).splitlines()[-1][:200]}")
    elif not db:
        notes.append("do_bench not run")
    s = sp("speedup")
    spread_ok = None if s is None or len(ok) < len(runs) else s <= MAX_SPEEDUP_SPREAD
    if len(ok) < len(runs) and runs:
        spread_ok = False
    return FidelityRow(
        problem=problem, runs=tuple(dict(r) for r in runs), speedup_median=med,
        speedup_spread=s, candidate_ms_spread=sp("candidate_ms"),
        reference_ms_spread=sp("reference_ms"), do_bench=db, agreement=agree,
        candidate_ms_agreement=cand_agree, inproc_agreement=inproc, spread_ok=spread_ok,
        agreement_ok=None if agree is None else abs(agree) <= MAX_DO_BENCH_DISAGREEMENT,
        note="; ".join(notes))


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------

def _f(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}%"


def _ok(flag: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "n/a"}[flag]


def throughput_markdown(report: Mapping[str, Any]) -> str:
    """bench_throughput.md from the throughput report dict (see run_bench)."""
    lines = ["# Engine throughput", "",
             f"Device: {report.get('device', {}).get('device', '?')}; "
             f"{report.get('cores', '?')} cores; build workers "
             f"{report.get('build_workers', '?')}; {len(report.get('candidates', []))} "
             "distinct tune variants of the seed kernels.", "",
             "Rates are candidates per minute over the wall time of the `evaluate()` calls; "
             "evaluator set-up (worker start, fp64 truths, floor) is a separate column, paid "
             "once per search. Build/eval/gate/time are sums over candidates (builds overlap). ",
             "", "| phase | candidates | accepted | evaluate s | set-up s | per min | "
             "per min incl. set-up | build s | gate s | time s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in ("cold", "warm", "sequential"):
        s = report.get("phases", {}).get(name)
        if not s:
            continue
        count = (f"{s['candidates']} of {s['of_total']}" if s["of_total"] != s["candidates"]
                 else str(s["candidates"]))
        lines.append(f"| {name} | {count} | {s['accepted']} | {s['evaluate_s']:.1f} | "
                     f"{s['setup_s']:.1f} | {s['per_min']:.2f} | {s['per_min_with_setup']:.2f} "
                     f"| {s['build_s']:.1f} | {s['gate_s']:.1f} | {s['time_s']:.1f} |")
    notes = [f"- {n}: {s['note']}" for n, s in report.get("phases", {}).items() if s.get("note")]
    if any(not s.get("split_measured") for s in report.get("phases", {}).values()):
        notes.append("- gate vs time: the worker records only `eval_s` (gate + time); the time "
                     "part is estimated from each result's trial count, warm-up budget and "
                     f"medians (+{TRIAL_OVERHEAD_MS} ms per trial and function for the L2 flush "
                     "and synchronizes), the rest is the gate (module load included).")
    notes += [f"- {s}" for s in report.get("skipped", [])]
    lines += ["", "| target | measured | bound | result |", "|---|---|---|---|"]
    for t in report.get("targets", []):
        lines.append(f"| {t['name']} | {_f(t['value'], '.2f')} | "
                     f"{'>=' if t['at_least'] else '<='} {t['bound']:g}{t['unit']} | "
                     f"{_ok(t['passed'])} |")
    if notes:
        lines += ["", "Notes:", *notes]
    cands = report.get("candidates", [])
    if cands:
        lines += ["", "| problem | candidate | tune | cold build s | cold eval s | verdict | "
                  "candidate ms | speedup |", "|---|---|---|---|---|---|---|---|"]
        for c in cands:
            r = c.get("cold") or c.get("warm") or {}
            lines.append(f"| {c['problem']} | {c['id']} | {c['label']} | "
                         f"{_f(r.get('build_s'))} | {_f(r.get('eval_s'), '.2f')} | "
                         f"{r.get('reason', '-')} | {_f(r.get('candidate_ms'), '.4f')} | "
                         f"{_f(r.get('speedup'), '.3f')} |")
    return "\n".join(lines) + "\n"


def fidelity_markdown(report: Mapping[str, Any]) -> str:
    """bench_fidelity.md from the fidelity report dict (see run_bench)."""
    runs = report.get("runs", "?")
    lines = ["# Timing fidelity", "",
             f"Each seed kernel re-measured in {runs} separate evaluators (separate worker "
             "processes). Spread = max/min - 1 of the speedup over the runs (target <= "
             f"{MAX_SPEEDUP_SPREAD:.0%}). do_bench: `triton.testing.do_bench` in a separate "
             "process on the same kernel module (warm cache) and reference, "
             f"warm-up {report.get('do_bench_warmup_ms', '?')} ms, rep "
             f"{report.get('do_bench_rep_ms', '?')} ms, {report.get('do_bench_rounds', '?')} "
             "interleaved rounds, median; agreement = median speedup of the runs / do_bench "
             f"speedup - 1 (target within {MAX_DO_BENCH_DISAGREEMENT:.0%}). \"evokernel method "
             "there\" is evokernel's timing loop in the do_bench process against do_bench there.",
             "", "| problem | speedups (runs) | spread | do_bench speedup | agreement | "
             "candidate ms vs do_bench | evokernel method there | spread | agreement |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("problems", []):
        sps = ", ".join(_f(x.get("speedup"), ".4f") for x in r["runs"])
        lines.append(f"| {r['problem']} | {sps} | {_pct(r['speedup_spread'])} | "
                     f"{_f(r['do_bench'].get('speedup'), '.4f')} | {_pct(r['agreement'])} | "
                     f"{_pct(r['candidate_ms_agreement'])} | {_pct(r['inproc_agreement'])} | "
                     f"{_ok(r['spread_ok'])} | {_ok(r['agreement_ok'])} |")
    lines += ["", "| problem | run | verdict | reference ms | candidate ms | speedup |",
              "|---|---|---|---|---|---|"]
    for r in report.get("problems", []):
        for x in r["runs"]:
            lines.append(f"| {r['problem']} | {x.get('run')} | {x.get('reason') or '-'} | "
                         f"{_f(x.get('reference_ms'), '.4f')} | {_f(x.get('candidate_ms'), '.4f')}"
                         f" | {_f(x.get('speedup'), '.4f')} |")
        db = r["do_bench"]
        if db and not db.get("error"):
            lines.append(f"| {r['problem']} | do_bench | - | {_f(db.get('reference_ms'), '.4f')} "
                         f"| {_f(db.get('candidate_ms'), '.4f')} "
                         f"| {_f(db.get('speedup'), '.4f')} |")
    notes = [f"- {r['problem']}: {r['note']}" for r in report.get("problems", []) if r["note"]]
    notes += [f"- {s}" for s in report.get("skipped", [])]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def faults_markdown(report: Mapping[str, Any]) -> str:
    """bench_faults.md: where the fault benchmark lives, and its outcome when it was run."""
    lines = ["# Faults", "",
             f"Covered by `{FAULTS_TEST}` (marked `gpu`): one batch mixes a hanging kernel, an "
             "out-of-bounds write, a host segfault, a GPU out-of-memory and a compile error with "
             "two good kernels; every good kernel must be accepted with its time, every bad one "
             "get its reason (timeout, cuda_fault, worker_crash, out_of_memory, build_error), and "
             "the engine must end with no worker alive. It passed on the H200 on 2026-11-30 "
             "(`results/h200-2026-11-30/gpu_faults.txt`).", "",
             f"Run it: `python -m pytest -q -m gpu {FAULTS_TEST}` (or `evokernel bench --phases "
             "faults`)."]
    if report.get("skipped"):
        lines += ["", str(report["skipped"])]
    if report.get("ran"):
        outcome = "passed" if report.get("passed") else "FAILED"
        lines += ["", f"This run: exit status {report.get('returncode')} in "
                  f"{report.get('wall_s', 0):.0f} s ({outcome}); output in "
                  f"`{report.get('log')}`.", "", "```",
                  str(report.get("tail", "")).strip(), "```"]
    return "\n".join(lines) + "\n"


def summary_table(throughput: Mapping[str, Any] | None, fidelity: Mapping[str, Any] | None,
                  faults: Mapping[str, Any] | None) -> str:
    """The short Markdown table printed last."""
    lines = ["| benchmark | measured | target | result |", "|---|---|---|---|"]
    if throughput:
        ph = throughput.get("phases", {})
        for t in throughput.get("targets", []):
            extra = ""
            key = {"cold candidates/min": "cold", "warm candidates/min": "warm"}.get(t["name"])
            if key and key in ph:
                s = ph[key]
                extra = (f" ({s['candidates']} in {s['evaluate_s']:.0f} s + set-up "
                         f"{s['setup_s']:.0f} s; {s['accepted']} accepted)")
            elif t["name"].startswith("cold /") and "sequential" in ph:
                s = ph["sequential"]
                extra = (f" (sequential {s['per_min']:.2f}/min from {s['candidates']} of "
                         f"{s['of_total']}, scaled)")
            lines.append(f"| throughput: {t['name']} | {_f(t['value'], '.2f')}{extra} | "
                         f"{'>=' if t['at_least'] else '<='} {t['bound']:g}{t['unit']} | "
                         f"{_ok(t['passed'])} |")
    if fidelity:
        for r in fidelity.get("problems", []):
            lines.append(f"| fidelity: {r['problem']} | spread {_pct(r['speedup_spread'])}, vs "
                         f"do_bench {_pct(r['agreement'])} | <= {MAX_SPEEDUP_SPREAD:.0%} / "
                         f"<= {MAX_DO_BENCH_DISAGREEMENT:.0%} | {_ok(r['spread_ok'])} / "
                         f"{_ok(r['agreement_ok'])} |")
    if faults is not None:
        result = ("PASS" if faults.get("passed") else "FAIL") if faults.get("ran") \
            else "see gpu_faults.txt"
        lines.append(f"| faults | {FAULTS_TEST} | every reason named | {result} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------

EvaluatorFactory = Callable[[Any, EvalConfig], Any]


@dataclass
class BenchDeps:
    """What run_bench needs from the machine; tests pass fakes.

    make_evaluator(problem, config): an Evaluator (CudaEvaluator on a GPU); must have
        ``evaluate(candidates)``, ``close()`` and ``info``.
    prebuild(candidates, config): build into config's cache; returns objects with ``ok``,
        ``build_s`` and ``cache_hit`` (evokernel.build.BuildResult).
    do_bench(spec): the do_bench process's dict ({"problems": {name: {...}}} or {"error"}).
    prepare_cache(path): make an empty cache folder usable (device peaks copied or measured).
    run_faults(log_path): run the fault test; returns {"returncode", "tail"}.
    load_problem(name): a Problem. now: a monotonic clock in seconds. cores: CPU cores.
    """

    make_evaluator: EvaluatorFactory
    prebuild: Callable[[Sequence[Candidate], EvalConfig], list[Any]]
    do_bench: Callable[[dict[str, Any]], dict[str, Any]]
    prepare_cache: Callable[[Path], None] = lambda path: None
    run_faults: Callable[[Path], dict[str, Any]] = lambda log: {"returncode": None, "tail": ""}
    load_problem: Callable[[str], Any] = field(default=None)  # type: ignore[assignment]
    now: Callable[[], float] = time.perf_counter
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        if self.load_problem is None:
            from evokernel.problem import load_problem
            self.load_problem = load_problem


def fresh_dir(path: Path) -> Path:
    """Empty ``path`` (a folder the bench made: it holds the marker file) and return it.

    Raises: ConfigError if ``path`` exists, is not empty and has no marker, so a mistyped
        --work-dir never deletes someone's files.
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir() or (any(path.iterdir()) and not (path / _MARKER).is_file()):
            raise ConfigError(f"{path}: exists and was not made by `evokernel bench` (no "
                              f"{_MARKER}); refusing to delete it. Pick another --work-dir.")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / _MARKER).write_text("a build cache made by evokernel bench; it deletes it at will\n")
    return path


def _cache_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if not (path / _MARKER).exists() and not any(path.iterdir()):
        (path / _MARKER).write_text("a build cache made by evokernel bench\n")
    return path


class _Clock:
    def __init__(self, now: Callable[[], float], budget_s: float):
        self.now, self.budget_s, self.t0 = now, budget_s, now()

    def elapsed(self) -> float:
        return self.now() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def _open_evaluators(specs: Sequence[tuple[Any, EvalConfig]], deps: BenchDeps,
                     concurrency: int) -> tuple[list[Any], float]:
    """Create evaluators, ``concurrency`` at a time. Returns (evaluators or exceptions, wall s).
    Nothing is left running if the caller closes what it got."""
    t0 = deps.now()
    if not specs:
        return [], 0.0

    def make(spec: tuple[Any, EvalConfig]) -> Any:
        try:
            return deps.make_evaluator(*spec)
        except Exception as e:  # noqa: BLE001 - reported per evaluator
            logger.error("evaluator for {} failed to start: {}", getattr(spec[0], "name", "?"), e)
            return e

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(specs)))) as pool:
        out = list(pool.map(make, specs))
    return out, deps.now() - t0


def _close_all(evaluators: Sequence[Any]) -> None:
    """Close every evaluator (not exceptions), at once: each waits for its workers to exit."""
    live = [ev for ev in evaluators if not isinstance(ev, BaseException)]

    def close(ev: Any) -> None:
        try:
            ev.close()
        except Exception as e:  # noqa: BLE001 - closing must go on for the others
            logger.warning("closing an evaluator: {}", e)

    if live:
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            list(pool.map(close, live))


def _result_row(r: EvalResult, timing: TimingConfig) -> dict[str, Any]:
    gate, timed, measured = split_eval_s(r, timing)
    return {"verdict": r.verdict.value, "reason": r.reason.value, "build_s": r.build_s,
            "eval_s": r.eval_s, "gate_s": gate, "time_s": timed, "split_measured": measured,
            "reference_ms": r.reference_ms, "candidate_ms": r.candidate_ms,
            "speedup": r.speedup, "trials": _trials(r.detail), "detail": r.detail[:300]}


def _eval_config(plan: BenchPlan, cache: Path, *, build_workers: int | None = None) -> EvalConfig:
    return EvalConfig(cache_dir=str(cache), measure_compile=plan.compile_baseline,
                      build_workers=build_workers if build_workers is not None
                      else plan.build_workers)


def _throughput_phase(name: str, plan: BenchPlan, variants: Sequence[Variant], cache: Path,
                      deps: BenchDeps, report: dict[str, Any]) -> PhaseStats:
    """cold or warm: one evaluator per problem (set up at once), one evaluate() per problem."""
    problems = list(dict.fromkeys(v.problem for v in variants))
    cfg = _eval_config(plan, cache)
    evs, setup_s = _open_evaluators([(deps.load_problem(p), cfg) for p in problems], deps,
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
            try:
                got = ev.evaluate([v.candidate for v in batch])
            except Exception as e:  # noqa: BLE001 - e.g. a worker that cannot respawn
                logger.exception("{}: {} evaluate() raised", name, p)
                notes.append(f"{p}: evaluate() raised {type(e).__name__}: {e}; its "
                             f"{len(batch)} candidates are not counted")
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
        _close_all(evs)
    cold_builds = sum(1 for r in results if (r.build_s or 0.0) > 1.0)
    if name == "warm" and cold_builds:
        notes.append(f"{cold_builds} builds took over 1 s: the cache was not warm for them")
    return phase_stats(name, results, evaluate_s=evaluate_s, setup_s=setup_s,
                       timing=cfg.timing, note="; ".join(notes))


def _sequential_phase(plan: BenchPlan, variants: Sequence[Variant], n_max: int, cache: Path,
                      clock: _Clock, reserve_s: float, deps: BenchDeps,
                      report: dict[str, Any]) -> PhaseStats:
    """KernelBench style: each candidate built alone (one build worker, fresh cache), then gated
    and timed, then the next. Stops early when the next one would eat into ``reserve_s``."""
    cfg = _eval_config(plan, cache, build_workers=1)
    subset = sequential_subset(variants, n_max)
    per_est = deps.cost.build_latency_s(1, deps.cores) + deps.cost.eval_s
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
                evs, s = _open_evaluators([(deps.load_problem(v.problem), cfg)], deps, 1)
                setup_s += s
                evaluators[v.problem] = evs[0]
            ev = evaluators[v.problem]
            if isinstance(ev, BaseException):
                stopped = f"{v.problem}: evaluator failed to start ({ev})"
                break
            t0 = deps.now()
            try:
                r = ev.evaluate([v.candidate])[0]
            except Exception as e:  # noqa: BLE001 - e.g. a worker that cannot respawn
                logger.exception("sequential: {} evaluate() raised", v.problem)
                stopped = f"{v.problem}: evaluate() raised {type(e).__name__}: {e}"
                break
            wall = deps.now() - t0
            evaluate_s += wall
            results.append(r)
            row = next(c for c in report["candidates"] if c["id"] == v.candidate.id)
            row["sequential"] = dict(_result_row(r, cfg.timing), wall_s=wall)
            logger.info("sequential: {} [{}] in {:.1f} s (build {:.1f} s, {})", v.problem,
                        v.label, wall, r.build_s or 0.0, r.reason.value)
    finally:
        _close_all(list(evaluators.values()))
    note = (f"measured on {len(results)} of the {len(variants)} candidates (round-robin over "
            "problems, each built alone in a fresh cache); the rate is scaled to the set")
    if stopped:
        note += "; " + stopped
    return phase_stats("sequential", results, evaluate_s=evaluate_s, setup_s=setup_s,
                       of_total=len(variants), timing=cfg.timing, note=note)


def fidelity_groups(runs: int, problems: int, concurrency: int) -> list[list[tuple[int, int]]]:
    """(run, problem) index pairs, run-major, in groups of whole runs with at most
    ``concurrency`` evaluators each (at least one run per group)."""
    per = max(1, concurrency // max(1, problems))
    pairs = [(r, p) for r in range(runs) for p in range(problems)]
    size = per * problems
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]


def _fidelity_phase(plan: BenchPlan, cache: Path, deps: BenchDeps,
                    report: dict[str, Any]) -> dict[str, Any]:
    """Seed kernels in ``fidelity_runs`` separate evaluators each, then the do_bench process.

    Evaluators are set up a group of whole runs at a time (``setup_concurrency``), used one
    after another (nothing else runs on the GPU meanwhile), and closed before the next group, so
    GPU memory holds at most one group (a softmax worker alone holds ~13 GiB of inputs and
    float64 truths). Seed kernels not yet in the cache build while the first group sets up.
    """
    problems = [deps.load_problem(p) for p in plan.fidelity_problems]
    missing = [p.name for p in problems if not p.seed_source]
    if missing:
        raise ConfigError(f"fidelity: no seed kernel for {', '.join(missing)}")
    seeds = {p.name: Candidate(source=p.seed_source, idea="bench: seed kernel") for p in problems}
    cfg = _eval_config(plan, cache)
    prebuilt: list[Any] = []
    prebuild_error: list[str] = []

    def prebuild() -> None:
        try:
            prebuilt.extend(deps.prebuild(list(seeds.values()), cfg))
        except Exception as e:  # noqa: BLE001 - the evaluators then build what is missing
            logger.error("fidelity: prebuilding the seed kernels failed: {}", e)
            prebuild_error.append(f"{type(e).__name__}: {e}")

    t0 = deps.now()
    builder = threading.Thread(target=prebuild, name="bench-prebuild", daemon=True)
    builder.start()        # the seeds build on the CPU while the first group sets up
    runs: dict[str, list[dict[str, Any]]] = {p.name: [] for p in problems}
    setup_s, prep_s = 0.0, None
    for group in fidelity_groups(plan.fidelity_runs, len(problems), plan.setup_concurrency):
        evs, s = _open_evaluators([(problems[p], cfg) for _, p in group], deps,
                                  plan.setup_concurrency)
        setup_s += s
        if prep_s is None:
            builder.join()
            prep_s = deps.now() - t0
        try:
            for (run, p), ev in zip(group, evs):
                name = problems[p].name
                if isinstance(ev, BaseException):
                    runs[name].append({"run": run + 1, "verdict": None, "reason": None,
                                       "error": f"evaluator failed to start: {ev}"})
                    continue
                report.setdefault("device", dict(getattr(ev, "info", {}) or {}))
                try:
                    r = ev.evaluate([seeds[name]])[0]
                except Exception as e:  # noqa: BLE001 - e.g. a worker that cannot respawn
                    logger.exception("fidelity run {}: {} evaluate() raised", run + 1, name)
                    runs[name].append({"run": run + 1, "verdict": None, "reason": None,
                                       "error": f"evaluate() raised {type(e).__name__}: {e}"})
                    continue
                runs[name].append({"run": run + 1, "verdict": r.verdict.value,
                                   "reason": r.reason.value, "reference_ms": r.reference_ms,
                                   "candidate_ms": r.candidate_ms, "speedup": r.speedup,
                                   "trials": _trials(r.detail), "eval_s": r.eval_s})
                logger.info("fidelity run {}: {} {} speedup {:.4f}", run + 1, name,
                            r.reason.value, r.speedup)
        finally:
            _close_all(evs)
    builder.join()
    head = {"runs": plan.fidelity_runs, "setup_s": setup_s, "prepare_s": prep_s,
            "prebuild": [{"problem": p.name, "ok": getattr(b, "ok", None),
                          "build_s": getattr(b, "build_s", None),
                          "cache_hit": getattr(b, "cache_hit", None)}
                         for p, b in zip(problems, prebuilt)],
            "prebuild_error": prebuild_error[0] if prebuild_error else None,
            "do_bench_warmup_ms": plan.do_bench_warmup_ms, "do_bench_rep_ms": plan.do_bench_rep_ms,
            "do_bench_rounds": plan.do_bench_rounds, "skipped": []}
    partial = dict(head, problems=[fidelity_row(p.name, runs[p.name], None).to_dict()
                                   for p in problems])
    _write(Path(plan.results_dir), "fidelity", partial, fidelity_markdown(partial))
    spec = {"cache_dir": str(cache), "warmup_ms": plan.do_bench_warmup_ms,
            "rep_ms": plan.do_bench_rep_ms, "rounds": plan.do_bench_rounds,
            "problems": [{"name": p.name, "path": str(p.path), "source": p.source,
                          "seed_source": p.seed_source} for p in problems]}
    t1 = deps.now()
    db = deps.do_bench(spec)
    db_s = deps.now() - t1
    per = db.get("problems", {}) if isinstance(db, dict) else {}
    rows = [fidelity_row(p.name, runs[p.name],
                         per.get(p.name) or ({"error": db["error"]} if db.get("error") else None))
            for p in problems]
    return dict(head, do_bench_s=db_s, do_bench_versions=db.get("versions", {}),
                problems=[r.to_dict() for r in rows])


def _earlier_phases(results_dir: Path, variants: Sequence[Variant],
                    phases: Sequence[str]) -> dict[str, PhaseStats]:
    """Throughput phases measured by an earlier bench into the same results folder, on the same
    candidates, that this run does not measure again (so a bench split over two device calls
    still compares cold with sequential). {} when there is none or it does not match."""
    path = Path(results_dir) / "bench_throughput.json"
    if not variants or not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
        if [c["id"] for c in old.get("candidates", [])] != [v.candidate.id for v in variants]:
            return {}
        names = {f.name for f in dataclasses.fields(PhaseStats)}
        return {k: PhaseStats(**{f: v for f, v in d.items() if f in names})
                for k, d in old.get("phases", {}).items()
                if k in ("cold", "warm", "sequential") and k not in phases}
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("{}: unreadable ({}); earlier phases not carried over", path, e)
        return {}


def _load_report(results_dir: Path, name: str) -> dict[str, Any] | None:
    """bench_<name>.json from an earlier run in ``results_dir``, or None."""
    try:
        return json.loads((Path(results_dir) / f"bench_{name}.json").read_text())
    except (OSError, ValueError):
        return None


def _write(results_dir: Path, name: str, data: Mapping[str, Any], markdown: str) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    tmp = results_dir / f"bench_{name}.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, results_dir / f"bench_{name}.json")
    (results_dir / f"bench_{name}.md").write_text(markdown)


def run_bench(plan: BenchPlan, deps: BenchDeps) -> dict[str, Any]:
    """Run the plan's phases in order (cold, warm, fidelity, sequential, faults), adapting the
    later ones to the budget, and write bench_*.json/.md under plan.results_dir after each.

    Budget: estimates (CostModel) are scaled by how much slower than estimated the cold phase
    was (``slowdown``, 0.5-3). warm, fidelity and faults are skipped when what is left is below
    their estimate (x0.8 for fidelity and faults); the sequential phase measures candidates one
    by one while the next one (its measured cost so far) still fits before the time reserved
    for faults, at least one when ~80% of one candidate's estimate is left.
    Returns: {"throughput", "fidelity", "faults": report dicts (None when none of a benchmark's
        phases ran), "estimate": seconds per phase, "elapsed_s", "table": the summary table}.
    Raises: ConfigError for a work folder it may not delete or a problem without a seed kernel;
        ProblemError for an unknown problem. Candidates never raise (they get a verdict).
    """
    clock = _Clock(deps.now, plan.budget_s)
    cost = deps.cost
    est = estimate_wall_s(plan, cost, cores=deps.cores)
    results_dir = Path(plan.results_dir)
    cold_dir = Path(plan.work_dir) / "cold"
    out: dict[str, Any] = {"throughput": None, "fidelity": None, "faults": None,
                           "estimate": est}
    variants: list[Variant] = []
    if any(p in plan.phases for p in ("cold", "warm", "sequential")):
        sources = {}
        for name, _ in plan.throughput:
            seed = deps.load_problem(name).seed_source
            if not seed:
                raise ConfigError(f"throughput: problem {name} has no seed kernel to vary")
            sources[name] = seed
        variants = throughput_variants(plan.throughput, sources)
    tp: dict[str, Any] = {
        "plan": plan.to_dict(), "estimate_s": est, "cores": deps.cores,
        "build_workers": engine_build_workers(plan, deps.cores),
        "candidates": [{"problem": v.problem, "id": v.candidate.id, "label": v.label,
                        "assignment": dict(v.assignment)} for v in variants],
        "phases": {}, "targets": [], "skipped": []}
    stats: dict[str, PhaseStats] = {}
    slowdown = 1.0
    for name, prev in _earlier_phases(results_dir, variants, plan.phases).items():
        stats[name] = prev
        tp["skipped"].append(f"{name}: not measured in this run; taken from the earlier "
                             f"bench_throughput.json in {results_dir} (same candidates)")

    def save_throughput() -> None:
        tp["phases"] = {k: s.to_dict() for k, s in stats.items()}
        tp["targets"] = [t.to_dict() for t in throughput_targets(stats)]
        tp["elapsed_s"] = clock.elapsed()
        _write(results_dir, "throughput", tp, throughput_markdown(tp))
        out["throughput"] = tp

    def skip_note(phase: str, need_s: float) -> str:
        msg = (f"{phase}: skipped, ~{need_s:.0f} s needed and {clock.left():.0f} s of the "
               f"{plan.budget_s:.0f} s budget left; run it alone with --phases {phase}")
        logger.warning(msg)
        return msg

    if "cold" in plan.phases:
        deps.prepare_cache(fresh_dir(cold_dir))
        stats["cold"] = _throughput_phase("cold", plan, variants, cold_dir, deps, tp)
        slowdown = min(3.0, max(0.5, clock.elapsed() / max(1.0, est["start"] + est["cold"])))
        save_throughput()
    else:
        _cache_dir(cold_dir)
    if "warm" in plan.phases:
        if clock.left() >= est["warm"] * slowdown:
            stats["warm"] = _throughput_phase("warm", plan, variants, cold_dir, deps, tp)
        else:
            tp["skipped"].append(skip_note("warm", est["warm"] * slowdown))
        save_throughput()
    if "fidelity" in plan.phases:
        need = est["fidelity"] * slowdown
        if clock.left() >= 0.8 * need:
            deps.prepare_cache(cold_dir)
            fid = _fidelity_phase(plan, cold_dir, deps, tp)
            fid["skipped"] = []
        else:
            fid = {"runs": plan.fidelity_runs, "problems": [],
                   "skipped": [skip_note("fidelity", need)]}
        _write(results_dir, "fidelity", fid, fidelity_markdown(fid))
        out["fidelity"] = fid
    if "sequential" in plan.phases:
        reserve = est.get("faults", 0.0) * slowdown
        per = (cost.build_latency_s(1, deps.cores) + cost.eval_s) * slowdown
        n_fit = int(max(0.0, clock.left() - reserve - cost.setup_s) // max(1.0, per))
        n = min(plan.sequential_n, max(1, n_fit))
        if clock.left() >= 0.8 * (per + cost.setup_s):
            seq_dir = fresh_dir(Path(plan.work_dir) / "sequential")
            deps.prepare_cache(seq_dir)
            logger.info("sequential: up to {} candidates ({:.0f} s left, {:.0f} s reserved "
                        "for later phases)", n, clock.left(), reserve)
            stats["sequential"] = _sequential_phase(plan, variants, n, seq_dir, clock,
                                                    reserve, deps, tp)
        else:
            tp["skipped"].append(skip_note("sequential", per + cost.setup_s))
        save_throughput()
    faults: dict[str, Any] = {"test": FAULTS_TEST, "ran": False,
                              "evidence": "results/h200-2026-11-30/gpu_faults.txt"}
    earlier_faults = _load_report(results_dir, "faults")
    if "faults" not in plan.phases and earlier_faults and earlier_faults.get("ran"):
        faults = earlier_faults                     # keep an earlier call's run of the test
    if "faults" in plan.phases:
        if clock.left() >= 0.8 * est["faults"]:
            t0 = deps.now()
            log = results_dir / "bench_faults.txt"
            results_dir.mkdir(parents=True, exist_ok=True)
            got = deps.run_faults(log)
            faults.update(ran=True, returncode=got.get("returncode"),
                          passed=got.get("returncode") == 0, tail=got.get("tail", ""),
                          wall_s=deps.now() - t0, log=str(log))
        else:
            faults["skipped"] = skip_note("faults", est["faults"])
    _write(results_dir, "faults", faults, faults_markdown(faults))
    out["faults"] = faults
    out["elapsed_s"] = clock.elapsed()
    # A bench split over calls into one results folder: the table shows every benchmark there.
    out["table"] = summary_table(out["throughput"] or _load_report(results_dir, "throughput"),
                                 out["fidelity"] or _load_report(results_dir, "fidelity"),
                                 out["faults"])
    (results_dir / "bench_summary.md").write_text(
        f"# evokernel bench\n\nelapsed {out['elapsed_s']:.0f} s of a {plan.budget_s:.0f} s "
        f"budget (estimate {est['total']:.0f} s)\n\n{out['table']}\n")
    return out


# ---------------------------------------------------------------------------------------------
# The GPU machine's dependencies
# ---------------------------------------------------------------------------------------------

def _ensure_peaks(cache_dir: Path, *sources: Path) -> None:
    """Give ``cache_dir`` this device's measured peaks: copied from ``sources`` (or the default
    cache), else measured here once, so evaluators set up at once never measure them
    concurrently (which would read low)."""
    import torch

    from evokernel import floor
    from evokernel.config import default_cache_dir
    name = torch.cuda.get_device_name(0)
    dst = floor.peaks_path(cache_dir, name, torch.__version__)
    if dst.exists():
        return
    for src_dir in (*sources, default_cache_dir()):
        src = floor.peaks_path(src_dir, name, torch.__version__)
        if src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            return
    floor.measure_peaks(torch.device("cuda", 0), cache_dir)


def cuda_deps(plan: BenchPlan) -> BenchDeps:
    """BenchDeps for this machine's GPUs (CudaEvaluator, Builder, a do_bench subprocess).
    Raises: NoGPUError when no CUDA GPU is visible."""
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_MESSAGE)
    from evokernel.build import Builder, device_arch
    from evokernel.evaluator import CudaEvaluator
    results_dir = Path(plan.results_dir)
    cold = Path(plan.work_dir) / "cold"

    def make_evaluator(problem: Any, config: EvalConfig) -> Any:
        return CudaEvaluator(problem, config, log_dir=Path(config.cache_path) / "logs")

    def prebuild(cands: Sequence[Candidate], config: EvalConfig) -> list[Any]:
        with Builder(config.cache_path, arch=device_arch(), timeout_s=config.build_timeout_s,
                     workers=config.build_workers) as b:
            return b.build_many(cands)

    def do_bench(spec: dict[str, Any]) -> dict[str, Any]:
        return run_do_bench_process(dict(spec, arch=device_arch()), results_dir)

    def run_faults(log: Path) -> dict[str, Any]:
        if not Path(FAULTS_TEST).is_file():
            return {"returncode": None, "tail": f"{FAULTS_TEST} not found from {os.getcwd()}"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", FAULTS_TEST,
                               "-p", "no:cacheprovider"], capture_output=True, text=True,
                              timeout=600)
        text = proc.stdout + proc.stderr
        log.write_text(text)
        return {"returncode": proc.returncode, "tail": text[-1500:]}

    return BenchDeps(make_evaluator=make_evaluator, prebuild=prebuild, do_bench=do_bench,
                     prepare_cache=lambda d: _ensure_peaks(d, cold), run_faults=run_faults)


def run_do_bench_process(spec: dict[str, Any], results_dir: Path,
                         timeout_s: float = 300.0) -> dict[str, Any]:
    """Run :func:`do_bench_main` in a fresh Python process (environment without credentials:
    it runs the kernels' module code). Returns its JSON, or {"error": ...}."""
    from evokernel.build import worker_env
    results_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = results_dir / "do_bench_spec.json", results_dir / "do_bench_out.json"
    log_path = results_dir / "do_bench.log"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    env = dict(worker_env(), PYTHONUNBUFFERED="1")
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.run([sys.executable, "-m", "evokernel.bench", "_do_bench",
                                   str(spec_path), str(out_path)], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the do_bench process ran past {timeout_s:.0f} s (log: {log_path})"}
    finally:
        spec_path.unlink(missing_ok=True)
    if not out_path.is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        return {"error": f"the do_bench process exited with {proc.returncode} and no result:\n"
                         f"{tail}"}
    return json.loads(out_path.read_text())


def measure_do_bench(problem: Mapping[str, str], *, cache_dir: Path, arch: str, device: Any,
                     bench: Callable[..., float], warmup_ms: float, rep_ms: float, rounds: int,
                     timing: TimingConfig = TimingConfig(), flush: Any = None) -> dict[str, Any]:
    """One problem in the do_bench process: load the reference and the seed kernel's module
    (load_candidate: from the warm cache), build both models as the GPU worker does (seed 0,
    the reference's weights), draw the worker's timing inputs (problem distribution, seeds
    1000-1002) and, under strict FP32 and no_grad, time them

    * with ``bench`` (triton.testing.do_bench): ``rounds`` rounds of reference then candidate on
      set 0, each call ``bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")``; the
      median over rounds is kept;
    * with evokernel.timing.time_interleaved (the worker's method, rotating the 3 sets).

    problem: {"name", "path", "source", "seed_source"}. device: a torch device (CPU works for
    tests, with a host clock and no flush). Returns: {"reference_ms", "candidate_ms", "speedup",
    "reference_rounds_ms", "candidate_rounds_ms", "inproc_reference_ms", "inproc_candidate_ms",
    "inproc_speedup", "inproc_trials"} in milliseconds.
    Raises: whatever the modules or the timers raise.
    """
    import torch

    from evokernel.build import load_candidate
    from evokernel.distributions import draw_inputs
    from evokernel.gate import align_parameters, strict_fp32
    from evokernel.problem import exec_module
    from evokernel.timing import time_interleaved
    name = problem["name"]
    mod = exec_module(problem["source"], f"bench_problem_{name}", problem["path"])
    cand_mod = load_candidate(problem["seed_source"], f"bench_seed_{name}", Path(cache_dir), arch)
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    torch.manual_seed(0)
    ref = mod.Model(*init).to(device)
    torch.manual_seed(0)
    new = cand_mod.ModelNew(*init).to(device)
    align_parameters(ref, new)
    sets = [[x.to(device) if isinstance(x, torch.Tensor) else x
             for x in draw_inputs(mod, "problem", 1000 + i)] for i in range(3)]
    per: dict[str, list[float]] = {"reference": [], "candidate": []}
    with strict_fp32(), torch.no_grad():
        for _ in range(rounds):
            per["reference"].append(float(bench(lambda: ref(*sets[0]), warmup=warmup_ms,
                                                rep=rep_ms, return_mode="median")))
            per["candidate"].append(float(bench(lambda: new(*sets[0]), warmup=warmup_ms,
                                                rep=rep_ms, return_mode="median")))
        stats = time_interleaved({"reference": lambda i: ref(*sets[i % 3]),
                                  "candidate": lambda i: new(*sets[i % 3])},
                                 timing, device=device, flush=flush)
    ref_ms, cand_ms = statistics.median(per["reference"]), statistics.median(per["candidate"])
    ek_ref, ek_cand = stats["reference"].median_ms, stats["candidate"].median_ms
    return {"reference_ms": ref_ms, "candidate_ms": cand_ms, "speedup": ref_ms / cand_ms,
            "reference_rounds_ms": per["reference"], "candidate_rounds_ms": per["candidate"],
            "inproc_reference_ms": ek_ref, "inproc_candidate_ms": ek_cand,
            "inproc_speedup": ek_ref / ek_cand, "inproc_trials": stats["candidate"].trials}


def do_bench_main(spec_path: str, out_path: str) -> int:
    """The do_bench process (``python -m evokernel.bench _do_bench SPEC OUT``): runs
    :func:`measure_do_bench` on GPU 0 for each problem of the spec ({"cache_dir", "arch",
    "warmup_ms", "rep_ms", "rounds", "problems": [...]}) and writes {"versions": {...},
    "problems": {name: {...} or {"error": ...}}} (or {"error": ...} without triton) to OUT.
    Returns 0 whenever OUT was written."""
    import traceback

    import torch

    from evokernel.build import device_arch
    from evokernel.timing import L2Flusher
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"versions": {"torch": torch.__version__}, "problems": {}}
    try:
        import triton
        from triton.testing import do_bench
        out["versions"]["triton"] = triton.__version__
    except ImportError as e:
        out["error"] = f"triton is not importable here: {e}"
        Path(out_path).write_text(json.dumps(out))
        return 0
    try:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        flusher = L2Flusher(device)
    except Exception as e:  # noqa: BLE001 - no usable GPU here: say so in the result
        out["error"] = f"no usable CUDA device in the do_bench process: {type(e).__name__}: {e}"
        Path(out_path).write_text(json.dumps(out))
        return 0
    for p in spec["problems"]:
        try:
            got = measure_do_bench(p, cache_dir=Path(spec["cache_dir"]),
                                   arch=spec.get("arch") or device_arch(), device=device,
                                   bench=do_bench, warmup_ms=spec["warmup_ms"],
                                   rep_ms=spec["rep_ms"], rounds=int(spec["rounds"]),
                                   flush=flusher)
            out["problems"][p["name"]] = got
            print(f"{p['name']}: do_bench {got['reference_ms']:.4f} / {got['candidate_ms']:.4f} "
                  f"ms, evokernel's timing {got['inproc_reference_ms']:.4f} / "
                  f"{got['inproc_candidate_ms']:.4f} ms", flush=True)
        except Exception as e:  # noqa: BLE001 - one problem's failure is its row's error
            traceback.print_exc()
            out["problems"][p["name"]] = {"error": f"{type(e).__name__}: {e}"[:1000]}
        torch.cuda.empty_cache()
    Path(out_path).write_text(json.dumps(out, indent=1))
    return 0


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

NO_GPU_MESSAGE = (
    "evokernel bench: measuring the evaluation engine needs a CUDA GPU, and PyTorch sees none "
    "here.\n  It builds, gates and times kernels on the GPU (an H200 with 16 cores is what its "
    "time estimate assumes).\n  Without a GPU: `evokernel bench --dry-run` prints the plan and "
    "its time estimate;\n  `make test` runs the CPU tests (tests/test_bench.py covers the "
    "bench's logic with fakes).")


def _phases_arg(text: str) -> tuple[str, ...]:
    parts = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if "all" in parts:
        return PHASES
    bad = [p for p in parts if p not in PHASES]
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"unknown phase(s) {bad or [text]}; choose from "
                                         f"{', '.join(PHASES)} or all")
    return tuple(p for p in PHASES if p in parts)


def _throughput_arg(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, count = item.partition("=")
        try:
            n = int(count)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: expected PROBLEM=COUNT") from None
        if not name or n < 1:
            raise argparse.ArgumentTypeError(f"{item!r}: expected PROBLEM=COUNT with COUNT >= 1")
        out.append((name, n))
    if not out:
        raise argparse.ArgumentTypeError("expected PROBLEM=COUNT[,PROBLEM=COUNT...]")
    return tuple(out)


def _names_arg(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected PROBLEM[,PROBLEM...]")
    return names


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `evokernel bench` (also of `python -m evokernel.bench`)."""
    p.add_argument("--phases", type=_phases_arg, default=DEFAULT_PHASES,
                   help="comma-separated: cold, warm, fidelity, sequential, faults, or all; "
                        "they run in that order (default: cold,warm,fidelity,sequential; "
                        "faults is tests/test_gpu_faults.py)")
    p.add_argument("--throughput", type=_throughput_arg, default=DEFAULT_THROUGHPUT,
                   metavar="P=N,...", help="tune variants per problem for the throughput phases "
                   "(default: layernorm=16,conv2d_relu_maxpool=8,matmul=8: 32 candidates)")
    p.add_argument("--sequential-n", type=_positive_int, default=8,
                   help="most candidates the sequential baseline measures; the budget may cut "
                        "it (default 8)")
    p.add_argument("--fidelity-problems", type=_names_arg, default=HEADLINE, metavar="P,...",
                   help="seed kernels re-measured (default: the five headline problems)")
    p.add_argument("--fidelity-runs", type=_positive_int, default=5,
                   help="separate evaluators per seed kernel (default 5)")
    p.add_argument("--budget-s", type=float, default=530.0,
                   help="wall seconds the bench may take; later phases adapt (default 530, for "
                        "a 10-minute device call with set-up and packing around it)")
    p.add_argument("--results-dir", default=None,
                   help="where bench_*.json/.md go (default results/bench-<date>)")
    p.add_argument("--work-dir", default=None,
                   help="build caches the bench empties and fills (default "
                        "$TMPDIR/evokernel-bench)")
    p.add_argument("--build-workers", type=_positive_int, default=None,
                   help="engine builds at once (default: the engine's, cores // 2)")
    p.add_argument("--compile-baseline", action="store_true",
                   help="also time torch.compile in every evaluator set-up")
    p.add_argument("--do-bench-rep-ms", type=float, default=100.0,
                   help="triton do_bench rep budget per call (default 100, its own default)")
    p.add_argument("--do-bench-rounds", type=_positive_int, default=3,
                   help="interleaved do_bench rounds per kernel (default 3)")
    p.add_argument("--setup-concurrency", type=_positive_int, default=10,
                   help="evaluators set up and alive at once (default 10: two fidelity runs "
                        "of five problems; a softmax worker holds ~13 GiB of GPU memory)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and its time estimate, run nothing (no GPU needed)")
    p.add_argument("--cores", type=_positive_int, default=None,
                   help="CPU cores --dry-run's estimate assumes (default: this machine's; the "
                        "H200 host has 16)")


def plan_from_args(args: argparse.Namespace) -> BenchPlan:
    """A BenchPlan from parsed arguments. Raises: ConfigError for an invalid combination."""
    import datetime
    import tempfile
    results = Path(args.results_dir or f"results/bench-{datetime.date.today().isoformat()}")
    work = Path(args.work_dir or Path(tempfile.gettempdir()) / "evokernel-bench")
    try:
        return BenchPlan(results_dir=results, work_dir=work, phases=tuple(args.phases),
                         throughput=tuple(args.throughput), sequential_n=args.sequential_n,
                         fidelity_problems=tuple(args.fidelity_problems),
                         fidelity_runs=args.fidelity_runs, budget_s=args.budget_s,
                         build_workers=args.build_workers,
                         compile_baseline=args.compile_baseline,
                         do_bench_rep_ms=args.do_bench_rep_ms,
                         do_bench_rounds=args.do_bench_rounds,
                         setup_concurrency=args.setup_concurrency)
    except ValueError as e:
        raise ConfigError(f"bench: {e}") from e


def describe_plan(plan: BenchPlan, *, cores: int | None = None,
                  cost: CostModel = CostModel()) -> str:
    """The lines printed before a run: what runs, and the estimated wall time per phase."""
    cores = cores or os.cpu_count() or 1
    n_seq = sequential_fit(plan, cost, cores=cores)
    est = estimate_wall_s(plan, cost, cores=cores, sequential_n=n_seq)
    tp = ", ".join(f"{p}={n}" for p, n in plan.throughput)
    what = (f"{plan.candidates} candidates ({tp})"
            if any(p in plan.phases for p in ("cold", "warm", "sequential")) else
            f"seed kernels of {', '.join(plan.fidelity_problems)}")
    lines = [f"evokernel bench: phases {','.join(plan.phases)}; {what}; results in "
             f"{plan.results_dir}, caches in {plan.work_dir}",
             f"  estimate on {cores} cores with {engine_build_workers(plan, cores)} build "
             f"workers (H200 costs of 2026-11-30): "
             + ", ".join(f"{k} ~{v:.0f} s" for k, v in est.items() if k != "total")
             + f"; total ~{est['total']:.0f} s of a {plan.budget_s:.0f} s budget"]
    if "sequential" in plan.phases:
        lines.append(f"  sequential baseline: ~{n_seq} of {plan.candidates} candidates fit "
                     f"(asked up to {plan.sequential_n}); its rate is scaled to the set"
                     + ("" if n_seq else "; it runs only if the earlier phases finish early "
                        "(else run --phases cold,warm,sequential and --phases fidelity in two "
                        "calls)"))
    if est["total"] > plan.budget_s:
        lines.append(f"  over budget by ~{est['total'] - plan.budget_s:.0f} s: later phases "
                     "will be cut or skipped; select fewer with --phases")
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    """`evokernel bench`: run the engine benchmarks, print the summary table last.

    Returns 0 when every benchmark that ran met its targets, 1 otherwise (measurements are
    written either way), 0 for --dry-run.
    Raises: NoGPUError without a CUDA GPU (not for --dry-run); ConfigError for bad flags (e.g.
        more variants than a seed kernel has) or a work folder it may not delete; ProblemError
        for an unknown problem. Flags are checked before the GPU.
    """
    plan = plan_from_args(args)
    if any(p in plan.phases for p in ("cold", "warm", "sequential")):
        try:                                     # problems and variants, checked on the CPU
            throughput_variants(plan.throughput)
        except ValueError as e:
            raise ConfigError(f"bench: --throughput: {e}") from e
    if args.dry_run:
        print(describe_plan(plan, cores=args.cores))
        return 0
    deps = cuda_deps(plan)                        # NoGPUError here, before touching anything
    print(describe_plan(plan, cores=deps.cores), flush=True)
    previous = _exit_on_sigterm()
    try:
        out = run_bench(plan, deps)
    finally:
        _restore_sigterm(previous)
    print(f"\nevokernel bench: {out['elapsed_s']:.0f} s; results in {plan.results_dir}\n")
    print(out["table"], flush=True)
    verdicts = [t["passed"] for t in (out["throughput"] or {}).get("targets", [])]
    for r in (out["fidelity"] or {}).get("problems", []):
        verdicts += [r["spread_ok"], r["agreement_ok"]]
    if out["faults"] and out["faults"].get("ran"):
        verdicts.append(out["faults"].get("passed"))
    return 0 if all(v is not False for v in verdicts) else 1


def _exit_on_sigterm() -> Any:
    """Turn SIGTERM (``timeout``'s signal) into SystemExit, so ``finally`` blocks close the GPU
    workers and the results written so far stay. Returns the previous handler (None when not
    on the main thread, where handlers cannot be set)."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, stop)


def _restore_sigterm(previous: Any) -> None:
    import signal
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evokernel.bench",
                                description="Measure the evaluation engine: throughput (cold, "
                                            "warm, sequential), fidelity, faults.")
    add_bench_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_do_bench"]:                   # the separate do_bench process
        return do_bench_main(argv[1], argv[2])
    args = build_parser().parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level="INFO",
               format="<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}")
    try:
        return cmd_bench(args)
    except NoGPUError as e:
        print(str(e), file=sys.stderr)
        return 2
    except EvokernelError as e:
        print(f"evokernel: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
