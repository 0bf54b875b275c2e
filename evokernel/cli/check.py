"""`evokernel check` and `evokernel suite`: gate and time kernel files, one problem or a set.

    format_result(res)    a kernel's verdict as the lines `evokernel check` prints
    cmd_check(args)       gate and time kernel files against one problem (--json: verdicts)
    cmd_suite(args)       one row per problem and fast_p: checked or searched here on the GPU,
                          or built from check_*.json files without one (--from-checks)

evokernel.cli.main parses the arguments, maps errors to exit status and runs the other commands;
this module uses its config and GPU helpers (so evokernel.cli.main imports it only when it builds
the parser).
"""
from __future__ import annotations

import argparse
from pathlib import Path

from evokernel.cli.main import (_eval_config, _llm_config, _require_gpu, _run_with_progress,
                           _search_config)
from evokernel.errors import EvokernelError


def format_result(res) -> str:
    """A kernel's verdict as the lines `evokernel check` prints."""
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    lines = [f"verdict:        {res.verdict.value} ({res.reason.value})",
             f"detail:         {res.detail}"]
    if res.distribution is not None and not res.accepted:
        lines.append(f"failed on:      distribution {res.distribution}, seed {res.seed}")
    lines += [f"norm ratio:     {num(res.norm_error_ratio, '.3g')} (candidate error / PyTorch "
              f"FP32 error; must be <= {num(res.tolerance_factor, 'g')})",
              f"max ratio:      {num(res.max_error_ratio, '.3g')}",
              f"eager ms:       {num(res.reference_ms, '.4f')}",
              f"compile ms:     {num(res.compile_ms, '.4f')}",
              f"candidate ms:   {num(res.candidate_ms, '.4f')}",
              f"speedup:        {res.speedup:.3f}x vs eager"
              + (f", {res.compile_speedup:.3f}x vs torch.compile" if res.compile_speedup else ""),
              f"floor ms:       {num(res.floor_ms, '.4f')}"
              + (f" (candidate at {res.pct_of_floor:.0f}% of floor)" if res.pct_of_floor else "")]
    for c in res.checks:
        lines.append(f"  check {c.distribution:<13} seed {c.seed}: norm {c.norm_ratio:8.3g}x "
                     f"max {c.max_ratio:8.3g}x  {'pass' if c.passed else 'FAIL'}")
    if res.flags:
        lines.append("flags:          " + ", ".join(res.flags))
    if res.log and not res.accepted:
        lines.append("log (tail):\n" + res.log[-3000:])
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    import json

    from evokernel.engine.factory import make_evaluator
    from evokernel.problem import load_problem
    from evokernel.records import Candidate

    problem = load_problem(args.problem)
    kernels = [Path(k) for k in args.kernel]
    sources = [_read_kernel(k) for k in kernels]
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise EvokernelError(f"--json {args.json}: its folder does not exist")
    config = _eval_config(args)                  # bad flags are named before the GPU check
    _require_gpu()
    cands = [Candidate(source=src, idea=f"file {k}", operator="check")
             for k, src in zip(kernels, sources)]
    evaluator = make_evaluator(problem, config)
    try:
        results = evaluator.evaluate(cands)
    finally:
        evaluator.close()
    info = evaluator.info
    print(f"problem:        {problem.name} ({problem.path})\ndevice:         {info.get('device')}"
          f" (torch {info.get('torch')}, CUDA {info.get('cuda')})")
    for k, cand, res in zip(kernels, cands, results):
        print(f"\nkernel:         {k} [{cand.id}]")
        print(format_result(res))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"problem": problem.name, "device": info,
             "kernels": [dict(r.to_dict(), kernel=str(k), speedup=r.speedup,
                              compile_speedup=r.compile_speedup, pct_of_floor=r.pct_of_floor)
                         for k, r in zip(kernels, results)]}, indent=2))
    return 0 if all(r.accepted for r in results) else 1


def _read_kernel(path: Path) -> str:
    """A kernel file's text. Raises: EvokernelError naming the file when it cannot be used."""
    if path.is_dir():
        raise EvokernelError(f"{path}: is a folder, not a kernel file")
    if not path.is_file():
        raise EvokernelError(f"{path}: no such kernel file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise EvokernelError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start})") \
            from e
    except OSError as e:
        raise EvokernelError(f"{path}: cannot read: {e.strerror}") from e


def cmd_suite(args: argparse.Namespace) -> int:
    from evokernel.report import suite
    if args.from_checks:
        if not Path(args.from_checks).is_dir():
            raise EvokernelError(f"{args.from_checks}: no such folder of check_*.json files")
        try:
            rows = suite.rows_from_checks(args.from_checks)
        except ValueError as e:
            raise EvokernelError(str(e)) from e
        if args.problems:   # problems named but never checked count against fast_p
            from evokernel.cli.suite_run import suite_problems
            have = {r.problem for r in rows}
            rows += [suite.missing_row(p.name, "no check file")
                     for p in suite_problems(args.problems) if p.name not in have]
    else:
        rows = _suite_on_gpu(args)
    md, js = suite.write(rows, args.output, title=args.title)
    print(md.read_text(), end="")
    print(f"\nwritten: {md} and {js}")
    return 0


def _suite_on_gpu(args: argparse.Namespace):
    from evokernel.config import RunConfig
    from evokernel.cli.suite_run import candidate_files, check_all, search_all, suite_problems

    if not args.problems:
        raise EvokernelError("suite: name a folder, files or built-in problems "
                             "(or --from-checks DIR)")
    problems = suite_problems(args.problems)
    if args.search:
        config = RunConfig(
            search=_search_config(args), evaluation=_eval_config(args), llm=_llm_config(args))
        _require_gpu()
        base = Path(args.output)
        run_root = base.parent / f"{base.stem}_runs"

        def run(problem, cfg):
            resume = (Path(cfg.run_dir) / "run.sqlite").exists()
            return _run_with_progress(problem, cfg, resume=resume, verbose=args.verbose)
        return search_all(problems, config, run_root, run=run)
    files = candidate_files(problems, args.kernels)
    eval_config = _eval_config(args)
    _require_gpu()
    return check_all(problems, files, eval_config)
