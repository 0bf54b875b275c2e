"""evokernel: evolve CUDA kernels that beat PyTorch, under a strict FP32 precision gate.

    evokernel run [PROBLEM]          search for faster kernels (default problem: softmax)
    evokernel check PROBLEM KERNEL   gate and time one kernel file
    evokernel problems [PATH]        list and validate problems (works without a GPU)
    evokernel show RUN_DIR           summarize a run (finished or still running)
    evokernel report RUN_DIR         write a Markdown + HTML report with plots
    evokernel export RUN_DIR -o F    write the best kernel as a standalone candidate file
    evokernel suite PROBLEMS...      check or search a problem set; fast_p table
    evokernel bench                  measure the evaluation engine itself

Exit status: 0 success (check: accepted; export: a kernel was written), 1 a kernel was
rejected or none was accepted, 2 bad input or machine.

This module parses the arguments (build_parser), maps errors to exit status (main) and
runs the other commands; `check` and `suite` live in evokernel.cli.check.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from loguru import logger

from evokernel.errors import EvokernelError, NoGPUError

NO_GPU_HELP = (
    "evokernel: this command needs a CUDA GPU, and PyTorch sees none here.\n"
    "  Needed: an NVIDIA GPU with a working driver, a CUDA build of PyTorch, and nvcc\n"
    "  (CUDA_HOME) to build kernels. The project is tuned on an H200 (sm_90).\n"
    "  What works without a GPU: `make test` (the CPU test suite), `evokernel problems`\n"
    "  (load and validate problem files), and `evokernel show`, `report` and `export` on a\n"
    "  copied run, and `evokernel suite --from-checks DIR`.")


def _configure_logging(verbose: bool, sink=None) -> None:
    """Log to stderr (or ``sink``, e.g. a live display's) at INFO, or DEBUG when verbose."""
    logger.remove()
    logger.add(sink or sys.stderr, level="DEBUG" if verbose else "INFO",
               colorize=None if sink is None else True,
               format="<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}")


def _eval_config(args: argparse.Namespace):
    from evokernel.config import EvalConfig, GateConfig
    from evokernel.errors import ConfigError
    if args.gate_seeds < 1:
        raise ConfigError(f"--gate-seeds must be >= 1, got {args.gate_seeds}")
    gate = GateConfig(tolerance_factor=args.tolerance,
                      distributions=tuple(args.distributions.split(",")),
                      seeds=tuple(range(args.gate_seeds)))
    return EvalConfig(gate=gate, measure_compile=not args.no_compile_baseline,
                      baseline="compile" if args.vs_compile else "eager",
                      require_sandbox=getattr(args, "require_sandbox", False))


def _search_config(args: argparse.Namespace):
    """SearchConfig from `run`'s or `suite --search`'s flags; the island and LLM-operator
    settings `suite` has no flags for keep SearchConfig's defaults."""
    from evokernel.config import SearchConfig
    optional = {key: getattr(args, flag) for key, flag in (
        ("islands", "islands"), ("migration_interval", "migration_interval"),
        ("migrants", "migrants"), ("ideas_per_call", "ideas"),
        ("implementations_per_idea", "implementations")) if hasattr(args, flag)}
    return SearchConfig(population_size=args.population, generations=args.generations,
                        offspring_per_generation=args.offspring, seed=args.seed, **optional)


def _llm_config(args: argparse.Namespace):
    from evokernel.config import LLMConfig
    return LLMConfig(model=args.model, api_base=args.api_base,
                     max_total_tokens=args.max_tokens, max_cost_usd=args.max_cost_usd)


def _require_gpu() -> None:
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_HELP)


