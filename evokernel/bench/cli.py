"""The command line: ``evokernel bench`` (:func:`add_bench_arguments`, :func:`cmd_bench`) and
``python -m evokernel.bench`` (:func:`main`)."""
from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from loguru import logger

from evokernel.bench.fidelity import do_bench_main
from evokernel.bench.plan import (DEFAULT_PHASES, DEFAULT_THROUGHPUT, FORM_PHASES, HEADLINE,
                                  PHASES, BenchPlan, CostModel, engine_build_workers,
                                  estimate_wall_s,
                                  machine_cores, seed_source, sequential_fit,
                                  throughput_variants)
from evokernel.bench.run import cuda_deps, run_bench, suite_deps
from evokernel.config import DEFAULT_HIDE_HOST_MS, MAX_HIDE_HOST_MS
from evokernel.errors import ConfigError, EvokernelError, NoGPUError


#: The multi-problem phase (evokernel.bench.suite), run after the others; not part of "all".
SUITE_PHASE = "suite"


def _split_commas(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _phases_arg(text: str) -> tuple[str, ...]:
    parts = tuple(dict.fromkeys(_split_commas(text)))
    suite = (SUITE_PHASE,) if SUITE_PHASE in parts else ()
    if "all" in parts:
        return PHASES + suite
    if "forms" in parts:                             # both candidate forms, cold and warm
        parts = tuple(p for p in parts if p != "forms") + FORM_PHASES
    bad = [p for p in parts if p not in PHASES + (SUITE_PHASE,)]
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"unknown phase(s) {bad or [text]}; choose from "
                                         f"{', '.join(PHASES + (SUITE_PHASE,))}, forms "
                                         f"({','.join(FORM_PHASES)}) or all")
    return tuple(p for p in PHASES if p in parts) + suite


def throughput_arg(text: str) -> tuple[tuple[str, int], ...]:
    """``--throughput``'s value, "layernorm=16,matmul=8", as ((problem, count), ...).
    Raises: argparse.ArgumentTypeError naming the item that is not PROBLEM=COUNT (COUNT >= 1)."""
    out = []
    for item in _split_commas(text):
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
    names = tuple(_split_commas(text))
    if not names:
        raise argparse.ArgumentTypeError("expected PROBLEM[,PROBLEM...]")
    return names


def _positive_int(text: str, least: int = 1) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {n}")
    return n


def _runs_arg(text: str) -> int:
    return _positive_int(text, least=2)                # a spread needs two runs


def _hide_host_arg(text: str) -> float:
    try:
        ms = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not 0 <= ms <= MAX_HIDE_HOST_MS:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_HIDE_HOST_MS:g}] ms, got {text}")
    return ms


