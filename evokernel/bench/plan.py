"""The plan of ``evokernel bench``: its constants and targets, the tune variants of the seed
kernels it measures, and the wall-time estimate of each phase (:class:`CostModel`)."""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from evokernel.config import DEFAULT_HIDE_HOST_MS, TimingConfig
from evokernel.records import Candidate
from evokernel.operators.tunables import Tunable, find_tunables, set_tunables
from evokernel.build.host import default_build_workers, usable_cores

PHASES = ("cold", "warm", "nvrtc_cold", "nvrtc_warm", "fidelity", "sequential", "faults")
#: The phases that measure the throughput set (the tune variants of ``BenchPlan.throughput``).
THROUGHPUT_PHASES = ("cold", "warm", "nvrtc_cold", "nvrtc_warm", "sequential")
#: cold and warm on the NVRTC twins of the same tune variants (``problems/seeds/nvrtc``; the
#: NVRTC candidate form, evokernel.nvrtc), side by side with the load_inline form's.
NVRTC_PHASES = ("nvrtc_cold", "nvrtc_warm")
#: ``--phases forms``: both forms, cold and warm, in one call.
FORM_PHASES = ("cold", "warm", "nvrtc_cold", "nvrtc_warm")
DEFAULT_PHASES = ("cold", "warm", "fidelity", "sequential")
HEADLINE = ("softmax", "layernorm", "matmul", "conv2d", "conv2d_relu_maxpool")
#: 32 candidates (builds 12 at a time on 16 cores; 8 before session 20): layernorm has 120
#: distinct assignments, conv2d_relu_maxpool 25, matmul 8, softmax and conv2d only 5 each.
DEFAULT_THROUGHPUT = (("layernorm", 16), ("conv2d_relu_maxpool", 8), ("matmul", 8))
TARGET_COLD_PER_MIN = 10.0
TARGET_WARM_PER_MIN = 60.0
TARGET_COLD_OVER_SEQUENTIAL = 5.0
#: Issue 19: cold NVRTC candidates on one H200 (load_inline's cold rate then: 11.8/min).
TARGET_NVRTC_COLD_PER_MIN = 40.0
MAX_SPEEDUP_SPREAD = 0.02
MAX_DO_BENCH_DISAGREEMENT = 0.03
#: Per function and trial, besides the function itself: L2 flush (120 MB on an H200, ~0.03 ms),
#: two device synchronizes and two event records. Used only by the gate/time estimate.
TRIAL_OVERHEAD_MS = 0.1
FAULTS_TEST = "tests/engine/test_gpu_faults.py"
#: Its latest passing H200 run, run among all gpu-marked tests by scripts/gpu_check.sh.
FAULTS_EVIDENCE = "results/h200-2026-11-30-s2/gpu_tests.txt"


