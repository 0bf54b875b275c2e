"""`evokernel advance RUN_DIR=BATCH_DIR ...`: one step of several batch-mode runs in one process,
with one GPU evaluator per problem shared by that problem's runs.

A batch-mode search (`run --llm-batch`) stops whenever it needs replies; each GPU step then
resumes every run of a study. Resumed one `evokernel run` at a time, each run sets up its own
evaluator: GPU workers, the problem's FP64 truth, the reference timings (about 15-25 s on the
H200, 2026-12-02, results/h200-2026-12-02-s9/sandbox_ab.md), which for an ablation of 16 runs
on two problems is most of a step. Here the runs of one problem and one evaluation config share
one evaluator, so every run of the step is measured against the same baseline measurement, and
the set-up is paid once per problem.

Each RUN_DIR is resumed when it holds a run (run.sqlite); otherwise it is started from
``RUN_DIR.args`` beside it: the problem and `run` flags, e.g. ``softmax --strategy branching
--seed 0 --model M`` (shell quoting; lines starting with ``#`` are comments; the other lines are
joined, a line ending in a backslash with the next as in a shell). Runs go one after another,
each as `evokernel run` would: its progress and last lines, the same checks. A run that cannot
start (a bad args file, a folder that is no run, the same run named again) or that fails on its
way is named on stderr and the others go on.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from evokernel.cli import options
from evokernel.errors import EvokernelError, NoGPUError


def add_parser(sub: Any, run_parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add `advance` to the subparsers ``sub``; ``run_parser`` (with the batch mode's flags)
    parses each run's own flags."""
    a = sub.add_parser("advance", help="resume (or start) several batch-mode runs, one GPU "
                       "evaluator per problem",
                       description=__doc__.split("\n\n")[0])
    a.add_argument("runs", nargs="+", metavar="RUN_DIR=BATCH_DIR",
                   help="a run folder and its batch folder (--llm-batch)")
    a.add_argument("--eval-timeout", type=float, metavar="S",
                   help="--eval-timeout for every run of this step, over an args file's "
                        "own (seconds a candidate's evaluation may take): a resumed run uses "
                        "it for this step only, a new one stores it")
    a.set_defaults(func=cmd_advance, run_parser=run_parser)
    return a


#: The `run` flags an args file may not give (destination -> flag): RUN_DIR=BATCH_DIR decides
#: the run and batch folders, and a step resumes each run in the batch mode that writes requests
#: out (the Batch API's submit mode would be lost after the first step).
SPEC_FLAGS = {"run_dir": "--run-dir", "llm_batch": "--llm-batch", "resume": "--resume",
              "llm_batch_submit": "--llm-batch-submit"}


