"""The ``evokernel`` command line.

    evokernel run [PROBLEM]          search for faster kernels (default problem: softmax)
    evokernel check PROBLEM KERNEL   gate and time one kernel file
    evokernel problems [PATH]        list and validate problems (works without a GPU)
    evokernel show RUN_DIR           summarize a run (finished or still running)

Exit status: 0 success (check: accepted), 1 a kernel was rejected, 2 bad input or machine.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from loguru import logger

from evokernel.errors import EvokernelError, NoGPUError

NO_GPU_HELP = (
    "evokernel: this command needs a CUDA GPU, and PyTorch sees none here.\n"
    "  Needed: an NVIDIA GPU with a working driver, a CUDA build of PyTorch, and nvcc\n"
    "  (CUDA_HOME) to build kernels. The project is tuned on an H200 (sm_90).\n"
    "  What works without a GPU: `make test` (the CPU test suite), `evokernel problems`\n"
    "  (load and validate problem files), and `evokernel show RUN_DIR` on a copied run.")


def _configure_logging(verbose: bool) -> None:
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if verbose else "INFO",
               format="<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}")


def _eval_config(args: argparse.Namespace):
    from evokernel.config import EvalConfig, GateConfig
    gate = GateConfig(tolerance_factor=args.tolerance,
                      distributions=tuple(args.distributions.split(",")),
                      seeds=tuple(range(args.gate_seeds)))
    return EvalConfig(gate=gate, measure_compile=not args.no_compile_baseline,
                      baseline="compile" if args.vs_compile else "eager")


def _require_gpu() -> None:
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_HELP)


def cmd_run(args: argparse.Namespace) -> int:
    from evokernel.config import LLMConfig, RunConfig, SearchConfig
    from evokernel.problem import load_problem
    from evokernel.search import Evolution

    _require_gpu()
    if args.resume:
        from evokernel.store import RunStore
        store = RunStore(args.resume)
        config = store.config()
        problem = load_problem(Path(args.resume) / "problem.py", seed=None)
        problem = dataclasses.replace(problem, name=store.meta()["problem"]["name"])
        config = dataclasses.replace(config, run_dir=args.resume)
    else:
        problem = load_problem(args.problem, seed=args.seed_kernel)
        config = RunConfig(
            problem=str(args.problem), run_dir=args.run_dir,
            search=SearchConfig(population_size=args.population, generations=args.generations,
                                offspring_per_generation=args.offspring, seed=args.seed),
            evaluation=_eval_config(args),
            llm=LLMConfig(model=args.model, api_base=args.api_base,
                          max_total_tokens=args.max_tokens, max_cost_usd=args.max_cost_usd))
    if config.llm.model is None:
        print("evokernel: no --model given: searching with the LLM-free tune operator only "
              "(it varies the constants the seed kernel marks with `// tune:`)")

    def report(g) -> None:
        line = (f"gen {g.generation:>3}: best {g.best_speedup:6.3f}x  valid {g.valid}/{g.total}"
                f"  best={g.best_id}")
        if config.llm.model:
            line += f"  tokens {g.tokens}  cost ${g.cost_usd:.4f}"
        print(line, flush=True)

    evo = Evolution(problem, config, on_generation=report)
    result = evo.run(resume=bool(args.resume))
    print(f"run directory: {result.run_dir}  ({result.stopped})")
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


def format_result(res) -> str:
    """A kernel's verdict as the lines `evokernel check` prints."""
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    lines = [f"verdict:        {res.verdict.value} ({res.reason.value})",
             f"detail:         {res.detail}"]
    if res.distribution is not None:
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

    from evokernel.evaluator import CudaEvaluator
    from evokernel.problem import load_problem
    from evokernel.records import Candidate

    problem = load_problem(args.problem)
    kernels = [Path(k) for k in args.kernel]
    for k in kernels:
        if not k.is_file():
            raise EvokernelError(f"{k}: no such kernel file")
    _require_gpu()
    cands = [Candidate(source=k.read_text(), idea=f"file {k}", operator="check") for k in kernels]
    evaluator = CudaEvaluator(problem, _eval_config(args))
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