# -- tune variants of the seed kernels --------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """One benchmark candidate: a seed kernel with its marked constants set to ``assignment``
    (only the constants that differ from the seed; {} is the seed itself), in candidate
    ``form`` ("load_inline" or "nvrtc": which seed kernel it varies)."""

    problem: str
    assignment: tuple[tuple[str, str], ...]
    candidate: Candidate
    form: str = "load_inline"

    @property
    def label(self) -> str:
        return _assignment_text(self.assignment) or "seed"


def _assignment_text(items: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in items)


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


def tune_variants(problem: str, source: str, n: int, form: str = "load_inline") -> list[Variant]:
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
        idea = f"bench: tune {_assignment_text(items)}" if items else "bench: seed kernel"
        out.append(Variant(problem, items, Candidate(source=text, idea=idea,
                                                     operator="tune" if items else "seed"),
                           form))
    if len({v.candidate.id for v in out}) != len(out):      # set_tunables changes the text
        raise ValueError(f"{problem}: tune assignments gave duplicate sources")
    return out


def throughput_variants(spec: Sequence[tuple[str, int]],
                        sources: Mapping[str, str] | None = None,
                        form: str = "load_inline") -> list[Variant]:
    """Variants for ``spec`` ((problem, count) pairs), in that order, of candidate ``form``.

    sources: problem -> seed kernel text; default: each built-in problem's seed kernel of the
        form (``seeds/<name>.py``, ``seeds/nvrtc/<name>.py``).
    Raises: ProblemError for an unknown problem or one without a seed kernel; ValueError as
        :func:`tune_variants`, or when two problems' variants coincide.
    """
    out: list[Variant] = []
    for name, n in spec:
        src = sources[name] if sources is not None else seed_source(name, form)
        out += tune_variants(name, src, n, form)
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


def seed_source(name: str, form: str = "load_inline") -> str:
    """The seed kernel source of problem ``name`` in candidate ``form``. Raises ProblemError
    for an unknown problem or one without a seed kernel (of that form)."""
    from evokernel.build.forms import form_name
    from evokernel.problem import load_problem
    from evokernel.errors import ProblemError
    p = load_problem(name, form=form)
    if not p.seed_source or (form == "nvrtc" and form_name(p.seed_source) != "nvrtc"):
        where = f"seeds/nvrtc/{p.path.name}" if form == "nvrtc" else f"seeds/{p.path.name}"
        raise ProblemError(f"{p.path}: no {form} seed kernel ({where}) to make variants of")
    return p.seed_source


# -- the plan and its wall-time estimate ------------------------------------------------------

@dataclass(frozen=True)
class BenchPlan:
    """What ``evokernel bench`` runs.

    phases: a subset of PHASES, run in that order (cold before warm: warm uses its cache).
    throughput: (problem, number of variants) for cold, warm and sequential.
    sequential_n: the most candidates the sequential baseline measures (the budget may cut it).
    fidelity_problems, fidelity_runs: seed kernels re-measured, and in how many evaluators.
    budget_s: wall seconds the whole bench may take; later phases adapt to what is left.
    work_dir: build caches (``cold/``, ``sequential/``), deleted and refilled by the bench.
    build_workers: the engine's builds at once (None: its default, 3 per 4 cores).
    compile_baseline: also time torch.compile in every worker set-up (off: it costs set-up time
        and is not part of what is measured here).
    do_bench_warmup_ms, do_bench_rep_ms, do_bench_rounds: triton.testing.do_bench's warm-up and
        rep budgets per call, and how many interleaved rounds (reference, candidate, ...) per
        kernel; the median over rounds of each call's median is kept.
    setup_concurrency: evaluators set up (and alive) at once; fidelity sets up whole runs, at
        least one run per group.
    hide_host_ms: ``TimingConfig.hide_host_ms`` of every evaluator and of the do_bench
        process's evokernel timing (default ``DEFAULT_HIDE_HOST_MS``; 0: off).
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
    hide_host_ms: float = DEFAULT_HIDE_HOST_MS

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
        TimingConfig(hide_host_ms=self.hide_host_ms)   # its rule; ConfigError names it
        if self.setup_concurrency < 1:
            raise ValueError(f"setup_concurrency must be >= 1, got {self.setup_concurrency}")

    @property
    def candidates(self) -> int:
        return sum(n for _, n in self.throughput)

    @property
    def measures_nvrtc(self) -> bool:
        """Whether an NVRTC phase (NVRTC_PHASES) is selected."""
        return any(p in self.phases for p in NVRTC_PHASES)

    @property
    def measures_throughput(self) -> bool:
        """Whether a phase of THROUGHPUT_PHASES is selected (they need the tune variants)."""
        return any(p in self.phases for p in THROUGHPUT_PHASES)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["results_dir"], d["work_dir"] = str(self.results_dir), str(self.work_dir)
        return d