def cmd_run(args: argparse.Namespace) -> int:
    from evokernel.config import RunConfig
    from evokernel.problem import load_problem

    if args.resume:
        from evokernel.runs.store import RunStore
        given = _explicit_run_flags(args)
        if given:
            raise EvokernelError(f"--resume continues {args.resume} with its stored config.json;"
                                 f" drop {', '.join(given)} (or start a new run)")
        store = RunStore(args.resume, read_only=True)
        config = store.config()
        run_dir = Path(args.resume)
        seed = run_dir / "seed.py"
        problem = load_problem(run_dir / "problem.py", seed=seed if seed.is_file() else None)
        problem = dataclasses.replace(problem, name=store.meta()["problem"]["name"])
        config = dataclasses.replace(config, run_dir=args.resume)
    else:
        problem = load_problem(args.problem, seed=args.seed_kernel)
        config = RunConfig(
            problem=str(args.problem), run_dir=args.run_dir,
            search=_search_config(args), evaluation=_eval_config(args), llm=_llm_config(args))
    _require_gpu()   # after the arguments and the problem are known to be good
    if config.llm.model is None:
        print("evokernel: no --model given: searching with the LLM-free tune operator only "
              "(it varies the constants the seed kernel marks with `// tune:`)")
    result = _run_with_progress(problem, config, resume=bool(args.resume),
                                verbose=args.verbose)
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


def _explicit_run_flags(args: argparse.Namespace) -> list[str]:
    """The `run` options given on the command line with a value other than their default."""
    defaults = vars(build_parser().parse_args(["run"]))
    skip = {"resume", "verbose", "func", "command"}
    return [f"--{k.replace('_', '-')}" if k != "problem" else "PROBLEM"
            for k, v in vars(args).items() if k not in skip and v != defaults.get(k)]


def _run_with_progress(problem, config, *, resume: bool, verbose: bool):
    """Run one search with the live progress display (plain lines when stdout is not a
    terminal); loguru prints above the display while it is live."""
    from evokernel.engine.evaluator import CudaEvaluator
    from evokernel.cli.progress import ProgressEvaluator, SearchProgress
    from evokernel.search.evolution import Evolution

    evo: Evolution | None = None
    progress = SearchProgress(
        generations=config.search.generations, max_tokens=config.llm.max_total_tokens,
        max_cost_usd=config.llm.max_cost_usd, baseline=config.evaluation.baseline,
        usage=lambda: evo.llm.usage if evo is not None and evo.llm is not None else None)
    evaluator = ProgressEvaluator(lambda: CudaEvaluator(problem, config.evaluation), progress)
    evo = Evolution(problem, config, evaluator=evaluator,
                    on_generation=progress.generation_done)
    first = 0
    if resume:
        from evokernel.runs.store import RunStore
        store = RunStore(config.run_dir, read_only=True)
        done = store.generations()
        store.close()
        first = done[-1]["generation"] + 1 if done else 0
    try:
        with progress:
            if progress.live:
                _configure_logging(verbose, sink=progress.log_sink)
            progress.begin(first)
            return evo.run(resume=resume)
    finally:
        _configure_logging(verbose)
        evaluator.close()


def cmd_problems(args: argparse.Namespace) -> int:
    from evokernel.problem import builtin_names, load_problem, load_problems
    problems = load_problems(args.path) if args.path else [load_problem(n)
                                                            for n in builtin_names()]
    for p in problems:
        print(f"{p.name:<28} seed kernel: {'yes' if p.seed_source else 'no ':<4} {p.path}")
    return 0


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
    from evokernel.engine.evaluator import static_check
    from evokernel.records import Candidate
    from evokernel.runs.store import RunStore

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


