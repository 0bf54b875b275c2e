"""`evokernel check PROBLEM KERNEL...`: a kernel file's faults, its build, then on a GPU its gate
verdict and times.

    add_parser(sub)       the `check` subcommand
    cmd_check(args)       check kernel files against one problem
    format_result(res)    a kernel's verdict as the lines `check` prints

Order: the problem file is loaded (statically); each kernel file's own faults are named
(evokernel.cli.kernel_faults: syntax, no ModelNew, no build call, and the source scan's
lower-precision constructs as warnings); files with a fault are rejected without a build or a
GPU. With ``--build-only`` the other files are compiled for ``--arch`` without a GPU
(evokernel.cli.build_only); otherwise they go to the GPU to be built, gated and timed.
Exit status: 0 every file passed (was built, with --build-only), 1 one did not, 2 bad input.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from evokernel.cli import options
from evokernel.cli.kernel_faults import Fault, kernel_faults
from evokernel.errors import EvokernelError



def _arch_arg(text: str) -> str:
    """--arch, checked as it is parsed (a bad one was refused only after the build plan was
    printed for it)."""
    from evokernel.build.cache import arch_digits
    try:
        arch_digits(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text

def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `check` to the subparsers ``sub``; returns its parser."""
    c = sub.add_parser("check", help="check kernel files: faults, build, gate and times",
                       description="Name each kernel file's own faults, then gate and time it "
                       "on the GPU (or, with --build-only, compile it without one).")
    c.add_argument("problem", metavar="PROBLEM",
                   help="built-in problem name or KernelBench-format file the kernels solve")
    c.add_argument("kernel", metavar="KERNEL", nargs="+",
                   help="candidate files (each defines ModelNew and builds its CUDA)")
    c.add_argument("--build-only", action="store_true",
                   help="no GPU: name the files' faults and compile them, in parallel")
    c.add_argument("--arch", type=_arch_arg,
                   help="with --build-only: GPU arch X.Y to compile for (none: this "
                   "GPU's, else TORCH_CUDA_ARCH_LIST's last, else 9.0, the H200's)")
    c.add_argument("--json", help="also write the verdicts to this JSON file "
                   "(`suite --from-checks` reads it)")
    c.add_argument("--sanitize", action="store_true",
                   help="after the gate (GPU): one call under compute-sanitizer memcheck and "
                   "racecheck, and a determinism check (the same inputs several times); "
                   "a memcheck or racecheck error makes the exit status 1")
    c.add_argument("--robustness", action="store_true",
                   help="after the gate (GPU): error ratios on half, double and odd sizes and "
                   "on non-contiguous inputs, each marked pass, fail or 'shape not "
                   "supported' (information, not part of the verdict)")
    options.add_eval_arguments(c)
    c.set_defaults(func=cmd_check)
    return c