def cmd_problems(args: argparse.Namespace) -> int:
    from evokernel.problem import builtin_names, load_problem, load_problems
    problems = load_problems(args.path) if args.path else [load_problem(n)
                                                            for n in builtin_names()]
    for p in problems:
        print(f"{p.name:<28} seed kernel: {'yes' if p.seed_source else 'no ':<4} {p.path}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from evokernel.store import RunStore
    store = RunStore(args.run_dir)
    meta = store.meta()
    dev = meta.get("device", {})
    print(f"run {store.run_dir}: problem {meta.get('problem', {}).get('name')}, device "
          f"{dev.get('device')}, torch {dev.get('torch')}, CUDA {dev.get('cuda')}")
    for g in store.generations():
        print(f"gen {g['generation']:>3}: best {g['best_speedup']:6.3f}x  "
              f"valid {g['valid']}/{g['total']}")
    best = store.best()
    if best:
        cand, res = best
        print(f"best {cand.id}: {res.speedup:.3f}x ({res.reference_ms:.4f} -> "
              f"{res.candidate_ms:.4f} ms), idea: {cand.idea.splitlines()[0] if cand.idea else '-'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evokernel", description=__doc__.split("\n\n")[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    def eval_args(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--tolerance", type=float, default=16.0,
                        help="error factor over PyTorch's own FP32 error (default 16)")
        sp.add_argument("--distributions", default="problem,offset",
                        help="input distributions to gate on, comma-separated "
                             "(problem,offset,large_scale,small_scale,heavy_tailed)")
        sp.add_argument("--gate-seeds", type=int, default=1, help="random seeds per distribution")
        sp.add_argument("--no-compile-baseline", action="store_true",
                        help="skip timing torch.compile (saves its compile time)")
        sp.add_argument("--vs-compile", action="store_true",
                        help="fitness = speedup over torch.compile instead of eager")

    r = sub.add_parser("run", help="search for faster kernels")
    r.add_argument("problem", nargs="?", default="softmax",
                   help="built-in name or KernelBench-format file (default: softmax)")
    r.add_argument("--model", help="litellm model, provider/name (e.g. openai/gpt-5, "
                   "anthropic/claude-sonnet-4-5, ollama/qwen2.5-coder); none: LLM-free")
    r.add_argument("--api-base", help="endpoint for local vLLM / Ollama / proxies")
    r.add_argument("--population", type=int, default=4, help="population size (mu)")
    r.add_argument("--offspring", type=int, default=8, help="operator calls per generation")
    r.add_argument("--generations", type=int, default=3)
    r.add_argument("--seed", type=int, default=0, help="search RNG seed")
    r.add_argument("--seed-kernel", help="seed kernel file (default: seeds/<problem>.py)")
    r.add_argument("--run-dir", help="run directory (default: runs/<problem>-<time>)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run")
    r.add_argument("--max-tokens", type=int, help="stop when LLM tokens exceed this")
    r.add_argument("--max-cost-usd", type=float, help="stop when LLM cost exceeds this")
    eval_args(r)
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("check", help="gate and time one kernel file")
    c.add_argument("problem")
    c.add_argument("kernel", nargs="+", help="one or more candidate files")
    c.add_argument("--json", help="also write the verdicts to this JSON file")
    eval_args(c)
    c.set_defaults(func=cmd_check)

    pr = sub.add_parser("problems", help="list and validate problem files")
    pr.add_argument("path", nargs="?", help="a problem file or folder (default: built-ins)")
    pr.set_defaults(func=cmd_problems)

    s = sub.add_parser("show", help="summarize a run directory")
    s.add_argument("run_dir")
    s.set_defaults(func=cmd_show)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return args.func(args)
    except NoGPUError as e:
        print(str(e) if str(e).startswith("evokernel") else f"{NO_GPU_HELP}\n({e})",
              file=sys.stderr)
        return 2
    except EvokernelError as e:
        print(f"evokernel: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evokernel: interrupted; resume with `evokernel run --resume RUN_DIR`",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