def add_bench_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `evokernel bench` (also of `python -m evokernel.bench`)."""
    p.add_argument("--phases", type=_phases_arg, default=DEFAULT_PHASES,
                   help="comma-separated: cold, warm, nvrtc_cold, nvrtc_warm, fidelity, "
                        "sequential, faults, suite (a problem set, --suite-*; not in all), "
                        "forms (= cold,warm,nvrtc_cold,nvrtc_warm: both "
                        "candidate forms side by side) or all; they run in that order (default: "
                        "cold,warm,fidelity,sequential; nvrtc_*: the NVRTC twins of the same "
                        "variants, evokernel.nvrtc; faults is tests/engine/test_gpu_faults.py)")
    p.add_argument("--throughput", type=throughput_arg, default=DEFAULT_THROUGHPUT,
                   metavar="P=N,...", help="tune variants per problem for the throughput phases "
                   "(default: layernorm=16,conv2d_relu_maxpool=8,matmul=8: 32 candidates)")
    p.add_argument("--sequential-n", type=_positive_int, default=8,
                   help="most candidates the sequential baseline measures; the budget may cut "
                        "it (default 8)")
    p.add_argument("--fidelity-problems", type=_names_arg, default=HEADLINE, metavar="P,...",
                   help="seed kernels re-measured (default: the five headline problems)")
    p.add_argument("--fidelity-runs", type=_runs_arg, default=5,
                   help="separate evaluators per seed kernel, at least 2 (default 5)")
    p.add_argument("--budget-s", type=float, default=530.0,
                   help="wall seconds the bench may take; later phases adapt (default 530, for "
                        "a 10-minute device call with set-up and packing around it)")
    p.add_argument("--results-dir", default=None,
                   help="where bench_*.json/.md go (default results/bench-<date>)")
    p.add_argument("--work-dir", default=None,
                   help="build caches the bench empties and fills (default "
                        "$TMPDIR/evokernel-bench)")
    p.add_argument("--build-workers", type=_positive_int, default=None,
                   help="engine builds at once (default: the engine's, 3 per 4 cores)")
    p.add_argument("--compile-baseline", action="store_true",
                   help="also time torch.compile in every evaluator set-up")
    p.add_argument("--do-bench-rep-ms", type=float, default=100.0,
                   help="triton do_bench rep budget per call (default 100, its own default)")
    p.add_argument("--do-bench-rounds", type=_positive_int, default=3,
                   help="interleaved do_bench rounds per kernel (default 3)")
    p.add_argument("--setup-concurrency", type=_positive_int, default=10,
                   help="evaluators set up and alive at once (default 10: two fidelity runs "
                        "of five problems; a softmax worker holds ~13 GiB of GPU memory)")
    p.add_argument("--hide-host-ms", type=_hide_host_arg, default=DEFAULT_HIDE_HOST_MS,
                   help="timing.hide_host_ms, 0-2: hide up to this much host time per call "
                        "behind a GPU spin (0: off)")
    p.add_argument("--suite-problems", type=_names_arg, default=("problems",),
                   metavar="PATH,...", help="the suite phase's problems: folders (KernelBench "
                   "level layout), files or built-in names (default: the built-in problems)")
    p.add_argument("--suite-kernels", default=None, metavar="DIR|MAP.json",
                   help="the suite phase's kernels, as `suite --kernels` (default: "
                        "--suite-variants tune variants of each problem's seed kernel)")
    p.add_argument("--suite-modes", type=_suite_modes_arg, default=None, metavar="MODE,...",
                   help="the suite phase's modes, from one_at_a_time,together,together_warm "
                        "(default: all three; one_at_a_time and together are the comparison)")
    p.add_argument("--suite-variants", type=_positive_int, default=1,
                   help="without --suite-kernels, tune variants per seed kernel (default 1)")
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
                         setup_concurrency=args.setup_concurrency,
                         hide_host_ms=args.hide_host_ms)
    except ValueError as e:
        raise ConfigError(f"bench: {e}") from e


def describe_plan(plan: BenchPlan, *, cores: int | None = None,
                  cost: CostModel = CostModel()) -> str:
    """The lines printed before a run: what runs, and the estimated wall time per phase."""
    cores = machine_cores(cores)
    n_seq = sequential_fit(plan, cost, cores=cores)
    est = estimate_wall_s(plan, cost, cores=cores, sequential_n=n_seq)
    tp = ", ".join(f"{p}={n}" for p, n in plan.throughput)
    what = (f"{plan.candidates} candidates ({tp})"
            if plan.measures_throughput else
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
    suite_jobs = None
    if SUITE_PHASE in args.phases:                # checked on the CPU, before the GPU
        from evokernel.bench.suite import suite_jobs as jobs_of
        suite_jobs = jobs_of(_builtin_folder(args.suite_problems), args.suite_kernels,
                             args.suite_variants)
        args.phases = tuple(p for p in args.phases if p != SUITE_PHASE)
        if not args.phases:
            return _suite_only(args, suite_jobs)
    plan = plan_from_args(args)
    if plan.measures_throughput:
        try:                                     # problems and variants, checked on the CPU
            throughput_variants(plan.throughput)
            if plan.measures_nvrtc:
                throughput_variants(plan.throughput, form="nvrtc")
        except ValueError as e:
            raise ConfigError(f"bench: --throughput: {e}") from e
    if "fidelity" in plan.phases:                # before the throughput phases' builds
        if len(set(plan.fidelity_problems)) < len(plan.fidelity_problems):
            raise ConfigError(f"bench: --fidelity-problems lists a problem twice: "
                              f"{','.join(plan.fidelity_problems)}")
        for name in plan.fidelity_problems:      # ProblemError: unknown, or no seed kernel
            seed_source(name)
    if args.dry_run:
        print(describe_plan(plan, cores=args.cores))
        return 0 if suite_jobs is None else _suite_only(args, suite_jobs, plan)
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
    if suite_jobs is not None:
        verdicts.append(_suite_only(args, suite_jobs, plan) == 0)
    return 0 if all(v is not False for v in verdicts) else 1


def _suite_modes_arg(text: str) -> tuple[str, ...]:
    """--suite-modes: known modes, at least one (argparse reports errors); they run in
    evokernel.bench.suite.MODES' order whatever the order given."""
    from evokernel.bench.suite import MODES
    modes = tuple(dict.fromkeys(_split_commas(text)))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"unknown or no mode {', '.join(bad) or repr(text)}; "
                                         f"choose from {','.join(MODES)}")
    return modes


def _builtin_folder(specs: tuple[str, ...]) -> list[str]:
    """"problems" (the default) names the installed built-in problems' folder."""
    import evokernel.problems as builtin
    return [str(Path(builtin.__file__).parent) if s == "problems" and not Path(s).is_dir()
            else s for s in specs]


def _suite_only(args: argparse.Namespace, jobs: list[Any], plan: BenchPlan | None = None
                ) -> int:
    """The suite phase (evokernel.bench.suite): both modes, bench_suite.json/.md written.
    Returns 0 when the together mode met its target. Raises: NoGPUError without a GPU."""
    from evokernel.bench.deps import bench_eval_config
    from evokernel.bench.report import write_report_files
    from evokernel.bench.suite import MODES, suite_markdown, suite_phase
    n = sum(len(j.candidates) for j in jobs)
    modes = args.suite_modes or MODES
    if args.dry_run:
        print(f"evokernel bench: suite phase: {len(jobs)} problems, {n} kernels, checked "
              f"{', '.join(modes)}, each from an empty build cache")
        return 0
    deps = suite_deps()                           # NoGPUError before anything is written
    plan = plan or plan_from_args(argparse.Namespace(**dict(vars(args), phases=("cold",))))
    report = suite_phase(jobs, bench_eval_config(plan, Path(plan.work_dir)),
                         Path(plan.work_dir), deps, modes=modes)
    write_report_files(Path(plan.results_dir), "suite", report, suite_markdown(report))
    print(suite_markdown(report), flush=True)
    return 0 if report["target"]["passed"] is not False else 1   # None: together not run


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