def format_result(res: Any) -> str:
    """A kernel's verdict (EvalResult) as the lines `evokernel check` prints."""
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    lines = [f"verdict:        {res.verdict.value} ({res.reason.value})",
             f"detail:         {res.detail}"]
    if res.distribution is not None and not res.accepted:
        lines.append(f"failed on:      distribution {res.distribution}, seed {res.seed}")
    lines += [f"norm ratio:     {num(res.norm_error_ratio, '.3g')} (candidate error / PyTorch "
              f"FP32 error; must be <= tolerance_factor {num(res.tolerance_factor, 'g')})",
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
    lines += audit_lines(res.precision_audit, res.flags)
    if res.flags:
        lines.append("flags:          " + ", ".join(res.flags))
    if res.log and not res.accepted:
        lines.append("log (tail):\n" + res.log[-3000:])
    return "\n".join(lines)


def audit_lines(findings: Sequence[Any], flags: Sequence[str]) -> list[str]:
    """The SASS precision audit (evokernel.build.sass) as lines: one per below-FP32 instruction
    found, or the one flag saying it found none or could not run; [] when no audit was made."""
    state = [f for f in flags if f.startswith(("sass_audit_unavailable", "sass_audit:"))]
    if findings:
        return ["SASS audit:     below-FP32 instructions (evidence; the gate's numbers decide):"] \
            + [f"  {f.kernel}: {f.opcode} x{f.count} ({f.kind.replace('_', ' ')}, "
               f"{f.precision})" for f in findings]
    return [f"SASS audit:     {state[0].split(':', 1)[1].strip()}"] if state else []


def cmd_check(args: argparse.Namespace) -> int:
    from evokernel.problem import load_problem

    problem = load_problem(args.problem)
    kernels = [Path(k) for k in args.kernel]
    sources = read_kernels(kernels)
    if args.json and args.build_only:
        raise EvokernelError("--json records gate verdicts, which --build-only does not reach")
    if args.arch and not args.build_only:
        raise EvokernelError("--arch is for --build-only (a GPU check builds for its GPU)")
    extra = [f for f, on in (("--sanitize", args.sanitize), ("--robustness", args.robustness))
             if on]
    if extra and args.build_only:
        raise EvokernelError(f"{' and '.join(extra)} {'runs' if len(extra) == 1 else 'run'} "
                             "the kernel on a GPU, which --build-only does not use")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise EvokernelError(f"--json {args.json}: its folder does not exist")
    config = options.eval_config(args)           # bad flags are named before the GPU check
    faults = {k: kernel_faults(k, src) for k, src in zip(kernels, sources)}
    for k in kernels:
        for f in faults[k]:
            print(f)
    good = [(k, src) for k, src in zip(kernels, sources)
            if not any(f.severity == "error" for f in faults[k])]
    if args.build_only:
        return _build_only(good, len(kernels), args.arch, config)
    if not good:
        print(f"no kernel file to gate: every file has a fault ({len(kernels)} named above)")
        _write_json(args.json, problem, {}, dict(zip(kernels, sources)), faults, {})
        return 1
    from evokernel.cli.extra_checks import require_gpu_for
    require_gpu_for(extra)
    options.require_gpu(args)
    results, info = _evaluate(problem, good, config, options.placement(args))
    print(f"problem:        {problem.name} ({problem.path})\ndevice:         {info.get('device')}"
          f" (torch {info.get('torch')}, CUDA {info.get('cuda')})")
    sanitize_failed, reports = False, {}
    for k in kernels:
        print(f"\nkernel:         {k}")
        print(format_result(results[k]) if k in results else
              "verdict:        reject (named above, not sent to the GPU)")
        if k in results and extra and results[k].reason.value not in NOT_RUNNABLE:
            failed, reports[k] = extra_reports(args, problem, k, config)
            sanitize_failed |= failed
    _write_json(args.json, problem, info, dict(zip(kernels, sources)), faults, results,
                reports)
    return 0 if len(results) == len(kernels) and all(r.accepted for r in results.values()) \
        and not sanitize_failed else 1


#: Verdicts after which there is no kernel to run for --sanitize or --robustness.
NOT_RUNNABLE = ("no_code", "build_error", "build_timeout", "load_error")


def extra_reports(args: argparse.Namespace, problem: Any, kernel: Path, config: Any
                   ) -> tuple[bool, dict[str, Any]]:
    """Print --sanitize's and --robustness's reports for one kernel (evokernel.cli.extra_checks).
    Returns: (whether compute-sanitizer reported an error, the reports as JSON-ready data)."""
    import dataclasses
    from evokernel.build.builder import device_arch
    from evokernel.cli.extra_checks import robustness, sanitize_kernel
    from evokernel.gate.robust import format_rows
    from evokernel.gate.sanitize import format_sanitize
    arch, failed, data = device_arch(), False, {}
    if args.sanitize:
        result = sanitize_kernel(Path(problem.path), kernel, config.cache_path, arch)
        print("sanitize (compute-sanitizer, then the same inputs 5 times):")
        print("\n".join("  " + line for line in format_sanitize(result)))
        failed = result.failed
        data["sanitize"] = dict(dataclasses.asdict(result), failed=failed)
    if args.robustness:
        rows = robustness(Path(problem.path), kernel, config.cache_path, arch,
                          tolerance=config.gate.tolerance_factor)
        print("robustness (information, not part of the verdict):")
        print("\n".join(format_rows(rows)) if isinstance(rows, list) else f"  {rows}")
        data["robustness"] = [dataclasses.asdict(r) for r in rows] \
            if isinstance(rows, list) else rows
    return failed, data


def _evaluate(problem: Any, files: Sequence[tuple[Path, str]], config: Any,
              placement: dict[str, Any] | None = None
              ) -> tuple[dict[Path, Any], dict[str, Any]]:
    """Gate and time each (path, source) on the GPU (``placement``: make_evaluator's
    ``devices`` and ``dask``). Returns: results by path, device info."""
    from evokernel.engine.factory import make_evaluator
    from evokernel.records import Candidate
    cands = [Candidate(source=src, idea=f"file {k}", operator="check") for k, src in files]
    evaluator = make_evaluator(problem, config, **(placement or {}))
    try:
        results = evaluator.evaluate(cands)
    finally:
        evaluator.close()
    return {k: r for (k, _), r in zip(files, results)}, evaluator.info


def _build_only(files: list[tuple[Path, str]], total: int, arch: str | None, config: Any) -> int:
    """Compile ``files`` without a GPU and print one line per file (its errors under it)."""
    from evokernel.cli.build_only import build_kernels, default_arch
    where = "--arch"
    if arch is None:
        arch, where = default_arch()
    if not files:
        print(f"nothing to build: every file has a fault ({total} named above)")
        return 1
    print(f"building {len(files)} kernel file(s) for sm_{arch.replace('.', '')} ({where}); "
          "no GPU is used")
    try:
        reports = build_kernels(files, arch, config)
    except ValueError as e:
        raise EvokernelError(f"--arch {arch}: {e}") from e
    for r in reports:
        state = "built" if r.ok else "FAILED"
        print(f"{r.path}: {state} in {r.build_s:.1f} s" + (" (from the cache)" if r.cache_hit
                                                            else ""))
        for e in r.errors:
            print(f"  {e}")
        for line in audit_lines(r.precision_audit, r.flags):
            print(f"  {line}")
    built = sum(r.ok for r in reports)
    print(f"{built} of {total} kernel file(s) built" + ("" if built == total else
                                                         f"; {total - built} did not"))
    return 0 if built == total else 1


def _write_json(path: str | None, problem: Any, info: dict[str, Any],
                sources: dict[Path, str], faults: dict[Path, list[Fault]],
                results: dict[Path, Any], reports: dict[Path, Any] | None = None) -> None:
    """``check --json``: each file's verdict (with its --sanitize and --robustness reports,
    when made); a file with a fault is a rejection naming it."""
    if not path:
        return
    from evokernel.records import Candidate, EvalResult
    entries = []
    for k, src in sources.items():
        r = results.get(k)
        if r is None:
            first = next(f for f in faults[k] if f.severity == "error")
            r = EvalResult.failure(Candidate(source=src).id, first.reason, str(first))
        entries.append(dict(r.to_dict(), kernel=str(k), speedup=r.speedup,
                            compile_speedup=r.compile_speedup, pct_of_floor=r.pct_of_floor,
                            faults=[str(f) for f in faults[k]], **(reports or {}).get(k, {})))
    Path(path).write_text(json.dumps({"problem": problem.name, "device": info,
                                      "kernels": entries}, indent=2))


def read_kernels(paths: Sequence[Path]) -> list[str]:
    """Each kernel file's text, in order.

    Raises: EvokernelError naming every file that cannot be used (not only the first)."""
    sources, errors = [], []
    for path in paths:
        try:
            sources.append(read_kernel(path))
        except EvokernelError as e:
            errors.append(str(e))
    if len(errors) > 1:
        raise EvokernelError("kernel files that cannot be used:\n  " + "\n  ".join(errors))
    if errors:
        raise EvokernelError(errors[0])
    return sources


def read_kernel(path: Path) -> str:
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
