"""The process `check --sanitize` and `check --robustness` run a kernel in, apart from the check
itself (a fault there, or compute-sanitizer around it, leaves the check's process alone).

    python -m evokernel.gate.target PROBLEM KERNEL --mode MODE --json OUT [--cache DIR]
        [--arch X.Y] [--repeat N] [--seed S] [--tolerance T]

MODE ``once``: one call of ``ModelNew`` on the problem's inputs (what compute-sanitizer
watches); ``repeat``: N calls on the same inputs, compared bit for bit
(evokernel.gate.sanitize.compare_runs); ``robust``: the robustness report
(evokernel.gate.robust). The kernel's extension comes from the build cache (``--cache``, built
there when missing). OUT gets {"ok": true, ...the mode's result} or {"ok": false, "error": ...};
the exit status is 0 when OUT was written.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def _load(problem_path: Path, kernel_path: Path, cache: Path, arch: str) -> tuple[Any, Any]:
    """(problem module, candidate module), the candidate's load_inline through the cache."""
    from evokernel.build.cache import load_candidate
    from evokernel.problem import exec_module
    problem = exec_module(problem_path.read_text(encoding="utf-8"), "evokernel_target_problem",
                          str(problem_path))
    kernel = load_candidate(kernel_path.read_text(encoding="utf-8"), "evokernel_target_kernel",
                            cache, arch)
    return problem, kernel


def _cuda(inputs: list[Any]) -> list[Any]:
    import torch
    return [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]


def _progress(what: str, t0: float = time.perf_counter()) -> None:
    """One line on stderr, with the seconds since this module was imported: when a run under
    compute-sanitizer is cut by its timeout, its output says how far it got."""
    print(f"evokernel.gate.target: {what} at {time.perf_counter() - t0:.1f} s", file=sys.stderr,
          flush=True)


def run_mode(args: argparse.Namespace) -> dict[str, Any]:
    """The mode's result as a JSON-ready dict (see the module docstring)."""
    import torch

    from evokernel.gate.reference import align_parameters
    if not torch.cuda.is_available():     # before the kernel is built: every mode runs it
        raise RuntimeError("no CUDA GPU is visible to this process; the kernel runs on one")
    _progress("torch imported")
    problem, kernel = _load(Path(args.problem), Path(args.kernel), Path(args.cache), args.arch)
    _progress("kernel loaded")
    if args.mode == "robust":
        from evokernel.gate.robust import robustness_report
        rows = robustness_report(problem, lambda init: kernel.ModelNew(*init),
                                 tolerance=args.tolerance, seed=args.seed)
        return {"rows": [dataclasses.asdict(r) for r in rows]}
    torch.manual_seed(args.seed)
    init = list(problem.get_init_inputs())
    inputs = _cuda(list(problem.get_inputs()))
    torch.manual_seed(args.seed)
    reference = problem.Model(*init)
    torch.manual_seed(args.seed)
    model = kernel.ModelNew(*init)
    if reference.state_dict():
        align_parameters(reference, model)
    model = model.cuda().eval()
    _progress("inputs and model on the GPU")
    outputs = []
    with torch.no_grad():
        for _ in range(1 if args.mode == "once" else args.repeat):
            outputs.append(model(*inputs))
            torch.cuda.synchronize()
            _progress(f"call {len(outputs)} done")
    if args.mode == "once":
        return {"calls": 1}
    from evokernel.gate.sanitize import compare_runs
    return {"determinism": compare_runs([o.cpu() if isinstance(o, torch.Tensor) else o
                                         for o in outputs])}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evokernel.gate.target",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("kernel")
    p.add_argument("--mode", choices=("once", "repeat", "robust"), required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--cache", help="the build cache (none: evokernel's default)")
    p.add_argument("--arch", default="9.0")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=16.0)
    return p


def main(argv: list[str] | None = None) -> int:
    from evokernel.jsonfile import write_json_atomic
    args = parser().parse_args(argv)
    if args.cache is None:
        from evokernel.config import default_cache_dir
        args.cache = str(default_cache_dir())
    try:
        out = {"ok": True, **run_mode(args)}
    except BaseException as e:  # noqa: BLE001 - the kernel's failure is the result
        out = {"ok": False, "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()[-3000:]}
    write_json_atomic(Path(args.json), out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
