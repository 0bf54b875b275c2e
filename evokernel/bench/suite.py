"""The suite phase (issue 16): a problem set checked three ways, each from an empty build cache,
in the same run, and kernels per minute of each:

* ``one_at_a_time``: the way issue 16 measured a problem set at e2b7746: every kernel built up
  front in parallel (``SuiteDeps.prebuild``), then one evaluator per problem after another
  (fresh GPU workers, fp64 truths, its kernels; its builds found in the cache);
* ``together``: evokernel.engine.problem_set: every kernel built up front, the GPUs take
  problems from one queue, the next problem's worker started while the current one is timed;
* ``together_warm``: the same, the next worker also making its CUDA context and loading the
  profiler ahead (``warm_ahead``): faster if those one-time costs are much of a set-up, and
  harmless only if the verdicts agree with the other modes' (the report lists what differs).

    python -m evokernel.bench --phases suite [--suite-problems PATH,...] [--suite-kernels DIR]
        [--suite-variants N]

Kernels per minute = 60 x kernels / wall seconds from the first build to the last verdict, set-up
included (a suite pays it once per problem). Target: together >= TARGET_SUITE_PER_MIN on one
H200. Both modes must give each kernel the same verdict (a timing-dependent one, e.g.
impossible_speed, may differ between two measurements; the report lists what differs).
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from loguru import logger

from evokernel.bench.plan import tune_variants
from evokernel.config import EvalConfig
from evokernel.engine.problem_jobs import ProblemJob
from evokernel.errors import ConfigError
from evokernel.records import Candidate, EvalResult

#: issue 16: ">= 10 kernels/min cold on one H200 for a 24-problem set".
TARGET_SUITE_PER_MIN = 10.0
MODES = ("one_at_a_time", "together", "together_warm")


@dataclasses.dataclass
class SuiteDeps:
    """What the phase needs from the machine (tests pass fakes).

    make_evaluator(problem, config): an Evaluator for ``one_at_a_time``;
    evaluate_set(jobs, config, warm_ahead=bool): ProblemOutcomes (evaluate_problem_set);
    prepare_cache(path) -> path: an empty, usable build cache (device peaks copied in);
    now(): a monotonic clock in seconds;
    prebuild(candidates, config): build them all into ``config``'s cache, in parallel, as the
        evaluators would (None: each evaluator builds its own, one problem after another).
    """

    make_evaluator: Callable[[Any, EvalConfig], Any]
    evaluate_set: Callable[[Sequence[ProblemJob], EvalConfig], Sequence[Any]]
    prepare_cache: Callable[[Path], Path]
    now: Callable[[], float]
    prebuild: Callable[[Sequence[Candidate], EvalConfig], Any] | None = None


def suite_jobs(specs: Sequence[str], kernels: str | None, variants: int) -> list[ProblemJob]:
    """The phase's problems and kernels: ``kernels`` (a folder of <problem>.py files or a JSON
    mapping, as `suite --kernels`), else ``variants`` tune variants of each seed kernel.
    Raises: ConfigError when no problem has a kernel, or a seed has fewer variants;
        ProblemError for a malformed problem."""
    from evokernel.problem_files import candidate_files, suite_problems
    problems = suite_problems(specs)
    jobs = []
    if kernels is not None:
        files = candidate_files(problems, kernels)
        for p in problems:
            f = files.get(p.name)
            if f is not None and f.is_file():
                jobs.append(ProblemJob(p, (Candidate(source=f.read_text(), idea=f"file {f}",
                                                     operator="check"),)))
            else:
                logger.warning("bench: suite: {} left out: {}", p.name,
                               f"no such kernel file {f}" if f is not None
                               else f"{kernels} names no kernel for it")
    else:
        for p in problems:
            if p.seed_source:
                try:
                    vs = tune_variants(p.name, p.seed_source, variants)
                except ValueError as e:
                    raise ConfigError(f"bench: --suite-variants: {e}") from e
                jobs.append(ProblemJob(p, tuple(v.candidate for v in vs)))
    if not jobs:
        raise ConfigError(f"bench: suite: no problem in {', '.join(specs)} has a kernel")
    return jobs


@dataclasses.dataclass
class ModeRun:
    """One mode's outcome: ``results`` by problem name ([] for a problem whose evaluator could
    not be made) and ``setups``: each problem's set-up steps in seconds, as its GPU worker
    timed them (``info["setup_steps_s"]``, evokernel.engine.session.SetupClock; {} when the
    worker did not say); ``loops``: each problem's seconds on its GPU by step, as the driver
    timed them ("start" or "start_ahead", "ahead", "build_wait", "verdicts", "close";
    evokernel.engine.problem_jobs.ProblemOutcome.steps_s); ``timelines``: when each problem's
    turn began, its last build ended and its last verdict came, in seconds since the set's
    builds were submitted (ProblemOutcome.timeline_s; the together modes only)."""

    results: dict[str, list[EvalResult]]
    setups: dict[str, dict[str, float]]
    loops: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    timelines: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    #: each problem's set-up's part made ahead (info["predrawn"], evokernel.engine.predraw:
    #: sets handed over and seconds spent; None: nothing made ahead)
    ahead: dict[str, Any] = dataclasses.field(default_factory=dict)


def _steps(info: Mapping[str, Any] | None) -> dict[str, float]:
    steps = (info or {}).get("setup_steps_s")
    return dict(steps) if isinstance(steps, Mapping) else {}


def one_at_a_time(jobs: Sequence[ProblemJob], config: EvalConfig, deps: SuiteDeps) -> ModeRun:
    """Every kernel built up front (``deps.prebuild``), then each problem with an evaluator of
    its own, one after another."""
    run = ModeRun({}, {})
    if deps.prebuild is not None:
        deps.prebuild([c for j in jobs for c in j.candidates], config)
    for job in jobs:
        t0 = deps.now()
        try:
            ev = deps.make_evaluator(job.problem, config)
        except Exception as e:  # noqa: BLE001 -- counted as no verdicts, named in the log
            logger.warning("suite one_at_a_time: {}: {}", job.problem.name, e)
            run.results[job.problem.name] = []
            continue
        run.setups[job.problem.name] = _steps(getattr(ev, "info", None))
        t1 = deps.now()
        try:
            run.results[job.problem.name] = list(ev.evaluate(list(job.candidates)))
        finally:
            t2 = deps.now()
            ev.close()
            run.loops[job.problem.name] = {"start": t1 - t0, "verdicts": t2 - t1,
                                           "close": deps.now() - t2}
    return run


def together(jobs: Sequence[ProblemJob], config: EvalConfig, deps: SuiteDeps,
             warm_ahead: bool = False) -> ModeRun:
    """The whole set at once (evokernel.engine.problem_set)."""
    outcomes = list(deps.evaluate_set(jobs, config, warm_ahead=warm_ahead))
    return ModeRun({o.problem: list(o.results) for o in outcomes},
                   {o.problem: _steps(o.info) for o in outcomes if not o.error},
                   {o.problem: dict(o.steps_s) for o in outcomes},
                   {o.problem: dict(o.timeline_s) for o in outcomes if o.timeline_s},
                   {o.problem: (o.info or {}).get("predrawn") for o in outcomes})


def timeline_summary(timelines: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """When the set's GPU work began and ended against its builds, in seconds since they were
    submitted: the first turn, the last build's end, the last verdict. The last verdict soon
    after the last build says the builds were the limit; long after, the GPU's loop was.
    Returns {} without timelines."""
    if not timelines:
        return {}
    return {"first_turn_s": round(min(t["turn"] for t in timelines.values()), 1),
            "last_built_s": round(max(t["built"] for t in timelines.values()), 1),
            "last_done_s": round(max(t["done"] for t in timelines.values()), 1)}


def together_warm(jobs: Sequence[ProblemJob], config: EvalConfig, deps: SuiteDeps) -> ModeRun:
    """``together`` with the next problem's worker warmed ahead."""
    return together(jobs, config, deps, warm_ahead=True)


