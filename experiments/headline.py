"""The five headline problems (softmax, layernorm, matmul, conv2d, conv2d_relu_maxpool), one
search each, then a summary table: the best kernel's speedup over PyTorch eager and over
torch.compile, its time as a % of the physical floor, and the LLM tokens each search spent.

    python experiments/headline.py --model openai/gpt-5 [--generations 5] [--run-root D]
    python experiments/headline.py --mock                 # the scripted LLM, on the GPU
    python experiments/headline.py --mock-server          # the same, over HTTP (fake server)
    python experiments/headline.py --mock --evaluator fake --problems softmax,matmul   # no GPU

The last line is a demonstration: the fake evaluator (evokernel/demo/fake_evaluator.py) gives
every kernel made-up, deterministic times, so the table shows the pipeline working, never a
measurement (summary.md says so). Without a GPU and without ``--evaluator fake`` the script
stops at once with one line, and creates nothing.

Each problem's run goes to RUN_ROOT/PROBLEM; a run that is already there is resumed (with the
config it was started with), so a killed experiment continues where it stopped and replays its
cached LLM replies. The table is written to RUN_ROOT/summary.md and RUN_ROOT/summary.json.
With no --model, --mock or --mock-server, each search uses the LLM-free tune operator only.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


import common  # noqa: E402

from evokernel.config import EvalConfig, RunConfig, SearchConfig  # noqa: E402
from evokernel.problem import load_problem  # noqa: E402
from evokernel.search.evolution import Evolution  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402

HEADLINE = ("softmax", "layernorm", "matmul", "conv2d", "conv2d_relu_maxpool")
SEARCH = SearchConfig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default=",".join(HEADLINE),
                    help=f"comma-separated subset (default: {','.join(HEADLINE)})")
    ap.add_argument("--generations", type=int, default=5,
                    help="generations of each search (default: 5, more than a run's "
                         f"{SEARCH.generations})")
    ap.add_argument("--population", type=int, default=SEARCH.population_size,
                    help=f"population size (mu) (default: {SEARCH.population_size})")
    ap.add_argument("--offspring", type=int, default=4,
                    help="operator calls per generation (default: 4, fewer than a run's "
                         f"{SEARCH.offspring_per_generation})")
    ap.add_argument("--ideas", type=int, default=SEARCH.ideas_per_call,
                    help=f"ideas per idea call (k) (default: {SEARCH.ideas_per_call})")
    ap.add_argument("--implementations", type=int, default=SEARCH.implementations_per_idea,
                    help="implementations per idea (m) "
                         f"(default: {SEARCH.implementations_per_idea})")
    ap.add_argument("--islands", type=int, default=SEARCH.islands,
                    help=f"populations with ring migration (default: {SEARCH.islands})")
    ap.add_argument("--seed", type=int, default=SEARCH.seed,
                    help=f"the searches' RNG seed (default: {SEARCH.seed})")
    ap.add_argument("--max-tokens", type=int, help="LLM token budget of each search")
    ap.add_argument("--max-cost-usd", type=float, help="LLM cost budget of each search")
    ap.add_argument("--no-compile-baseline", action="store_true",
                    help="skip torch.compile (its column stays empty)")
    ap.add_argument("--run-root", default=None,
                    help="folder of the runs and the summary (default runs/headline-<time>)")
    common.add_llm_and_evaluator_args(ap)
    return ap.parse_args(argv)


def search(args: argparse.Namespace, name: str, run_dir: Path) -> str:
    """Run (or resume) the search on one problem; returns how it stopped."""
    problem = load_problem(name)
    llm = common.llm_config(args, max_total_tokens=args.max_tokens,
                            max_cost_usd=args.max_cost_usd)
    config = RunConfig(
        problem=name, run_dir=str(run_dir), llm=llm,
        evaluation=EvalConfig(measure_compile=not args.no_compile_baseline),
        search=SearchConfig(population_size=args.population, generations=args.generations,
                            offspring_per_generation=args.offspring,
                            ideas_per_call=args.ideas,
                            implementations_per_idea=args.implementations,
                            islands=args.islands, seed=args.seed))

    def report(g: Any) -> None:
        print(f"  {name} gen {g.generation}: best {g.best_speedup:.3f}x  valid "
              f"{g.valid}/{g.total}  tokens {g.tokens}", flush=True)

    evo = Evolution(problem, config, llm=common.llm_client(args, llm, run_dir),
                    evaluator=common.evaluator(args, problem), on_generation=report)
    return evo.run(resume=common.resuming(run_dir)).stopped


def summarize(name: str, run_dir: Path, stopped: str) -> dict[str, Any]:
    """One row of the table, read from the run store."""
    store = RunStore(run_dir)
    try:
        cands, results = store.candidates(), store.results()
        usage = store.llm_usage()
        gens = store.generations()
        row: dict[str, Any] = {
            "problem": name, "run_dir": str(run_dir), "stopped": stopped,
            "generations": gens[-1]["generation"] if gens else None,
            "candidates": len(cands), "accepted": sum(r.accepted for r in results.values()),
            "tokens": int(usage["prompt_tokens"] + usage["completion_tokens"]),
            "reasoning_tokens": int(usage["reasoning_tokens"]),
            "cost_usd": round(float(usage["cost_usd"]), 6), "llm_calls": int(usage["calls"]),
            "llm_cached": int(usage["cached"]), "device": store.meta().get("device", {}),
            "best_id": None, "best_operator": None, "best_generation": None, "best_idea": None,
            "eager_ms": None, "compile_ms": None, "kernel_ms": None, "floor_ms": None,
            "speedup_vs_eager": None, "speedup_vs_compile": None, "pct_of_floor": None}
        best = store.best()
        if best is not None:
            cand, res = best
            row.update(best_id=cand.id, best_operator=cand.operator,
                       best_generation=cand.generation,
                       best_idea=cand.idea.splitlines()[0] if cand.idea else "",
                       eager_ms=res.reference_ms, compile_ms=res.compile_ms,
                       kernel_ms=res.candidate_ms, floor_ms=res.floor_ms,
                       speedup_vs_eager=res.speedup,
                       speedup_vs_compile=res.compile_speedup or None,
                       pct_of_floor=res.pct_of_floor)
        return row
    finally:
        store.close()


def markdown(rows: list[dict[str, Any]], header: str) -> str:
    def num(x: Any, spec: str) -> str:
        return "-" if x is None else format(x, spec)
    lines = [header, "",
             "| problem | best vs eager | best vs torch.compile | % of floor | eager ms | "
             "compile ms | kernel ms | tokens | cost $ | candidates (accepted) | generations | "
             "best kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        best = (f"{r['best_id']} (gen {r['best_generation']}, {r['best_operator']}): "
                f"{(r['best_idea'] or '-')[:60]}" if r["best_id"] else "none accepted")
        lines.append(
            f"| {r['problem']} | {num(r['speedup_vs_eager'], '.3f')}x | "
            f"{num(r['speedup_vs_compile'], '.3f')}x | {num(r['pct_of_floor'], '.0f')} | "
            f"{num(r['eager_ms'], '.4f')} | {num(r['compile_ms'], '.4f')} | "
            f"{num(r['kernel_ms'], '.4f')} | {r['tokens']} | {r['cost_usd']:.4f} | "
            f"{r['candidates']} ({r['accepted']}) | {num(r['generations'], 'd')} "
            f"({r['stopped']}) | {best} |")
    solved = [r for r in rows if r["speedup_vs_eager"]]
    lines += ["", f"fast_1 vs eager: {sum(r['speedup_vs_eager'] > 1 for r in solved)}/"
                  f"{len(rows)} problems; vs torch.compile: "
                  f"{sum((r['speedup_vs_compile'] or 0) > 1 for r in solved)}/{len(rows)}; "
                  f"tokens in all: {sum(r['tokens'] for r in rows)}. % of floor: kernel time "
                  "as a percentage of the physical floor (100 = at the floor)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the experiment; returns what summary.json holds."""
    args = parse_args(argv)
    common.configure_logging(args.verbose)
    names = [n.strip() for n in args.problems.split(",") if n.strip()]
    unknown = [n for n in names if n not in HEADLINE]
    if unknown or not names:
        raise SystemExit(f"headline: unknown problems {unknown}; choose from {HEADLINE}")
    common.require_gpu(args)                     # before any folder is made
    root = Path(args.run_root or f"runs/headline-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    llm = common.llm_label(args)
    print(f"headline: {len(names)} problems, LLM {llm}, evaluator {args.evaluator}, runs in "
          f"{root}", flush=True)
    rows = []
    with common.llm_server(args):
        for name in names:
            run_dir = root / name
            stopped = search(args, name, run_dir)
            rows.append(summarize(name, run_dir, stopped))
    header = (f"# evokernel headline problems\n\nLLM: {llm}; evaluator: {args.evaluator}"
              + (" (fake: numbers are NOT measurements)" if args.evaluator == "fake" else "")
              + f"; device: {rows[0]['device'].get('device', '?')}; population "
                f"{args.population}, offspring {args.offspring}, k={args.ideas}, "
                f"m={args.implementations}, generations {args.generations}, seed {args.seed}")
    table = markdown(rows, header)
    summary = {"llm": llm, "evaluator": args.evaluator, "args": vars(args), "problems": rows}
    (root / "summary.md").write_text(table)
    (root / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(table, flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(common.run_script("headline", main))
