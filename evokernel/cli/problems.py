"""`evokernel problems [PATH] [--run]`: list problem files and what is wrong with each (no GPU).

Without ``--run`` each file is read statically (evokernel.problem: a class Model with forward,
get_inputs, get_init_inputs, a seed kernel beside it). With ``--run`` each good file's set-up
also runs, on the meta device or the CPU, with a time limit (evokernel.problem_run). Every
file gets a line, good or bad; the exit status is 1 when any is bad.
"""
from __future__ import annotations

import argparse
from typing import Any

from evokernel.cli import options


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `problems` to the subparsers ``sub``; returns its parser."""
    pr = sub.add_parser("problems", help="list and validate problem files (no GPU needed)",
                        description="List problem files with what is wrong with each; --run "
                        "also runs their set-up on the CPU or the meta device.")
    pr.add_argument("path", metavar="PATH", nargs="?",
                    help="a problem file or folder (none: the built-in problems)")
    pr.add_argument("--run", action="store_true",
                    help="import each file and run get_init_inputs(), Model(...) and "
                         "get_inputs() without a GPU (forward is not run)")
    pr.add_argument("--timeout-s", type=float, default=60.0,
                    help=options.with_default("with --run: seconds each file's set-up may take",
                                              60.0))
    pr.add_argument("--jobs", type=int, help="with --run: files set up at once (none: the "
                    "CPU count)")
    pr.set_defaults(func=cmd_problems)
    return pr


def cmd_problems(args: argparse.Namespace) -> int:
    """Exit status 0 when every file is good, 1 when one is not."""
    from evokernel.errors import ConfigError
    from evokernel.problem import Problem, builtin_names, load_each, load_problem
    if args.path:
        loaded = load_each(args.path)
    else:
        loaded = [(p.path, p) for p in (load_problem(n) for n in builtin_names())]
    runs = {}
    if args.run:
        from evokernel.problem_run import run_setups
        good = [path for path, p in loaded if isinstance(p, Problem)]
        try:
            runs = dict(zip(good, run_setups(good, timeout_s=args.timeout_s, jobs=args.jobs)))
        except ValueError as e:
            raise ConfigError(f"problems --run: {e}") from e
    width = max([len(path.stem) for path, _ in loaded] + [12])
    bad = gpu = 0
    for path, p in loaded:
        if not isinstance(p, Problem):
            bad += 1
            print(f"{path.stem:<{width}}  BAD   {p}")
            continue
        run = runs.get(path)
        state = "ok" if run is None or run.ok else "GPU?" if run.status == "needs_gpu" else "BAD"
        bad += state == "BAD"
        gpu += state == "GPU?"
        print(f"{p.name:<{width}}  {state:<4}  seed kernel: {'yes' if p.seed_source else 'no '}"
              f"  {path}" + ("" if run is None else "\n" + " " * (width + 8) + _run_text(run)))
    print(f"{len(loaded)} problem file(s): {len(loaded) - bad - gpu} good, {bad} bad"
          + (f", {gpu} whose set-up needs a GPU" if gpu else "")
          + ("" if args.run else " (read statically; --run also runs their set-up)"))
    return 1 if bad else 0


def _run_text(run: Any) -> str:
    """One line for a SetupRun."""
    if run.ok:
        where = ("on the CPU" if run.device == "cpu" else
                 "on the meta device (too large for the CPU check)")
        return (f"set-up ok {where}: {run.message}; inputs {_size(run.input_bytes)}, "
                f"parameters {_size(run.parameter_bytes)}")
    label = {"failed": "FAILED", "timeout": "TIMEOUT", "needs_gpu": "NEEDS A GPU"}[run.status]
    return f"set-up {label}: {run.message}"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