def run_argv(run_dir: Path, batch: Path, parser: argparse.ArgumentParser) -> list[str]:
    """The `run` arguments that resume ``run_dir``, or start it from ``RUN_DIR.args`` (read
    with ``parser``, the `run` parser). Raises: EvokernelError naming the folder or file:
    neither a run nor an args file there, a file where the run or batch folder goes, an args
    file that is a directory, empty, not UTF-8 text, not valid shell quoting, not valid `run`
    arguments (parse_run_args) or that gives a flag of SPEC_FLAGS."""
    for folder, what in ((run_dir, "run folder"), (batch, "batch folder")):
        if folder.exists() and not folder.is_dir():
            raise EvokernelError(f"{folder}: not a folder (the {what} goes there)")
    if (run_dir / "run.sqlite").is_file():
        return ["--resume", str(run_dir), "--llm-batch", str(batch)]
    args_file = args_path(run_dir)
    if args_file.is_dir():
        raise EvokernelError(f"{args_file}: a directory, not a file; the args file that starts "
                             f"{run_dir} is a file of PROBLEM and run flags")
    if not args_file.is_file():
        raise EvokernelError(f"{run_dir}: no run there (no run.sqlite) and no args file "
                             f"{args_file} to start one from")
    try:
        text = args_file.read_text(encoding="utf-8").removeprefix("\ufeff")   # a BOM
        lines = [ln.rstrip() for ln in text.splitlines()
                 if ln.strip() and not ln.lstrip().startswith("#")]
        # a line that ends in an odd number of backslashes (spaces after them ignored) is
        # continued by the next: the backslash and the line break dropped, as a shell does
        words = shlex.split("".join(
            ln[:-1] if (len(ln) - len(ln.rstrip("\\"))) % 2 else ln + " " for ln in lines))
    except UnicodeDecodeError:
        raise EvokernelError(f"{args_file}: not UTF-8 text; expected PROBLEM and run "
                             "flags") from None
    except ValueError as e:                    # shlex: an unclosed quotation
        raise EvokernelError(f"{args_file}: {e}; expected PROBLEM and run flags, "
                             "shell-quoted") from None
    if not words:
        raise EvokernelError(f"{args_file}: empty; expected PROBLEM and run flags")
    given = vars(parse_run_args(parser, words, args_file))
    spec = [flag for dest, flag in SPEC_FLAGS.items() if given.get(dest) not in (None, False)]
    if spec:
        raise EvokernelError(f"{args_file}: {', '.join(spec)} not allowed in an args file: "
                             f"{run_dir}={batch} decides the run and batch folders; drop "
                             f"{'it' if len(spec) == 1 else 'them'}")
    # first: after a `--` among the words they would be taken for positional arguments
    return ["--run-dir", str(run_dir), "--llm-batch", str(batch), *words]


def args_path(run_dir: Path) -> Path:
    """``RUN_DIR.args``, beside the run folder (``run_dir`` as parse_specs gives it: a path
    with a name)."""
    return run_dir.with_name(run_dir.name + ".args")


def parse_run_args(parser: argparse.ArgumentParser, argv: list[str],
                   args_file: Path) -> argparse.Namespace:
    """``argv`` parsed by the `run` parser ``parser``. Raises: EvokernelError naming
    ``args_file``: --help (-h) among them (the help is not printed), or arguments that argparse
    refused (it has printed the usage and what was wrong)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):    # argparse prints --help there only
            return parser.parse_args(argv)
    except SystemExit as e:
        if e.code == 0:                          # --help, also as -h or abbreviated
            raise EvokernelError(f"{args_file}: --help is not a run flag here; expected "
                                 "PROBLEM and run flags (`evokernel run --help` lists "
                                 "them)") from None
        raise EvokernelError(f"{args_file}: not valid `evokernel run` arguments "
                             "(above)") from None


def parse_specs(specs: list[str]) -> tuple[list[tuple[Path, Path]], list[str]]:
    """(run folder, batch folder) of each good RUN_DIR=BATCH_DIR, and a line for each bad one:
    not a single '=' between two paths, the root folder as the run folder, a run folder named
    again (also as another path to the same folder; the first naming is kept), or two run
    folders of the same name sharing a batch folder (their request files, named after the
    run, would collide)."""
    out, bad, seen, names = [], [], {}, {}
    for spec in specs:
        run_dir, sep, batch = spec.partition("=")
        if not sep or not run_dir or not batch or "=" in batch:
            bad.append(f"{spec!r}: expected RUN_DIR=BATCH_DIR")
            continue
        key = Path(run_dir).resolve()
        if not key.name:
            bad.append(f"{spec!r}: the root folder cannot be a run folder")
            continue
        if key in seen:
            bad.append(f"{run_dir}: named twice ({seen[key]!r} and {spec!r}); the first is run")
            continue
        same = names.get((key.name, Path(batch).resolve()))
        if same is not None:
            bad.append(f"{spec!r}: its batch folder is {same!r}'s too, and both runs are named "
                       f"{key.name!r}: their request files would collide; the first is run")
            continue
        seen[key], names[(key.name, Path(batch).resolve())] = spec, spec
        # "." and "..", or a path ending in them: the folder's own name (for RUN_DIR.args)
        name = Path(run_dir) if Path(run_dir).name not in ("", ".", "..") else key
        out.append((name, Path(batch)))
    return out, bad


class Borrowed:
    """A shared evaluator lent to one run: everything goes to it but ``close`` (the owner
    closes it after the last run)."""

    def __init__(self, inner: Any):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def close(self) -> None:
        pass


def stored_compile_ms(run_dir: Any) -> float | None:
    """A resumed run's torch.compile baseline (ms), None for a new run or none stored."""
    from evokernel.runs.store import RunStore
    if not (Path(run_dir) / "run.sqlite").is_file():
        return None
    store = RunStore(run_dir, read_only=True)
    try:
        return store.compile_baseline_ms()
    finally:
        store.close()


