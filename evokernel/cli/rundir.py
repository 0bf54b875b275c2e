"""`evokernel show`, `report` and `export`: read one run directory (read-only; no GPU needed).

    add_parsers(sub)   the three subcommands
    cmd_show, cmd_report, cmd_export

`export RUN_DIR -o FILE` writes the best kernel as a candidate file; `export RUN_DIR --op NAME
-o DIR` writes it as an installable PyTorch custom operator package (evokernel.report.export_op).

A folder whose run store is missing, empty, foreign or corrupt is refused by evokernel.runs.store
with a ConfigError naming the file (exit status 2).
"""
from __future__ import annotations

import argparse
from pathlib import Path
import sys
from typing import Any

from evokernel.errors import EvokernelError

RUN_DIR_HELP = "a run directory (holds run.sqlite and config.json), finished or still running"


def add_parsers(sub: Any) -> dict[str, argparse.ArgumentParser]:
    """Add `show`, `report` and `export` to the subparsers ``sub``; returns them by name."""
    s = sub.add_parser("show", help="summarize a run directory",
                       description="A run's summary, the best kernel's lineage, its generations "
                       "and its failures by kind.")
    s.add_argument("run_dir", metavar="RUN_DIR", help=RUN_DIR_HELP)
    s.set_defaults(func=cmd_show)

    rp = sub.add_parser("report", help="write a Markdown + HTML report with plots of a run")
    rp.add_argument("run_dir", metavar="RUN_DIR", help=RUN_DIR_HELP)
    rp.add_argument("-o", "--output",
                    help="report folder (none: ./NAME-report, NAME the run folder's name)")
    rp.set_defaults(func=cmd_report)

    ex = sub.add_parser("export", help="write a run's best kernel as a candidate file, or "
                        "(--op NAME) as a PyTorch custom operator package",
                        description="Without --op: the best kernel as a standalone candidate "
                        "file. With --op NAME: a package (folder) holding the op "
                        "evokernel::NAME (torch.library.custom_op with a fake implementation "
                        "for torch.compile, the problem's shapes and dtypes checked), a usage "
                        "example and the `evokernel check` commands that reproduce its verdict.")
    ex.add_argument("run_dir", metavar="RUN_DIR", help=RUN_DIR_HELP)
    ex.add_argument("-o", "--output", required=True,
                    help="the kernel file to write; with --op, the package folder (new or empty)")
    ex.add_argument("--op", metavar="NAME",
                    help="export as the custom operator evokernel::NAME (lower-case, e.g. softmax)")
    ex.add_argument("--sanitize", action="store_true",
                    help="with --op, on a GPU: also run the kernel under compute-sanitizer "
                    "memcheck and racecheck and check its determinism, kept in DIR/checks.md")
    ex.add_argument("--robustness", action="store_true",
                    help="with --op, on a GPU: also the robustness report (other sizes, "
                    "non-contiguous inputs), kept in DIR/checks.md")
    ex.set_defaults(func=cmd_export)
    return {"show": s, "report": rp, "export": ex}


def cmd_show(args: argparse.Namespace) -> int:
    from evokernel.report.show import show
    show(args.run_dir)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from evokernel.report.write import write_report
    md = write_report(args.run_dir, args.output)
    print(f"report: {md} and {md.with_suffix('.html')} (plots beside them)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Exit status 0 when a kernel was written, 1 when the run accepted none."""
    from evokernel.engine.evaluator import static_check
    from evokernel.records import Candidate
    from evokernel.runs.store import RunStore

    refuse_inside_run(args.run_dir, args.output)
    if args.op:
        return _export_op(args)
    if args.sanitize or args.robustness:
        raise EvokernelError("--sanitize and --robustness go with --op (they check the "
                             "exported package's kernel)")
    store = RunStore(args.run_dir, read_only=True)
    try:
        out = store.export_best(args.output)
        problem = store.meta().get("problem", {}).get("name", "PROBLEM")
    finally:
        store.close()
    if out is None:
        print(f"evokernel: {args.run_dir}: no kernel was accepted, nothing to export",
              file=sys.stderr)
        return 1
    rejected = static_check(Candidate(source=out.read_text()))
    if rejected is not None:
        raise EvokernelError(f"{out}: the exported file does not load: {rejected.detail}")
    print(f"exported: {out}  (check it: evokernel check {problem} {out})")
    return 0


def refuse_inside_run(run_dir: str | Path, output: str | Path) -> None:
    """Raises EvokernelError when ``output`` is inside ``run_dir`` (its store, problem copy or
    kernels would be overwritten: `show` found the run gone after ``-o RUN/run.sqlite``), or is
    an existing file that is not a Python file of ours to replace."""
    run, out = Path(run_dir).resolve(), Path(output).resolve()
    if out == run or run in out.parents:
        raise EvokernelError(f"{output}: inside the run folder {run_dir}; export writes "
                             "outside it, so the run stays as it was")
    if out.is_file() and out.suffix != ".py":
        raise EvokernelError(f"{output}: an existing file that is not a .py kernel file; "
                             "not overwritten")


def _export_op(args: argparse.Namespace) -> int:
    """`export --op`: the package, then the lines that say how to use and check it."""
    from evokernel.cli.extra_checks import require_gpu_for
    from evokernel.report.export_op import export_op
    extra = [f for f, on in (("--sanitize", args.sanitize), ("--robustness", args.robustness))
             if on]
    require_gpu_for(extra, command="export --op")          # before anything is written
    out = export_op(args.run_dir, args.op, args.output)
    if out is None:
        print(f"evokernel: {args.run_dir}: no kernel was accepted, nothing to export",
              file=sys.stderr)
        return 1
    print(f"exported: {out}  (the op evokernel::{args.op}; package {out / args.op})\n"
          f"  use it:   cd {out} && python example.py      (or pip install {out})\n"
          f"  check it: evokernel check {out / args.op / 'reference.py'} "
          f"{out / args.op / 'kernel.py'} [--sanitize] [--robustness]")
    if extra:
        return _package_checks(args, out / args.op, out / "checks.md")
    return 0


def _package_checks(args: argparse.Namespace, package: Any, report: Any) -> int:
    """`export --op --sanitize/--robustness`: run them on the package's kernel, print them and
    keep them in ``report``. Returns 1 when compute-sanitizer reported an error, else 0."""
    from evokernel.build.builder import device_arch
    from evokernel.cli.extra_checks import robustness, sanitize_kernel
    from evokernel.config import EvalConfig
    from evokernel.gate.robust import format_rows
    from evokernel.gate.sanitize import format_sanitize
    config, arch = EvalConfig(), device_arch()
    problem, kernel = package / "reference.py", package / "kernel.py"
    lines, failed = ["# Checks of the exported kernel", ""], False
    if args.sanitize:
        result = sanitize_kernel(problem, kernel, config.cache_path, arch)
        lines += ["## --sanitize", "", *("    " + x for x in format_sanitize(result)), ""]
        failed = result.failed
    if args.robustness:
        rows = robustness(problem, kernel, config.cache_path, arch,
                          tolerance=config.gate.tolerance_factor)
        lines += ["## --robustness (information, not part of the verdict)", "",
                  *(("  " + x for x in format_rows(rows)) if isinstance(rows, list)
                    else [f"    {rows}"]), ""]
    report.write_text("\n".join(lines))
    print("\n".join(lines[2:]) + f"\n(kept in {report})")
    return 1 if failed else 0
