"""Sequential refinement against branching, under the same LLM token budget, on the same problem.

- sequential: one kernel is refined round after round: each generation, one idea for the best
  kernel so far and one implementation of it (population 1, k = 1, m = 1);
- branching (the CRFM method): each generation, ``--offspring`` idea calls on the population's
  best kernels, each writing k ideas and m implementations of each, all in flight at once.

Both arms use only the idea mutation (plus repair of failed builds, unless --no-repair), no
crossover and no LLM-free tuning, the same seed kernel and the same ``LLMConfig.max_total_tokens``;
each runs until its budget stops it (or --max-generations). Per arm (and seed) the report gives
the best speedup after every generation with the tokens spent by then, and in all: tokens,
candidates, accepted kernels and distinct ideas tried.

    python experiments/ablation_branching.py softmax --model openai/gpt-5 --budget-tokens 2000000
    python experiments/ablation_branching.py softmax --mock --evaluator fake --budget-tokens 3000
    python experiments/ablation_branching.py softmax --mock-server --budget-tokens 30000  # GPU

Runs go to RUN_ROOT/ARM-sSEED (resumed when already there); the report to RUN_ROOT/ablation.md
and RUN_ROOT/ablation.json. The budget is checked between generations and no call is sent once
it is spent, so an arm can overshoot by at most the calls in flight when it ran out. With
--mock or --mock-server, every reply reports the same token counts (litellm's mock: 30; the fake
server: 150), so the budget then counts calls.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


import common  # noqa: E402

from evokernel.config import EvalConfig, RunConfig, SearchConfig  # noqa: E402
from evokernel.operators import IdeaMutation  # noqa: E402
from evokernel.problem import load_problem  # noqa: E402
from evokernel.search.evolution import Evolution  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402

ARMS = ("sequential", "branching")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", default="softmax",
                    help="built-in name or KernelBench-format file (default: softmax)")
    ap.add_argument("--budget-tokens", type=int, required=True,
                    help="LLM token budget of each arm (prompt + completion tokens)")
    ap.add_argument("--k", type=int, default=3, help="branching: ideas per idea call")
    ap.add_argument("--m", type=int, default=2, help="branching: implementations per idea")
    ap.add_argument("--population", type=int, default=4, help="branching: population size")
    ap.add_argument("--offspring", type=int, default=2,
                    help="branching: idea calls per generation")
    ap.add_argument("--max-generations", type=int, default=50,
                    help="stop an arm here if its budget has not stopped it")
    ap.add_argument("--seeds", default="0", help="comma-separated search seeds (default 0)")
    ap.add_argument("--no-repair", action="store_true", help="no repair calls in either arm")
    ap.add_argument("--no-compile-baseline", action="store_true")
    ap.add_argument("--run-root", default=None,
                    help="folder of the runs and the report (default runs/ablation-<time>)")
    common.add_llm_and_evaluator_args(ap)
    args = ap.parse_args(argv)
    if not (args.mock or args.mock_server or args.model):
        ap.error("the ablation compares LLM search strategies: give --model, --mock or "
                 "--mock-server")
    return args


def search_config(args: argparse.Namespace, arm: str, seed: int) -> SearchConfig:
    common_kw = dict(generations=args.max_generations, crossover_prob=0.0, seed=seed,
                     repair_attempts=0 if args.no_repair else 1)
    if arm == "sequential":
        return SearchConfig(population_size=1, offspring_per_generation=1, ideas_per_call=1,
                            implementations_per_idea=1, **common_kw)
    return SearchConfig(population_size=args.population, offspring_per_generation=args.offspring,
                        ideas_per_call=args.k, implementations_per_idea=args.m, **common_kw)


def run_arm(args: argparse.Namespace, arm: str, seed: int, run_dir: Path) -> dict[str, Any]:
    """Run (or resume) one arm; returns its row of the report."""
    problem = load_problem(args.problem)
    llm = common.llm_config(args, max_total_tokens=args.budget_tokens)
    config = RunConfig(problem=args.problem, run_dir=str(run_dir), llm=llm,
                       search=search_config(args, arm, seed),
                       evaluation=EvalConfig(measure_compile=not args.no_compile_baseline))
    progress = run_dir.parent / f"{run_dir.name}.progress.jsonl"   # survives a resume

    def record(g: Any) -> None:
        with progress.open("a") as f:
            f.write(json.dumps({"generation": g.generation, "best_speedup": g.best_speedup,
                                "tokens": g.tokens, "valid": g.valid, "total": g.total}) + "\n")
        print(f"  {arm} seed {seed} gen {g.generation}: best {g.best_speedup:.3f}x  "
              f"tokens {g.tokens}", flush=True)

    resume = common.resuming(run_dir)
    evo = Evolution(problem, config, llm=common.llm_client(args, llm, run_dir),
                    mutations=[IdeaMutation()], crossovers=[],
                    evaluator=common.evaluator(args, problem), on_generation=record)
    stopped = evo.run(resume=resume).stopped
    return summarize(arm, seed, run_dir, progress, stopped)


def summarize(arm: str, seed: int, run_dir: Path, progress: Path,
              stopped: str) -> dict[str, Any]:
    store = RunStore(run_dir)
    try:
        cands, results, usage = store.candidates(), store.results(), store.llm_usage()
        gens = store.generations()
    finally:
        store.close()
    tokens_at = {}
    if progress.exists():
        for line in progress.read_text().splitlines():
            p = json.loads(line)
            tokens_at[p["generation"]] = p["tokens"]
    per_gen = [{"generation": g["generation"], "best_speedup": g["best_speedup"],
                "tokens": tokens_at.get(g["generation"]),
                "candidates": sum(c.generation <= g["generation"] for c in cands.values())}
               for g in gens]
    ideas = {c.idea.strip() for c in cands.values() if c.operator == "idea" and c.idea}
    return {"arm": arm, "seed": seed, "run_dir": str(run_dir), "stopped": stopped,
            "generations": gens[-1]["generation"] if gens else 0,
            "best_speedup": max((r.speedup for r in results.values()), default=0.0),
            "tokens": int(usage["prompt_tokens"] + usage["completion_tokens"]),
            "llm_calls": int(usage["calls"]),
            "llm_requests": int(usage["calls"] - usage["cached"]), "candidates": len(cands),
            "accepted": sum(r.accepted for r in results.values()),
            "distinct_ideas": len(ideas), "per_generation": per_gen}


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, llm: str) -> str:
    lines = [f"# Sequential refinement vs branching on {args.problem}", "",
             f"LLM: {llm}; evaluator: {args.evaluator}"
             + (" (fake: numbers are NOT measurements)" if args.evaluator == "fake" else "")
             + f"; token budget per arm: {args.budget_tokens}; branching: population "
               f"{args.population}, {args.offspring} idea calls x k={args.k} x m={args.m} per "
               f"generation; sequential: 1 idea x 1 implementation per generation; repair "
               f"{'off' if args.no_repair else 'on'}; seeds {args.seeds}", "",
             "| arm | seed | best speedup | tokens | LLM requests (replayed) | "
             "candidates (accepted) | distinct ideas | generations |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['best_speedup']:.3f}x | {r['tokens']} | "
                     f"{r['llm_requests']} ({r['llm_calls'] - r['llm_requests']}) | "
                     f"{r['candidates']} ({r['accepted']}) | "
                     f"{r['distinct_ideas']} | {r['generations']} ({r['stopped']}) |")
    if len({r["seed"] for r in rows}) > 1:
        lines += ["", "| arm | mean best speedup | mean tokens | mean distinct ideas |",
                  "|---|---|---|---|"]
        for arm in ARMS:
            mine = [r for r in rows if r["arm"] == arm]
            lines.append(f"| {arm} | {statistics.mean(r['best_speedup'] for r in mine):.3f}x | "
                         f"{statistics.mean(r['tokens'] for r in mine):.0f} | "
                         f"{statistics.mean(r['distinct_ideas'] for r in mine):.1f} |")
    lines += ["", "Best speedup after each generation (tokens spent by then):", ""]
    for r in rows:
        steps = ", ".join(f"{p['generation']}: {p['best_speedup']:.3f}x"
                          + (f" ({p['tokens']})" if p["tokens"] is not None else "")
                          for p in r["per_generation"])
        lines.append(f"- {r['arm']} seed {r['seed']}: {steps}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run both arms for every seed; returns what ablation.json holds."""
    args = parse_args(argv)
    common.configure_logging(args.verbose)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    root = Path(args.run_root or f"runs/ablation-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    llm = common.llm_label(args)
    print(f"ablation on {args.problem}: LLM {llm}, evaluator {args.evaluator}, budget "
          f"{args.budget_tokens} tokens per arm, runs in {root}", flush=True)
    with common.llm_server(args):
        rows = [run_arm(args, arm, seed, root / f"{arm}-s{seed}")
                for seed in seeds for arm in ARMS]
    report = markdown(rows, args, llm)
    data = {"problem": args.problem, "llm": llm, "evaluator": args.evaluator,
            "budget_tokens": args.budget_tokens, "args": vars(args), "arms": rows}
    (root / "ablation.md").write_text(report)
    (root / "ablation.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(report, flush=True)
    return data


if __name__ == "__main__":
    main()
