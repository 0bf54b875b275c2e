"""An independent timing of a run's best kernel: ``triton.testing.do_bench`` (median of its
repetitions, in ms) of the kernel, of the PyTorch reference (eager) and of torch.compile of the
reference, in one process, outside evokernel's engine and timing code (issue 21 asks for this
cross-check of every headline number).

    python experiments/do_bench_best.py RUN_DIR [--json OUT.json] [--no-compile]

RUN_DIR is a run directory (its problem.py and the best.py that the run exported; see
``evokernel export``). The JSON names the kernel it timed (``candidate_id``, from best.py's
header), so experiments/frontier_table.py can refuse a timing of another kernel. Strict FP32 as in the gate: TF32 is off for matmul and cuDNN. The outputs
are compared once (the max abs difference is printed) but this is a timing, not the gate: run
``evokernel check`` for a verdict. It imports the kernel file, so it builds it (load_inline) and
runs it in this process, unsandboxed: use it on kernels that passed the gate.
Needs a CUDA GPU and triton. Exit status 2 on bad input (a missing file), with one line.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, help="write the times here too")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = ap.parse_args(argv)
    if not args.run_dir.is_dir():
        print(f"do_bench_best: {args.run_dir}: no such folder", file=sys.stderr)
        return 2
    problem_file, best_file = args.run_dir / "problem.py", args.run_dir / "best.py"
    for f in (problem_file, best_file):
        if not f.is_file():
            print(f"do_bench_best: {f}: missing (a run directory with an accepted kernel "
                  "holds problem.py and best.py)", file=sys.stderr)
            return 2
    import torch
    if not torch.cuda.is_available():
        print("do_bench_best: needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        import triton.testing
    except ImportError:
        print("do_bench_best: needs triton (pip install triton)", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem, kernel = load(problem_file, "problem_under_test"), load(best_file, "best_kernel")
    init = problem.get_init_inputs() if hasattr(problem, "get_init_inputs") else []
    torch.manual_seed(0)
    ref = problem.Model(*init).cuda().eval()
    torch.manual_seed(0)
    new = kernel.ModelNew(*init).cuda().eval()
    torch.manual_seed(0)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    fns = {"eager": ref, "kernel": new}
    if not args.no_compile:
        fns["torch.compile"] = torch.compile(ref)
    with torch.no_grad():
        outs = {k: f(*inputs) for k, f in fns.items()}
        diff = (outs["kernel"].float() - outs["eager"].float()).abs().max().item()
        ms = {k: triton.testing.do_bench(lambda f=f: f(*inputs), warmup=100, rep=500,
                                         return_mode="median") for k, f in fns.items()}
    found = re.search(r"^# candidate ([0-9a-f]+),", best_file.read_text(), re.M)
    row = {"run_dir": str(args.run_dir), "candidate_id": found.group(1) if found else None,
           "device": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": getattr(triton, "__version__", "?"), "ms": ms, "max_abs_diff": diff,
           "speedup_vs_eager": ms["eager"] / ms["kernel"],
           "speedup_vs_compile": (ms["torch.compile"] / ms["kernel"]
                                  if "torch.compile" in ms else None)}
    for k, v in ms.items():
        print(f"{k:14s} {v:.4f} ms (triton.testing.do_bench, median)")
    print(f"kernel vs eager {row['speedup_vs_eager']:.3f}x"
          + (f", vs torch.compile {row['speedup_vs_compile']:.3f}x"
             if row["speedup_vs_compile"] else "") + f"; max |kernel - eager| {diff:.3g}")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