def group_key(prep: Any, compile_ms: float | None) -> str:
    """Runs with the same key may share an evaluator: the same problem source and inputs, the
    same evaluation config, the same stored torch.compile baseline (``compile_ms``,
    stored_compile_ms)."""
    return json.dumps([prep.problem.source, dataclasses.asdict(prep.config.evaluation),
                       compile_ms], sort_keys=True, default=str)


def cmd_advance(args: argparse.Namespace) -> int:
    """Exit status: the worst of the runs' `run` statuses (0, 1), or 2 when a run could not
    start (the others still ran)."""
    from evokernel.cli.run import prepare_run, report_result, resume_again, run_with_progress
    from evokernel.engine.factory import make_evaluator
    options.eval_timeout(args)         # a bad --eval-timeout: one line, before any run
    specs, bad = parse_specs(args.runs)
    for line in bad:
        print(f"evokernel advance: {line}", file=sys.stderr)
    prepared, status, no_gpu = [], 2 if bad else 0, False
    for run_dir, batch in specs:
        try:
            argv = run_argv(run_dir, batch, args.run_parser)
            rargs = parse_run_args(args.run_parser, argv, args_path(run_dir))
            if args.eval_timeout is not None:     # set, not appended: after an args file's
                rargs.eval_timeout = args.eval_timeout    # `--` it would be positional
            rargs.verbose, rargs.cli_argv = args.verbose, argv
            prepared.append((run_dir, rargs, prepare_run(rargs)))
        except NoGPUError as e:              # its help once; then one line a run
            say(run_dir, e if not no_gpu else EvokernelError("needs a CUDA GPU (above)"))
            no_gpu, status = True, 2
        except (EvokernelError, OSError) as e:
            say(run_dir, e)
            status = 2
    shared: dict[str, Any] = {}
    try:
        for run_dir, rargs, prep in prepared:
            evaluator = prep.stand_in
            if evaluator is None:        # the GPU's: one per group, made when first needed
                compile_ms = stored_compile_ms(prep.config.run_dir)
                key = group_key(prep, compile_ms)

                def lend(key: str = key, prep: Any = prep, rargs: Any = rargs,
                         compile_ms: float | None = compile_ms) -> Borrowed:
                    if key not in shared:
                        shared[key] = make_evaluator(
                            prep.problem, prep.config.evaluation, compile_ms=compile_ms,
                            **(options.placement(rargs) or {}))
                    return Borrowed(shared[key])
                evaluator = lend
            try:
                result = run_with_progress(prep.problem, prep.config,
                                           resume=bool(rargs.resume), verbose=args.verbose,
                                           llm_batch=prep.llm_batch, evaluator=evaluator)
            except (EvokernelError, OSError) as e:      # this run only; the others go on
                say(run_dir, e)
                status = 2
                continue
            status = max(status, report_result(result, prep.llm_batch,
                                               again=resume_again(rargs)))
    finally:
        for ev in shared.values():
            ev.close()
    return status


def say(run_dir: Path, error: BaseException) -> None:
    """One run's failure on stderr, naming the run once."""
    said = str(error).removeprefix("evokernel: ")
    if isinstance(error, OSError) and error.filename and str(error.filename) not in said:
        said = f"{error.filename}: {error.strerror or said}"
    named = said.startswith((f"{run_dir}:", f"{args_path(run_dir)}:"))
    print(f"evokernel advance: {said if named else f'{run_dir}: {said}'}", file=sys.stderr)