def build_parser() -> argparse.ArgumentParser:
    from evokernel.cli.check import cmd_check, cmd_suite   # it imports this module's helpers
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
        sp.add_argument("--require-sandbox", action="store_true",
                        help="refuse to run candidate code unless it is fully contained "
                             "(another user, no network, read-only files; README, Security)")
        sp.add_argument("--vs-compile", action="store_true",
                        help="fitness = speedup over torch.compile instead of eager")

    r = sub.add_parser("run", help="search for faster kernels",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("problem", nargs="?", default="softmax",
                   help="built-in name or KernelBench-format file")
    r.add_argument("--model", help="litellm model, provider/name (e.g. openai/gpt-5, "
                   "anthropic/claude-sonnet-4-5, ollama/qwen2.5-coder); none: LLM-free")
    r.add_argument("--api-base", help="endpoint for local vLLM / Ollama / proxies")
    r.add_argument("--population", type=int, default=4, help="population size (mu)")
    r.add_argument("--offspring", type=int, default=8, help="operator calls per generation")
    r.add_argument("--generations", type=int, default=3, help="generations to run")
    r.add_argument("--seed", type=int, default=0, help="search RNG seed")
    r.add_argument("--ideas", type=int, default=3, help="ideas per idea call (k)")
    r.add_argument("--implementations", type=int, default=2,
                   help="implementations written per idea (m)")
    r.add_argument("--islands", type=int, default=1,
                   help="populations evolving apart, with ring migration")
    r.add_argument("--migration-interval", type=int, default=2,
                   help="generations between migrations")
    r.add_argument("--migrants", type=int, default=1,
                   help="best kernels each island sends to the next")
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

    from evokernel.bench import add_bench_arguments, cmd_bench
    b = sub.add_parser("bench", help="measure the evaluation engine (throughput, fidelity, "
                       "faults) on this machine's GPU")
    add_bench_arguments(b)
    b.set_defaults(func=cmd_bench)

    s = sub.add_parser("show", help="summarize a run directory")
    s.add_argument("run_dir")
    s.set_defaults(func=cmd_show)

    rp = sub.add_parser("report", help="write a Markdown + HTML report with plots of a run")
    rp.add_argument("run_dir")
    rp.add_argument("-o", "--output",
                    help="report folder (default: ./NAME-report, NAME the run folder's name)")
    rp.set_defaults(func=cmd_report)

    ex = sub.add_parser("export", help="write a run's best kernel as a candidate file")
    ex.add_argument("run_dir")
    ex.add_argument("-o", "--output", required=True, help="the kernel file to write")
    ex.set_defaults(func=cmd_export)

    su = sub.add_parser("suite", help="check or search a problem set; table with fast_p",
                        description="One row per problem (correct, speedup vs eager and vs "
                        "torch.compile, % of floor) and KernelBench's fast_p for p = 0, 1, "
                        "1.5, 2 over all problems, plus the geometric-mean speedup of the "
                        "correct kernels. Writes OUTPUT.md and OUTPUT.json.")
    su.add_argument("problems", nargs="*",
                    help="problem folders (KernelBench level layout or problems/), files, or "
                         "built-in names")
    su.add_argument("--kernels", help="candidates: a folder of <problem>.py files or a JSON "
                    "{problem: file}; default: each problem's seed kernel")
    su.add_argument("--search", action="store_true",
                    help="run a search per problem instead of checking one candidate")
    su.add_argument("--from-checks", metavar="DIR", help="no GPU: build the table from the "
                    "check_*.json files in DIR (each file's first kernel)")
    su.add_argument("-o", "--output", default="suite",
                    help="output path without suffix (default: ./suite -> suite.md, suite.json)")
    su.add_argument("--title", default="evokernel suite", help="the table's heading")
    su.add_argument("--model", help="litellm model for --search (default: LLM-free)")
    su.add_argument("--api-base")
    su.add_argument("--population", type=int, default=4)
    su.add_argument("--offspring", type=int, default=8)
    su.add_argument("--generations", type=int, default=3)
    su.add_argument("--seed", type=int, default=0, help="search RNG seed")
    su.add_argument("--max-tokens", type=int, help="per-problem LLM token budget")
    su.add_argument("--max-cost-usd", type=float, help="per-problem LLM cost budget")
    eval_args(su)
    su.set_defaults(func=cmd_suite)
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
    except (FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
        print(f"evokernel: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evokernel: interrupted; resume with `evokernel run --resume RUN_DIR`",
              file=sys.stderr)
        return 130
    except BrokenPipeError:             # `evokernel problems | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
