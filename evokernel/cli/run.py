"""`evokernel run`: a search, or the resumption of a killed one, with the live progress display.

    add_parser(sub)          the `run` subcommand and its flags
    cmd_run(args)            start (or --resume) a search; prints the best kernel at the end
    prepare_run(args)        its checks and loading, apart (scripts/frontier_step.py)
    report_result(r, batch)  its last lines and exit status
    run_with_progress(...)   one search with the progress display (also `suite --search`'s)
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from loguru import logger

from evokernel.cli import options
from evokernel.errors import ConfigError, EvokernelError


def add_arguments(r: argparse.ArgumentParser) -> None:
    """`run`'s flags, on ``r``."""
    r.add_argument("problem", metavar="PROBLEM", nargs="?", default=options.RUN.problem,
                   help=options.with_default("built-in problem name or KernelBench-format "
                                             "file", options.RUN.problem))
    options.add_llm_arguments(r)
    options.add_search_arguments(r)
    r.add_argument("--seed-kernel", help="seed kernel file (none: seeds/<problem>.py beside "
                   "the problem)")
    r.add_argument("--run-dir", help="run directory (none: runs/<problem>-<time>)")
    r.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a killed run with its stored config.json (--eval-timeout "
                        "may replace its evaluation timeout for this resumption)")
    options.add_eval_arguments(r)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `run` to the subparsers ``sub``; returns its parser (other modules add flags)."""
    r = sub.add_parser("run", help="search for faster kernels",
                       description="Search for faster kernels of PROBLEM; the run directory "
                       "keeps every candidate and can be resumed.")
    add_arguments(r)
    r.set_defaults(func=cmd_run, parser=r)   # `parser`: flags added later count for --resume
    return r


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    """What `run` has checked and loaded before it searches: the problem, the run's config,
    the resumed run's store meta (None for a new run), the batch LLM mode (None without
    --llm-batch) and the evaluator standing in for the GPU (engine.deferred; None: the GPU's)."""

    problem: Any
    config: Any
    meta: dict[str, Any] | None
    llm_batch: Any
    stand_in: Any


def cmd_run(args: argparse.Namespace) -> int:
    """Exit status 0 when a kernel passed the gate, 1 when none did."""
    prep = prepare_run(args)
    result = run_with_progress(prep.problem, prep.config, resume=bool(args.resume),
                               verbose=args.verbose, llm_batch=prep.llm_batch,
                               placement=options.placement(args), evaluator=prep.stand_in)
    return report_result(result, prep.llm_batch, again=resume_again(args))


def resume_again(args: argparse.Namespace) -> str:
    """The RESUME_OVERRIDES given, as flags the printed resume command repeats ("" for none):
    the step that evaluates a round stopped here needs them as much as this one did."""
    timeout = getattr(args, "eval_timeout", None)
    if timeout is None:
        return ""
    return f" --eval-timeout {int(timeout) if float(timeout).is_integer() else timeout!r}"


def prepare_run(args: argparse.Namespace) -> PreparedRun:
    """Check `run`'s arguments and load what the search needs (see PreparedRun); prints the
    strategy and no-model lines. Raises: EvokernelError (ConfigError, NoGPUError, a bad
    problem or run folder) with one line."""
    from evokernel.config import RunConfig
    from evokernel.problem import load_problem

    meta = None                       # a resumed run's RunStore.meta()
    if args.resume:
        problem, config, meta = _resumed(args)
    else:
        problem = load_problem(args.problem, seed=args.seed_kernel, form=args.candidate_form)
        config = RunConfig(problem=str(args.problem), run_dir=args.run_dir,
                           search=options.search_config(args),
                           evaluation=options.eval_config(args),
                           llm=options.llm_config(args))
    if config.search.strategy != "evokernel" and config.llm.model is None:
        raise ConfigError(f"--strategy {config.search.strategy} makes its children with the "
                          "LLM's idea mutation: give --model provider/name")
    from evokernel.cli.llm import batch_mode
    llm_batch = batch_mode(args, config.llm.model)
    stand_in = _deferred(args, llm_batch, meta)   # batch rounds that need no GPU (engine.deferred)
    if stand_in is None:
        options.require_gpu(args)   # after the arguments and the problem are known to be good
    if config.search.strategy != "evokernel":
        print(strategy_line(config.search, [] if args.resume else options.overridden_flags(args)))
    if config.llm.model is None:
        print("evokernel: no --model given: searching with the LLM-free tune operator only "
              "(it varies the constants the seed kernel marks with `// tune:`)")
    return PreparedRun(problem, config, meta, llm_batch, stand_in)


def report_result(result: Any, llm_batch: Any, again: str = "") -> int:
    """Print how a search ended (its RunResult) and return `run`'s exit status: 0 when a
    kernel passed the gate or the batch mode waits for replies or a GPU, 1 when none passed.
    ``again``: flags the printed resume command repeats (resume_again)."""
    from evokernel.cli.llm import stop_message
    print(f"run directory: {result.run_dir}  ({result.stopped})")
    if result.stopped == "llm_batch":
        print(stop_message(result.run_dir, llm_batch, again))
        return 0
    if result.stopped == "needs_gpu":
        print(f"every reply of the next round is in the reply cache; evaluating it needs the "
              f"GPU. On a machine with one:\n  evokernel run --resume {result.run_dir} "
              f"--llm-batch {llm_batch.folder}{again}")
        return 0
    if result.best is None:
        print("no kernel passed the gate")
        return 1
    cand, res = result.best
    print(f"best kernel {cand.id} (generation {cand.generation}, {cand.operator}): "
          f"{res.speedup:.3f}x over eager ({res.reference_ms:.4f} ms -> {res.candidate_ms:.4f} ms)"
          + (f", {res.compile_speedup:.3f}x over torch.compile" if res.compile_ms else "")
          + (f", {res.pct_of_floor:.0f}% of floor" if res.pct_of_floor else ""))
    print(f"exported: {result.best_path}")
    return 0


def strategy_line(search: Any, ignored: list[str]) -> str:
    """The line a run of a baseline strategy prints first: what the strategy does, and the
    flags it replaced (``ignored``, options.overridden_flags)."""
    from evokernel.search.strategies import describe
    them = "it" if len(ignored) == 1 else "them"
    return f"evokernel: strategy {describe(search)}" + (
        f" ({', '.join(ignored)} not used: the strategy fixes {them})" if ignored else "")


#: The placement flags (evokernel.cli.options.add_placement_arguments), allowed with --resume.
PLACEMENT_FLAGS = ("gpus", "dask", "dask_scheduler")
#: Flags allowed with --resume that replace a stored setting for that resumption only (the
#: run's config.json is written once and keeps its value): how long a candidate may take before
#: it fails with `timeout` is a property of the machine and the budget at hand, not of a result
#: (a hung kernel spends it whole: 300 s of a 30-minute device session, 2026-12-02).
RESUME_OVERRIDES = ("eval_timeout",)


def _resumed(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    """The problem, config and store meta of the run directory ``args.resume``, with the
    RESUME_OVERRIDES given applied. Raises: EvokernelError when other run flags are given, the
    folder is no run (evokernel.runs.store), or an override is out of range (ConfigError)."""
    from evokernel.problem import load_problem
    from evokernel.runs.store import RunStore
    given = explicit_run_flags(args)
    if given:
        raise EvokernelError(f"--resume continues {args.resume} with its stored config.json;"
                             f" drop {', '.join(given)} (or start a new run)")
    store = RunStore(args.resume, read_only=True)
    try:
        config, meta = store.config(), store.meta()
    finally:
        store.close()
    run_dir = Path(args.resume)
    seed = run_dir / "seed.py"
    problem = load_problem(run_dir / "problem.py", seed=seed if seed.is_file() else None)
    timeout = options.eval_timeout(args)
    if timeout is not None:
        stored = config.evaluation.eval_timeout_s
        config = dataclasses.replace(config, evaluation=dataclasses.replace(
            config.evaluation, eval_timeout_s=timeout))
        logger.info(f"{args.resume}: evaluation timeout {timeout:g} s for this resumption "
                    f"(config.json keeps {stored:g} s)")
    return (dataclasses.replace(problem, name=meta["problem"]["name"]),
            dataclasses.replace(config, run_dir=args.resume), meta)


def _deferred(args: argparse.Namespace, llm_batch: Any, meta: dict[str, Any] | None) -> Any:
    """The DeferredEvaluator of a --resume (``meta``: its RunStore.meta()) in the batch mode on
    a machine without a GPU (evokernel.engine.deferred), or None."""
    if getattr(args, "dask_scheduler", None):
        return None
    from evokernel.engine.deferred import deferred_evaluator
    return deferred_evaluator(meta, llm_batch)


def explicit_run_flags(args: argparse.Namespace) -> list[str]:
    """The `run` options given on the command line, also with their default value
    (options.given_options; where that is unknown, those with a value other than their
    default), and PROBLEM when given (every flag of ``args.parser``, the `run` parser,
    including flags other modules add)."""
    parser = getattr(args, "parser", None)
    if parser is None:
        parser = argparse.ArgumentParser(add_help=False)
        add_arguments(parser)
    defaults = vars(parser.parse_args([]))
    given = options.given_options(args)
    from evokernel.cli.llm import RESUME_FLAGS
    # Where it runs is no part of the stored config: a resumed run may move (--dask-scheduler).
    skip = {"resume", "func", "parser", "command", "verbose", "cli_argv", *RESUME_FLAGS,
            *PLACEMENT_FLAGS, *RESUME_OVERRIDES}
    return [f"--{k.replace('_', '-')}" if k != "problem" else "PROBLEM"
            for k, v in vars(args).items() if k in defaults and k not in skip
            and (v != defaults[k] or (given is not None and (
                k in given if k != "problem" else v in args.cli_argv)))]


def run_with_progress(problem: Any, config: Any, *, resume: bool, verbose: bool,
                      llm_batch: Any = None, placement: dict[str, Any] | None = None,
                      evaluator: Any = None) -> Any:
    """Run one search with the live progress display (plain lines when stdout is not a
    terminal); loguru prints above the display while it is live. ``llm_batch``: the batch LLM
    mode (evokernel.cli.llm.batch_mode), or None; ``placement``: make_evaluator's ``devices``
    and ``dask`` (evokernel.cli.options.placement); ``evaluator``: one to use instead of
    make_evaluator's (the batch mode's DeferredEvaluator). Returns: the RunResult."""
    from evokernel.cli.progress import ProgressEvaluator, SearchProgress
    from evokernel.engine.factory import make_evaluator
    from evokernel.search.evolution import Evolution

    first, compile_ms = 0, None
    if resume:             # a resumed run goes on from its last generation, with its baseline
        from evokernel.runs.store import RunStore
        store = RunStore(config.run_dir, read_only=True)
        try:
            done, compile_ms = store.generations(), store.compile_baseline_ms()
        finally:
            store.close()
        first = done[-1]["generation"] + 1 if done else 0
    evo: Evolution | None = None
    progress = SearchProgress(
        generations=config.search.generations, max_tokens=config.llm.max_total_tokens,
        max_cost_usd=config.llm.max_cost_usd, baseline=config.evaluation.baseline,
        usage=lambda: evo.llm.usage if evo is not None and evo.llm is not None else None)
    evaluator = ProgressEvaluator(
        evaluator or (lambda: make_evaluator(problem, config.evaluation, compile_ms=compile_ms,
                                             **(placement or {}))), progress)
    evo = Evolution(problem, config, evaluator=evaluator,
                    on_generation=progress.generation_done)
    evo.llm_batch = llm_batch            # --llm-batch (evokernel.cli.llm)
    try:
        with progress:
            if progress.live:
                options.configure_logging(verbose, sink=progress.log_sink)
            progress.begin(first)
            return evo.run(resume=resume)
    finally:
        options.configure_logging(verbose)
        evaluator.close()
