"""`evokernel suite`: a problem set checked or searched on the GPU (or read from ``check --json``
files without one), as one row per problem and KernelBench's fast_p (evokernel.report.suite).

    add_parser(sub)              the `suite` subcommand
    cmd_suite(args)              build the table and write OUTPUT.md / OUTPUT.json
    suite_problems(specs)        the problems named by folders, files or built-in names
    candidate_files(...)         each problem's candidate file (both: evokernel.problem_files)
    check_all(...) / search_all(...)   the rows, checked or searched on the GPU

``check_all`` builds every problem's candidate up front and keeps the GPUs busy across
problems (evokernel.engine.problem_set); ``--one-at-a-time`` is the old way, one evaluator per
problem after another (the bench's suite phase measures both).

Problems come from folders (KernelBench's ``level1/...`` layout or ``problems/``), files or
built-in names. A problem's candidate is, in order: the file named in a JSON mapping
``{"problem": "path.py"}``, the file ``<name>.py`` in a candidates folder, or the problem's own
seed kernel (``seeds/<name>.py`` beside it). A problem without a candidate, or whose evaluation
could not be set up, gets a row that counts as not correct: fast_p is over all problems.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from evokernel.cli import options
from evokernel.config import EvalConfig, RunConfig
from evokernel.errors import EvokernelError, NoGPUError, ProblemError
from evokernel.problem import Problem
from evokernel.problem_files import candidate_files, suite_problems
from evokernel.records import Candidate
from evokernel.report.suite import SuiteRow, missing_row, row_from_result


def check_all(problems: Sequence[Problem], files: dict[str, Path | None], config: EvalConfig,
              make_evaluator: Callable[[Problem, EvalConfig], Any] | None = None, *,
              one_at_a_time: bool = False, placement: dict[str, Any] | None = None
              ) -> list[SuiteRow]:
    """Gate and time each problem's candidate; each problem gets GPU workers of its own, with
    its own truths and baselines.

    Args:
        make_evaluator: an evaluator per problem (tests pass fakes); given, or with
            ``one_at_a_time``, problems go one after another. Otherwise every candidate is
            built up front and the GPUs take problems from one queue
            (evokernel.engine.problem_set; with a Dask ``placement``, evokernel.cluster's).
        placement: make_evaluator's ``devices`` and ``dask`` (evokernel.cli.options).
    Returns: one row per problem, in order.
    Raises:
        NoGPUError: no CUDA GPU (from the evaluator).
    """
    placement = dict(placement or {})
    if make_evaluator is None and placement.get("dask") is True:    # one cluster for all
        return _on_one_local_cluster(problems, files, config, placement, one_at_a_time)
    if make_evaluator is None and not one_at_a_time:
        return check_together(problems, files, config, devices=placement.get("devices"),
                              dask=placement.get("dask"))
    if make_evaluator is None:
        from evokernel.engine import factory

        def make_evaluator(p: Problem, c: EvalConfig) -> Any:
            return factory.make_evaluator(p, c, **placement)
    rows = []
    for p in problems:
        f = files.get(p.name)
        if f is None or not f.is_file():
            rows.append(missing_row(p.name, "no candidate" if f is None else f"no file {f}"))
            continue
        logger.info("suite: checking {} with {}", p.name, f)
        try:
            evaluator = make_evaluator(p, config)
        except NoGPUError:
            raise
        except EvokernelError as e:     # e.g. the problem fails to set up on the GPU
            rows.append(missing_row(p.name, f"error: {e}"))
            continue
        try:
            cand = Candidate(source=f.read_text(), idea=f"file {f}", operator="check")
            (res,) = evaluator.evaluate([cand])
            rows.append(row_from_result(p.name, str(f), res, evaluator.info))
        finally:
            evaluator.close()
    return rows


def _on_one_local_cluster(problems: Sequence[Problem], files: dict[str, Path | None],
                          config: EvalConfig, placement: dict[str, Any],
                          one_at_a_time: bool) -> list[SuiteRow]:
    """check_all over ``--dask`` on this host: one local Dask cluster for every problem (not
    one per problem), its GPU workers keeping each problem's set-up apart."""
    from evokernel.cluster import connect
    from evokernel.engine.factory import require_gpu
    require_gpu("suite --dask: no CUDA GPU here; pass --dask-scheduler ADDRESS")
    devices = placement.get("devices")
    if devices is None:
        import torch
        devices = list(range(torch.cuda.device_count()))
    cluster = connect.local_cluster(devices, config.build_workers)
    try:
        return check_all(problems, files, config, one_at_a_time=one_at_a_time,
                         placement={"dask": cluster.scheduler_address})
    finally:
        cluster.close()


def check_together(problems: Sequence[Problem], files: dict[str, Path | None],
                   config: EvalConfig, devices: Sequence[int] | None = None,
                   dask: str | None = None) -> list[SuiteRow]:
    """check_all's default: every candidate built up front, GPU workers kept busy across
    problems (evokernel.engine.problem_set, or on the Dask cluster at the address ``dask``:
    evokernel.cluster.problem_set). Returns: one row per problem, in order.
    Raises: NoGPUError without a CUDA GPU; ClusterError when the scheduler is gone."""
    from evokernel.engine.problem_jobs import ProblemJob
    from evokernel.engine.problem_set import evaluate_problem_set
    rows: list[SuiteRow | None] = [None] * len(problems)
    jobs, where = [], []
    for i, p in enumerate(problems):
        f = files.get(p.name)
        if f is None or not f.is_file():
            rows[i] = missing_row(p.name, "no candidate" if f is None else f"no file {f}")
            continue
        jobs.append(ProblemJob(p, (Candidate(source=f.read_text(), idea=f"file {f}",
                                             operator="check"),)))
        where.append((i, f))
    logger.info("suite: {} problems, their candidates built up front", len(jobs))
    if dask:
        from evokernel.cluster.problem_set import evaluate_problem_set_on_dask
        outcomes = evaluate_problem_set_on_dask(jobs, config, dask)
    else:
        outcomes = evaluate_problem_set(jobs, config, devices=devices)
    for (i, f), o in zip(where, outcomes):
        rows[i] = (missing_row(o.problem, f"error: {o.error}") if o.error is not None
                   else row_from_result(o.problem, str(f), o.results[0], o.info))
    return [r for r in rows if r is not None]


def search_all(problems: Sequence[Problem], config: RunConfig, run_root: Path,
               run: Callable[[Problem, RunConfig], Any] | None = None) -> list[SuiteRow]:
    """Run one search per problem (run directories ``run_root/<name>``; an existing one is
    resumed) and score each problem's best kernel.

    Raises:
        NoGPUError: no CUDA GPU (from the evaluator).
    """
    if run is None:
        from evokernel.search.evolution import Evolution

        def run(problem: Problem, cfg: RunConfig) -> Any:
            resume = (Path(cfg.run_dir or "") / "run.sqlite").exists()
            return Evolution(problem, cfg).run(resume=resume)
    rows = []
    for p in problems:
        cfg = dataclasses.replace(config, problem=str(p.path), run_dir=str(run_root / p.name))
        logger.info("suite: searching {} in {}", p.name, cfg.run_dir)
        try:
            result = run(p, cfg)
        except NoGPUError:
            raise
        except EvokernelError as e:
            rows.append(missing_row(p.name, f"error: {e}"))
            continue
        if result.best is None:
            rows.append(missing_row(p.name, "no kernel accepted"))
            continue
        from evokernel.runs.store import RunStore
        store = RunStore(cfg.run_dir, read_only=True)   # type: ignore[arg-type]
        try:
            device = store.meta().get("device", {})
        finally:
            store.close()
        _, res = result.best
        rows.append(row_from_result(p.name, str(result.best_path or cfg.run_dir), res, device))
    return rows


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `suite` to the subparsers ``sub``; returns its parser."""
    su = sub.add_parser("suite", help="check or search a problem set; table with fast_p",
                        description="One row per problem (correct, speedup vs eager and vs "
                        "torch.compile, % of floor) and KernelBench's fast_p for p = 0, 1, "
                        "1.5, 2 over all problems, plus the geometric-mean speedup of the "
                        "correct kernels. Writes OUTPUT.md and OUTPUT.json.")
    su.add_argument("problems", metavar="PROBLEM", nargs="*",
                    help="problem folders (KernelBench level layout or problems/), files, or "
                         "built-in names")
    su.add_argument("--kernels", help="candidates: a folder of <problem>.py files or a JSON "
                    "{problem: file} (none: each problem's seed kernel)")
    su.add_argument("--search", action="store_true",
                    help="run a search per problem instead of checking one candidate")
    su.add_argument("--one-at-a-time", action="store_true",
                    help="check problems one after another, each with its own builds and "
                         "fresh GPU workers (the old way; default: every candidate built up "
                         "front, GPU workers kept busy across problems)")
    su.add_argument("--from-checks", metavar="DIR", help="no GPU: build the table from the "
                    "check_*.json files in DIR (each file's first kernel)")
    su.add_argument("-o", "--output", default="suite", help=options.with_default(
        "output path without suffix (OUTPUT.md, OUTPUT.json)", "suite"))
    su.add_argument("--title", default="evokernel suite",
                    help=options.with_default("the table's heading", "evokernel suite"))
    options.add_llm_arguments(su, budget=" a problem's")
    options.add_search_arguments(su, branching=False)
    options.add_eval_arguments(su)
    su.set_defaults(func=cmd_suite, parser=su)
    return su


def cmd_suite(args: argparse.Namespace) -> int:
    """Exit status 0 when the table was written."""
    from evokernel.report import suite
    try:
        suite.output_paths(args.output)        # a path it cannot write fails now, not at the end
    except OSError as e:
        raise EvokernelError(f"-o {e}") from e
    if args.from_checks:
        _refuse_unused_flags(args)
        checks = Path(args.from_checks)
        if not checks.is_dir():
            raise EvokernelError(f"{checks}: not a folder of check_*.json files" if
                                 checks.exists() else f"{checks}: no such folder of check_*.json files")
        try:
            rows = suite.rows_from_checks(checks)
        except ValueError as e:
            raise EvokernelError(str(e)) from e
        if args.problems:   # problems named but never checked count against fast_p
            have = {r.problem for r in rows}
            rows += [suite.missing_row(p.name, "no check file")
                     for p in suite_problems(args.problems) if p.name not in have]
    else:
        rows = _suite_on_gpu(args)
    md, js = suite.write(rows, args.output, title=args.title)
    print(md.read_text(), end="")
    print(f"\nwritten: {md} and {js}")
    return 0


#: What `suite --from-checks` reads; every other flag belongs to checking or searching.
FROM_CHECKS_FLAGS = {"problems", "from_checks", "output", "title"}


def _refuse_unused_flags(args: argparse.Namespace) -> None:
    """Raises: EvokernelError naming the flags given with --from-checks that it would ignore
    (it only reads check files: the evaluation, search and LLM flags were the checks' own)."""
    given = options.given_options(args)
    if given is None:              # no command line (a call from Python): compare to defaults
        defaults = vars(args.parser.parse_args([])) if getattr(args, "parser", None) else {}
        given = {k for k, v in defaults.items() if getattr(args, k, v) != v}
    unused = sorted(f"--{k.replace('_', '-')}" for k in given - FROM_CHECKS_FLAGS)
    if unused:
        raise EvokernelError(f"suite --from-checks only reads the check files in "
                             f"{args.from_checks}; it runs nothing, so {', '.join(unused)} "
                             "would be ignored (the checks were made with their own flags; "
                             "to check or search with these, run `evokernel suite` without "
                             "--from-checks)")


def _suite_on_gpu(args: argparse.Namespace) -> list[SuiteRow]:
    """The rows of `suite` without --from-checks: a malformed problem file gets a row (not
    correct, the error its reason) and the others go on.

    Raises:
        EvokernelError: no problem named, or none that is not malformed.
    """
    if not args.problems:
        raise EvokernelError("suite: name a folder, files or built-in problems "
                             "(or --from-checks DIR)")
    malformed: dict[Path, ProblemError] = {}
    problems = suite_problems(args.problems, malformed)
    if not problems:
        raise ProblemError("suite: no problem to run; every problem file is malformed:\n  " +
                           "\n  ".join(str(e) for e in malformed.values()))
    for path, error in malformed.items():
        logger.warning("suite: {} is left out, and counts as not correct: {}", path, error)
    skipped = [missing_row(path.stem, f"malformed problem: {error}")
               for path, error in malformed.items()]
    return _run_problems(args, problems) + skipped


def _run_problems(args: argparse.Namespace, problems: list[Problem]) -> list[SuiteRow]:
    """The rows of a search or a check of ``problems`` (`suite` without --from-checks)."""
    from evokernel.cli.run import run_with_progress
    if args.search:
        config = RunConfig(search=options.search_config(args),
                           evaluation=options.eval_config(args), llm=options.llm_config(args))
        options.require_gpu(args)
        base = Path(args.output)
        run_root = base.parent / f"{base.stem}_runs"

        def run(problem, cfg):
            resume = (Path(cfg.run_dir) / "run.sqlite").exists()
            return run_with_progress(problem, cfg, resume=resume, verbose=args.verbose,
                                     placement=options.placement(args))
        return search_all(problems, config, run_root, run=run)
    files = candidate_files(problems, args.kernels)
    eval_config = options.eval_config(args)
    placement = options.placement(args)
    options.require_gpu(args)
    return check_all(problems, files, eval_config, one_at_a_time=args.one_at_a_time,
                     placement=placement)