def setup_summary(setups: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Each set-up step's median and largest seconds over the problems that reported it, and
    the median total, the largest steps first. Returns {} when no problem reported steps."""
    names = list(dict.fromkeys(k for steps in setups.values() for k in steps))
    if not names:
        return {}
    col = {n: [float(st[n]) for st in setups.values() if n in st] for n in names}
    # a set-up made ahead is already in the earlier problem's "ahead": counted once; a worker's
    # "load_wait" is waiting, not set-up work (and not a SetupClock step)
    totals = [sum(float(v) for k, v in st.items() if k not in ("start_ahead", "load_wait"))
              for st in setups.values() if st]
    steps = {n: {"median_s": round(statistics.median(v), 3), "max_s": round(max(v), 3)}
             for n, v in col.items()}
    return {"problems": len(totals), "median_total_s": round(statistics.median(totals), 2),
            "steps": dict(sorted(steps.items(), key=lambda kv: -kv[1]["median_s"]))}


def suite_phase(jobs: Sequence[ProblemJob], config: EvalConfig, work_dir: Path,
                deps: SuiteDeps, modes: Sequence[str] = MODES) -> dict[str, Any]:
    """The ``modes`` (MODES by default, run in MODES' order), each in its own empty cache under
    ``work_dir`` (suite-<mode>).
    Returns: the report: per mode its wall seconds, kernels, verdicts, kernels/min and set-up
    steps; the kernels whose verdicts differ from one_at_a_time's; the target and whether
    ``together`` met it (None when it did not run).
    Raises: ConfigError for an unknown mode."""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ConfigError(f"bench: suite modes {', '.join(unknown) or '(none)'}: choose from "
                          f"{', '.join(MODES)}")
    report: dict[str, Any] = {"problems": [j.problem.name for j in jobs],
                              "kernels": sum(len(j.candidates) for j in jobs), "modes": {}}
    verdicts: dict[str, dict[str, str]] = {}
    runs = {"one_at_a_time": one_at_a_time, "together": together, "together_warm": together_warm}
    for mode, run in ((m, runs[m]) for m in MODES if m in modes):
        cache = deps.prepare_cache(Path(work_dir) / f"suite-{mode}")
        cfg = dataclasses.replace(config, cache_dir=str(cache))
        t0 = deps.now()
        got = run(jobs, cfg, deps)
        wall = deps.now() - t0
        results = [r for rs in got.results.values() for r in rs]
        verdicts[mode] = {r.candidate_id: r.reason.value for r in results}
        report["modes"][mode] = {
            "wall_s": round(wall, 1), "kernels": len(results),
            "accepted": sum(r.accepted for r in results),
            "per_min": round(60.0 * len(results) / wall, 2) if wall > 0 else None,
            "setup": setup_summary(got.setups), "loop": setup_summary(got.loops),
            "timeline": timeline_summary(got.timelines),
            # each problem's own seconds, for reading the run's time line (JSON only)
            "per_problem": {p: {"timeline": got.timelines.get(p, {}), "loop": got.loops.get(p, {}),
                                "setup": got.setups.get(p, {}), "ahead": got.ahead.get(p)}
                            for p in got.results}}
        logger.info("suite {}: {} kernels in {:.1f} s", mode, len(results), wall)
    a = verdicts.get("one_at_a_time", {})
    report["differ"] = sorted(f"{k}: {a.get(k)} vs {m} {v.get(k)}"
                              for m in MODES[1:] if m in verdicts and "one_at_a_time" in verdicts
                              for v in (verdicts[m],)
                              for k in set(a) | set(v) if a.get(k) != v.get(k))
    rate = report["modes"].get("together", {}).get("per_min")
    report["target"] = {"name": "together kernels/min", "threshold": TARGET_SUITE_PER_MIN,
                        "value": rate, "passed": None if rate is None
                        else rate >= TARGET_SUITE_PER_MIN}
    base = report["modes"].get("one_at_a_time", {}).get("per_min")
    report["speedup"] = round(rate / base, 2) if rate and base else None
    return report


def suite_markdown(report: Mapping[str, Any]) -> str:
    """bench_suite.md: one row per mode, then the target and the verdicts that differ."""
    lines = ["# evokernel bench: suite", "",
             f"{len(report['problems'])} problems, {report['kernels']} kernels, each mode "
             "from an empty build cache, in the same run", "",
             "| mode | kernels | accepted | wall s | kernels/min |", "|---|---|---|---|---|"]
    for mode in MODES:
        m = report["modes"].get(mode)
        if m:
            lines.append(f"| {mode} | {m['kernels']} | {m['accepted']} | {m['wall_s']} | "
                         f"{m['per_min']} |")
    t = report["target"]
    lines += ["", f"target: {t['name']} >= {t['threshold']}: {t['value']} "
              f"({ {True: 'met', False: 'not met', None: 'not run'}[t['passed']]}); "
              "together / one at a time: "
              f"{'-' if report['speedup'] is None else str(report['speedup']) + 'x'}", ""]
    for mode in MODES:
        tl = report["modes"].get(mode, {}).get("timeline")
        if tl:
            lines += [f"{mode}, seconds after the builds were submitted: the first problem's turn "
                      f"{tl['first_turn_s']}, the last build done {tl['last_built_s']}, the last "
                      f"verdict {tl['last_done_s']}", ""]
    lines += _setup_lines(report)
    if report["differ"]:
        lines += ["verdicts that differ (one at a time vs the mode named):", ""]
        lines += [f"- {d}" for d in report["differ"]]
    return "\n".join(lines) + "\n"


def _setup_lines(report: Mapping[str, Any]) -> list[str]:
    """Where each mode's time per problem went: on its GPU, as the driver saw it (start,
    build wait, verdicts, close), then inside the set-up, as the worker timed it; median
    (largest) seconds per step over the problems."""
    return (_step_table(report, "loop", "one problem on its GPU, median (largest) seconds over "
                        "the problems, by step (evokernel.engine.problem_jobs.ProblemOutcome)")
            + _step_table(report, "setup", "set-up of one problem in its GPU worker, median "
                          "(largest) seconds over the problems, by step "
                          "(evokernel.engine.session.SetupClock; load_wait: its wait for the "
                          "worker to load, not in the total)"))


def _step_table(report: Mapping[str, Any], key: str, title: str) -> list[str]:
    sums = {m: report["modes"][m].get(key) or {} for m in MODES if m in report["modes"]}
    names = list(dict.fromkeys(n for s in sums.values() for n in s.get("steps", {})))
    if not names:
        return []
    shown = [m for m in sums if sums[m]]
    lines = [f"{title}:", "", "| step | " + " | ".join(shown) + " |",
             "|---|" + "---|" * len(shown)]
    for n in names:
        cells = [f"{s['steps'][n]['median_s']} ({s['steps'][n]['max_s']})"
                 if n in s.get("steps", {}) else "-" for s in (sums[m] for m in shown)]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("| total (median) | " + " | ".join(str(sums[m]["median_total_s"])
                                                   for m in shown) + " |")
    return lines + [""]