@dataclass(frozen=True)
class CostModel:
    """Today's H200 costs behind the estimate (results/h200-2026-11-30 and -s2, 16 cores).

    build_single_s: one build alone, <torch/extension.h> trimmed (EvalConfig.trim_headers):
        31.2 s (the bench's sequential layernorm seed, results/h200-2026-11-30-s2); with the
        header it was 54.5 s (run_softmax generation 0, results/h200-2026-11-30).
    build_cores: the cores one build keeps busy on average: MAX_JOBS=2, but main.cpp ends
        first, (12.4 + 35) / 35 ~ 1.35 (evokernel.build.host.default_build_workers).
    build_crowding: per-build latency = build_single_s x max(1, crowding x build_cores x
        workers / cores): 8 trimmed builds at once on 16 cores took 30-36 s
        (prebuild_trimmed.txt), i.e. no crowding at 8; 1.1 beyond the cores (a guess: 12 at
        once on 16 cores are not measured yet).
    eval_s: gate + time of one candidate (run stores: 0.3-3.9 s, mostly 0.4-1.5 s).
    setup_s, setup_cpu_s: one CudaEvaluator's set-up (worker start, fp64 truths, floor;
        9-16 s from the runs' logs) and the CPU seconds of it that k concurrent set-ups share
        over the cores (a guess; not measured yet).
    start_s: interpreter, imports and the first CUDA context.
    close_s: closing a group of evaluators at once (their workers exit).
    do_bench_start_s, do_bench_problem_s: the do_bench process (torch + triton import, CUDA) and
        each problem in it (cache-hit load, inputs, do_bench rounds, evokernel's timing).
    faults_s: tests/engine/test_gpu_faults.py (56 s with warm builds, ~190 s cold with the 30 s hang).
    nvrtc_build_s: one NVRTC candidate's build: the build worker's interpreter, its imports
        and the compile (a small kernel's compile alone: 33 ms on the H200,
        results/h200-2026-12-01-s5; a seed's whole build on the loaded 2-core development
        machine: results/cpu-2026-12-01-nvrtc-build); a guess for the H200 until the bench
        measures it.
    """

    build_single_s: float = 31.0
    build_cores: float = 1.35
    build_crowding: float = 1.1
    eval_s: float = 1.2
    setup_s: float = 12.0
    setup_cpu_s: float = 8.0
    start_s: float = 10.0
    close_s: float = 2.0
    do_bench_start_s: float = 15.0
    do_bench_problem_s: float = 5.0
    faults_s: float = 190.0
    nvrtc_build_s: float = 1.0

    def build_latency_s(self, workers: int, cores: int) -> float:
        return self.build_single_s * max(1.0, self.build_crowding * self.build_cores * workers
                                         / max(1, cores))

    def setup_group_s(self, k: int, cores: int) -> float:
        return 0.0 if k <= 0 else self.setup_s + self.setup_cpu_s * (k - 1) / max(1, cores)

    def sequential_s(self, cores: int) -> float:
        """One candidate of the sequential baseline: its build alone, then its gate and time."""
        return self.build_latency_s(1, cores) + self.eval_s


def machine_cores(cores: int | None = None) -> int:
    """``cores``, else the cores this process may use (evokernel.build.host.usable_cores)."""
    return cores or usable_cores()


def engine_build_workers(plan: BenchPlan, cores: int) -> int:
    """The build workers the engine will use: the plan's, else EvalConfig's default."""
    return plan.build_workers or default_build_workers(cores)


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
      sequential = one set-up per problem it touches + n x (one build alone + eval_s);
      nvrtc_cold = set-up + per problem one NVRTC build + n x eval_s (builds are no longer the
          bottleneck: the worker's gate and time are); nvrtc_warm = as warm.
    """
    cores = machine_cores(cores)
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
    if "nvrtc_cold" in plan.phases:
        est["nvrtc_cold"] = (cost.setup_group_s(len(plan.throughput), cores)
                             + sum(cost.nvrtc_build_s + n * cost.eval_s
                                   for _, n in plan.throughput))
    if "nvrtc_warm" in plan.phases:
        est["nvrtc_warm"] = est["warm"] if "warm" in est else (
            cost.setup_group_s(len(plan.throughput), cores) + plan.candidates * cost.eval_s)
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
                             + n * cost.sequential_s(cores))
    if "faults" in plan.phases:
        est["faults"] = cost.faults_s
    est["total"] = sum(est.values())
    return est


def sequential_fit(plan: BenchPlan, cost: CostModel = CostModel(), *,
                   cores: int | None = None) -> int:
    """How many sequential candidates fit in the budget after the other phases (at most
    plan.sequential_n and the throughput set's size; 0 if none fits or sequential is not
    selected)."""
    if "sequential" not in plan.phases:
        return 0
    cores = machine_cores(cores)
    others = estimate_wall_s(plan, cost, cores=cores, sequential_n=0)["total"]
    per = cost.sequential_s(cores)
    n = 0
    while n < min(plan.sequential_n, plan.candidates):     # it measures at most the whole set
        touched = min(n + 1, len(plan.throughput))
        if others + touched * cost.setup_s + (n + 1) * per > plan.budget_s:
            break
        n += 1
    return n


def fidelity_groups(runs: int, problems: int, concurrency: int) -> list[list[tuple[int, int]]]:
    """(run, problem) index pairs, run-major, in groups of whole runs with at most
    ``concurrency`` evaluators each (at least one run per group)."""
    per = max(1, concurrency // max(1, problems))
    pairs = [(r, p) for r in range(runs) for p in range(problems)]
    size = per * problems
    return [pairs[i:i + size] for i in range(0, len(pairs), size)]

