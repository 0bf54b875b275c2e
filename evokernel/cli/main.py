"""evokernel: evolve CUDA kernels that beat PyTorch, under a strict FP32 precision gate.

    evokernel run [PROBLEM]              search for faster kernels (default problem: softmax)
    evokernel check PROBLEM KERNEL...    a kernel file's faults, then gate and time it on the GPU
    evokernel check --build-only ...     the same without a GPU: faults, compile, SASS audit
    evokernel check ... --sanitize       + memcheck, racecheck, determinism (--robustness: sizes)
    evokernel problems [PATH] [--run]    list and validate problems (works without a GPU)
    evokernel show RUN_DIR               summarize a run (finished or still running)
    evokernel report RUN_DIR             write a Markdown + HTML report with plots
    evokernel export RUN_DIR -o F        write the best kernel as a standalone candidate file
    evokernel export RUN_DIR --op N -o D the best kernel as a PyTorch custom op package
    evokernel suite PROBLEM...           check or search a problem set; fast_p table
    evokernel bench                      measure the evaluation engine itself
    evokernel llm import SRC RUN_DIR     the batch LLM mode's replies into a run
    evokernel advance RUN=BATCH ...      resume several batch-mode runs, one evaluator a problem
    evokernel replay RUN_DIR             re-measure a recorded search's kernels on this GPU

Exit status: 0 success (check: accepted; export: a kernel was written), 1 a kernel was
rejected or none was accepted (problems: a bad file; --sanitize: compute-sanitizer reported an
error), 2 bad input or machine.

This module assembles the parser from each command's module (COMMANDS: a function that adds
one or more subcommands and returns their parsers, so a module can also add flags to another
command's parser) and maps errors to the exit status (main). Shared flags and configs are in
evokernel.cli.options.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, Callable

from evokernel.build import inflight
from evokernel.cli import advance, check, options, problems, replay, rundir, run, suite
from evokernel.errors import EvokernelError, NoGPUError

Parsers = dict[str, argparse.ArgumentParser]


def _bench(sub: Any, parsers: Parsers) -> Parsers:
    from evokernel.bench import add_bench_arguments, cmd_bench
    b = sub.add_parser("bench", help="measure the evaluation engine (throughput, fidelity, "
                       "faults) on this machine's GPU")
    add_bench_arguments(b)
    b.set_defaults(func=cmd_bench)
    return {"bench": b}


def _one(name: str, add: Callable[[Any], argparse.ArgumentParser]
         ) -> Callable[[Any, Parsers], Parsers]:
    return lambda sub, parsers: {name: add(sub)}


#: Each entry is called as ``entry(sub, parsers)``: it adds its subcommands to ``sub`` (the
#: subparsers) and returns their parsers by name; ``parsers`` holds those of the entries
#: before it, so an entry may also add flags to one (``parsers["run"].add_argument(...)``).
def _llm(sub: Any, parsers: Parsers) -> Parsers:
    """`evokernel llm import/pending`, and the batch mode's flags on `run`."""
    from evokernel.cli.llm import add_llm_command, add_run_flags
    add_run_flags(parsers["run"])
    add_llm_command(sub)
    return {}


COMMANDS: list[Callable[[Any, Parsers], Parsers]] = [
    _one("run", run.add_parser), _one("check", check.add_parser),
    _one("problems", problems.add_parser), _bench,
    lambda sub, parsers: rundir.add_parsers(sub), _one("suite", suite.add_parser), _llm,
    _one("replay", replay.add_parser),
    lambda sub, parsers: {"advance": advance.add_parser(sub, parsers["run"])},  # after _llm's
]


def build_parser() -> argparse.ArgumentParser:
    """The `evokernel` parser with every command of COMMANDS."""
    p = argparse.ArgumentParser(prog="evokernel", description=__doc__.split("\n\n")[0],
                                epilog="`evokernel COMMAND --help` gives a command's flags.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers: Parsers = {}
    for add in COMMANDS:
        parsers.update(add(sub, parsers))
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, a scheduler, ``kill``) or SIGHUP (the terminal closed, an ssh
    session dropped), raised in the main thread like Ctrl-C so the same clean-up runs: build
    and GPU worker processes are stopped, not left orphaned."""


#: The signals that end a command with its clean-up (Ctrl-C's SIGINT raises KeyboardInterrupt).
ENDING = (signal.SIGTERM, signal.SIGHUP)


def _terminate(signum: int, frame: Any) -> None:
    raise Terminated()


def _handlers(handler: Any) -> dict[int, Any]:
    """Set ``handler`` for SIGINT and ENDING (the main thread only). Returns: the old ones."""
    return {s: signal.signal(s, handler) for s in (signal.SIGINT, *ENDING)}


def interrupted(command: str, error: KeyboardInterrupt, stopped_before: int) -> str:
    """The line for Ctrl-C or SIGTERM (``error``, a Terminated for SIGTERM) during ``command``,
    after stopping every build still in flight (evokernel.build.inflight.stop_all: builds run in
    sessions of their own, out of reach of a terminal's Ctrl-C, and the driver used to wait for
    them or leave them orphaned); it counts the builds stopped since ``stopped_before``
    (inflight.stopped_count() as the command began), by this and by Builders stopped as the
    command unwound. Never raises."""
    main_thread = threading.current_thread() is threading.main_thread()
    held = _handlers(signal.SIG_IGN) if main_thread else {}   # a second Ctrl-C cut it short
    try:
        inflight.stop_all()
    finally:
        for s, h in held.items():
            signal.signal(s, h)
    stopped = inflight.stopped_count() - stopped_before
    line = f"evokernel: {'terminated' if isinstance(error, Terminated) else 'interrupted'}"
    if stopped:
        line += (f"; stopped {stopped} build{'s' if stopped != 1 else ''} in flight; finished "
                 "builds stay in the cache")
        if command != "run":
            line += ", run the same command again to go on"
    if command == "run":
        line += "; resume with `evokernel run --resume RUN_DIR`"
    return line


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: sys.argv), run the command, return its exit status: 0, 1 (the
    command's own failure), 2 (bad input, no GPU), 130 (Ctrl-C), 143 (SIGTERM, SIGHUP), 141
    (a closed pipe)."""
    tokens = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(tokens)
    # the command's own tokens (after the root options and the command's name), for
    # options.given_options: which flags were given, also with their default value
    at = next((i for i, t in enumerate(tokens) if not t.startswith("-")), len(tokens))
    args.cli_argv = tokens[at + 1:]
    options.configure_logging(args.verbose)
    stopped_before = inflight.stopped_count()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _terminate) for s in ENDING}
    try:
        return args.func(args)
    except NoGPUError as e:
        print(str(e) if str(e).startswith("evokernel") else f"{options.NO_GPU_HELP}\n({e})",
              file=sys.stderr)
        return 2
    except EvokernelError as e:
        print(f"evokernel: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(interrupted(args.command, e, stopped_before), file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except BrokenPipeError:             # `evokernel problems | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:                # a path of the user's: missing, a file, no permission
        where = f"{e.filename}: " if e.filename else ""
        print(f"evokernel: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    finally:                            # a caller's own handlers back (main() called in-process:
        for s, h in previous.items():   # a test run's SIGTERM otherwise raised Terminated there)
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
