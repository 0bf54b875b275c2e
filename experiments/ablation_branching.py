"""Four ways to spend one LLM token budget on one problem, over several seeds.

The arms are the search strategies of evokernel.search.strategies (``SearchConfig.strategy``,
stored in each run's config.json), each run as ``evokernel run --strategy ARM`` would:

- best_of_n: independent samples from the seed kernel: every call writes one idea and one
  implementation for the seed, which stays the only parent (``toolbox.select`` keeps it);
  ``--offspring`` samples per generation;
- sequential: multi-turn refinement of one kernel: each generation, one idea and one
  implementation for the best kernel so far, the call shown that kernel's lineage (population 1);
- branching: Stanford CRFM's method (evokernel.search.strategies cites it): each generation, k
  ideas for each kept kernel and m implementations of each idea, all at once; the best
  ``--population`` become the next seeds (``toolbox.select`` is DEAP's ``selBest``);
- evokernel: the default search: idea mutation and LLM-free tuning, crossover, repair, survival
  by archive cell, inspirations from other lineages.

Every arm has the same seed kernel, the same ``LLMConfig.max_total_tokens`` and the same repair
rule (one repair round, unless --no-repair), and every arm drops near-duplicate ideas across a
generation's calls (part of how evokernel makes calls, evokernel.search.diversity). An arm runs
until its budget stops it (or --max-generations). Per arm and seed the report gives the best
speedup against the tokens spent after every generation, and in all: tokens, LLM requests,
candidates, accepted kernels and distinct ideas; the plot (best so far against tokens, one thin
line per seed, the seeds' mean thick) is ``ablation.png``.

    python experiments/ablation_branching.py softmax --model openai/gpt-5 --budget-tokens 2000000
    python experiments/ablation_branching.py softmax --mock --evaluator fake --budget-tokens 3000
    python experiments/ablation_branching.py softmax --mock-server --budget-tokens 30000  # GPU

Runs go to RUN_ROOT/ARM-sSEED (resumed when already there); the report to RUN_ROOT/ablation.md,
ablation.json and ablation.png. Each run folder is also an ordinary run: ``evokernel run --resume
RUN_ROOT/ARM-sSEED [--llm-batch DIR]`` goes on with its arm. With a frontier model answering
offline (README, "Batch LLM mode"), start each arm with the same settings through the command line
instead, then make the report from the folders without running anything (``--report-only``):

    evokernel run softmax --strategy branching --seed 0 --model M --max-tokens 2000000 \
        --generations 50 --population 4 --offspring 4 --ideas 3 --implementations 2 \
        --run-dir RUN_ROOT/branching-s0 --llm-batch RUN_ROOT/branching-s0-batch
    python experiments/ablation_branching.py softmax --report-only --run-root RUN_ROOT \
        --budget-tokens 2000000 --model M

(--budget-tokens is --max-tokens, --max-generations --generations, --k and --m --ideas and
--implementations; --no-repair is --repair-attempts 0). The budget is checked between
generations, so an arm can overshoot by the calls of its last generation. With --mock or
--mock-server every reply reports the same token counts (litellm's mock: 30; the fake server:
150), so the budget then counts calls; with --evaluator fake the speedups are not measurements,
and scripted replies are not a model's ideas: the report says so.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import common  # noqa: E402

from evokernel.config import STRATEGIES, EvalConfig, RunConfig, SearchConfig
from evokernel.errors import EvokernelError
from evokernel.problem import load_problem
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution
from evokernel.search.strategies import preset

ARMS = STRATEGIES


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", default="softmax",
                    help="built-in name or KernelBench-format file (default: softmax)")
    ap.add_argument("--budget-tokens", type=int, required=True,
                    help="LLM token budget of each arm (prompt + completion tokens)")
    ap.add_argument("--k", type=int, default=3, help="branching, evokernel: ideas per call")
    ap.add_argument("--m", type=int, default=2,
                    help="branching, evokernel: implementations per idea")
    ap.add_argument("--population", type=int, default=4,
                    help="branching: kernels kept as next seeds; evokernel: population size")
    ap.add_argument("--offspring", type=int, default=4,
                    help="best_of_n: samples per generation; evokernel: calls per generation")
    ap.add_argument("--max-generations", type=int, default=50,
                    help="stop an arm here if its budget has not stopped it")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated search seeds")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"which arms (default: all of "
                    f"{', '.join(ARMS)})")
    ap.add_argument("--no-repair", action="store_true", help="no repair calls in any arm")
    ap.add_argument("--no-compile-baseline", action="store_true")
    ap.add_argument("--run-root", default=None,
                    help="folder of the runs and the report (default runs/ablation-<time>)")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: the report of the runs already in --run-root (made by "
                         "this script, or by `evokernel run --strategy ARM --run-dir "
                         "RUN_ROOT/ARM-sSEED`, e.g. in the batch LLM mode); no GPU needed")
    common.add_llm_and_evaluator_args(ap)
    args = ap.parse_args(argv)
    if args.report_only and not args.run_root:
        ap.error("--report-only reports on the runs of --run-root: give it")
    if not (args.mock or args.mock_server or args.model or args.report_only):
        ap.error("the ablation compares LLM search strategies: give --model, --mock or "
                 "--mock-server")
    unknown = sorted(set(arm_list(args)) - set(ARMS))
    if unknown:
        ap.error(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    return args


def arm_list(args: argparse.Namespace) -> list[str]:
    return [a.strip() for a in args.arms.split(",") if a.strip()]


def search_config(args: argparse.Namespace, arm: str, seed: int) -> SearchConfig:
    """The SearchConfig of one arm: the package's preset of the script's flags
    (evokernel.search.strategies.preset; the module docstring says what each arm fixes)."""
    return preset(arm, SearchConfig(
        population_size=args.population, offspring_per_generation=args.offspring,
        ideas_per_call=args.k, implementations_per_idea=args.m, generations=args.max_generations,
        seed=seed, repair_attempts=0 if args.no_repair else 1))


def run_arm(args: argparse.Namespace, arm: str, seed: int, run_dir: Path) -> dict[str, Any]:
    """Run (or resume) one arm; returns its row of the report."""
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

    if args.report_only:
        row = summarize(arm, seed, run_dir, progress, stored_stop(run_dir))
        if row["strategy"] != arm:
            raise EvokernelError(f"{run_dir}: a run of search.strategy {row['strategy']!r}, "
                                 f"not {arm!r}: start it with --strategy {arm}")
        return row
    resume = common.resuming(run_dir)
    problem = load_problem(args.problem)
    evo = Evolution(problem, config, llm=common.llm_client(args, llm, run_dir),
                    evaluator=common.evaluator(args, problem), on_generation=record)
    stopped = evo.run(resume=resume).stopped
    return summarize(arm, seed, run_dir, progress, stopped)


def stored_stop(run_dir: Path) -> str:
    """Why a run that --report-only finds stands where it does: "llm_batch" (requests wait for
    replies), "budget" (its LLM token budget is reached), "completed" (all its generations), else
    "incomplete". Raises: EvokernelError naming a folder that is not a run."""
    store = RunStore(run_dir, read_only=True)
    try:
        cfg, usage, gens = store.config(), store.llm_usage(), store.generations()
        pending = store.llm_requests("pending")
    finally:
        store.close()
    budget = cfg.llm.max_total_tokens
    if pending:
        return "llm_batch"
    if budget is not None and usage["prompt_tokens"] + usage["completion_tokens"] >= budget:
        return "budget"
    return "completed" if gens and gens[-1]["generation"] >= cfg.search.generations \
        else "incomplete"


def best_so_far(points: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """(tokens, best speedup so far) after each generation, in generation order, the best made
    non-decreasing (a running maximum)."""
    out, best = [], 0.0
    for p in points:
        best = max(best, p["best_speedup"] or 0.0)
        out.append((int(p["tokens"] or 0), best))
    return out


def mean_curve(curves: Sequence[Sequence[tuple[int, float]]],
               grid: Sequence[int]) -> list[float]:
    """The mean over ``curves`` of each one's best so far at each token count of ``grid`` (a
    step function: the last point at or below it; 0.0 before a curve's first point)."""
    def at(curve: Sequence[tuple[int, float]], t: int) -> float:
        vals = [b for tok, b in curve if tok <= t]
        return vals[-1] if vals else 0.0
    return [statistics.mean(at(c, t) for c in curves) for t in grid] if curves else []


def summarize(arm: str, seed: int, run_dir: Path, progress: Path,
              stopped: str) -> dict[str, Any]:
    store = RunStore(run_dir, read_only=True)
    try:
        cands, results, usage = store.candidates(), store.results(), store.llm_usage()
        gens, logbook, cfg = store.generations(), store.logbook(), store.config()
    finally:
        store.close()
    # tokens spent by each generation's end: the run's Logbook (a run made by `evokernel run`
    # too), else this script's progress file (runs made before the Logbook kept tokens)
    tokens_at = {r["gen"]: r["tokens"] for r in logbook if r.get("tokens") is not None}
    if progress.exists():
        for line in progress.read_text().splitlines():
            p = json.loads(line)
            tokens_at.setdefault(p["generation"], p["tokens"])
    per_gen = []
    for g in gens:       # the best of every kernel so far: best_of_n's offspring never survive
        mine = [cid for cid, c in cands.items() if c.generation <= g["generation"]]
        per_gen.append({"generation": g["generation"],
                        "best_speedup": max((results[cid].speedup for cid in mine
                                             if cid in results), default=0.0),
                        "tokens": tokens_at.get(g["generation"]), "candidates": len(mine)})
    ideas = {c.idea.strip() for c in cands.values() if c.operator == "idea" and c.idea}
    return {"arm": arm, "seed": seed, "run_dir": str(run_dir), "stopped": stopped,
            "strategy": cfg.search.strategy, "model": cfg.llm.model,
            "generations": gens[-1]["generation"] if gens else 0,
            "best_speedup": max((r.speedup for r in results.values()), default=0.0),
            "tokens": int(usage["prompt_tokens"] + usage["completion_tokens"]),
            "llm_calls": int(usage["calls"]),
            "llm_requests": int(usage["calls"] - usage["cached"]), "candidates": len(cands),
            "accepted": sum(r.accepted for r in results.values()),
            "distinct_ideas": len(ideas), "per_generation": per_gen,
            "best_so_far": best_so_far([p for p in per_gen if p["tokens"] is not None])}


def caveat(args: argparse.Namespace) -> str:
    """What the numbers are not, for the report's and the plot's titles ("" with a real model
    and the GPU evaluator)."""
    notes = []
    if args.mock or args.mock_server:
        notes.append("scripted LLM replies, not a model's ideas")
    if args.evaluator == "fake":
        notes.append("fake evaluator: speedups are NOT measurements")
    return "; ".join(notes)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Best so far against tokens, per arm: each seed thin, the seeds' mean thick (Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = dict(zip(ARMS, ("tab:gray", "tab:blue", "tab:orange", "tab:green")))
    for arm in ARMS:
        curves = [r["best_so_far"] for r in rows if r["arm"] == arm and r["best_so_far"]]
        if not curves:
            continue
        for c in curves:
            ax.step([t for t, _ in c], [b for _, b in c], where="post", color=colors[arm],
                    alpha=0.3, linewidth=1)
        grid = sorted({t for c in curves for t, _ in c})
        ax.step(grid, mean_curve(curves, grid), where="post", color=colors[arm], linewidth=2.5,
                label=f"{arm} (mean of {len(curves)})")
    ax.set_xlabel("LLM tokens spent (prompt + completion)")
    ax.set_ylabel("best speedup so far (x vs eager)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace, llm: str) -> str:
    note = caveat(args)
    lines = [f"# One token budget, four ways, on {args.problem}", "",
             f"LLM: {llm}; evaluator: {args.evaluator}" + (f" ({note})" if note else "")
             + f"; token budget per arm: {args.budget_tokens}; seeds {args.seeds}; repair "
               f"{'off' if args.no_repair else 'on'}.", "",
             f"- best_of_n: {args.offspring} samples (1 idea x 1 implementation) of the seed per "
             "generation; sequential: 1 idea x 1 implementation of the best so far per "
             f"generation; branching: {args.population} kept x k={args.k} ideas x m={args.m} "
             f"implementations; evokernel: population {args.population}, {args.offspring} calls "
             f"per generation, k={args.k}, m={args.m}.", "",
             "| arm | seed | best speedup | tokens | LLM requests (replayed) | "
             "candidates (accepted) | distinct ideas | generations |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['best_speedup']:.3f}x | {r['tokens']} | "
                     f"{r['llm_requests']} ({r['llm_calls'] - r['llm_requests']}) | "
                     f"{r['candidates']} ({r['accepted']}) | "
                     f"{r['distinct_ideas']} | {r['generations']} ({r['stopped']}) |")
    lines += ["", "| arm | mean best speedup | min-max | mean tokens | mean distinct ideas |",
              "|---|---|---|---|---|"]
    for arm in [a for a in ARMS if any(r["arm"] == a for r in rows)]:
        mine = [r for r in rows if r["arm"] == arm]
        best = [r["best_speedup"] for r in mine]
        lines.append(f"| {arm} | {statistics.mean(best):.3f}x | {min(best):.3f}-"
                     f"{max(best):.3f}x | {statistics.mean(r['tokens'] for r in mine):.0f} | "
                     f"{statistics.mean(r['distinct_ideas'] for r in mine):.1f} |")
    lines += ["", "Best speedup after each generation (tokens spent by then):", ""]
    for r in rows:
        steps = ", ".join(f"{p['generation']}: {p['best_speedup']:.3f}x"
                          + (f" ({p['tokens']})" if p["tokens"] is not None else "")
                          for p in r["per_generation"])
        lines.append(f"- {r['arm']} seed {r['seed']}: {steps}")
    lines += ["", "![best so far against tokens](ablation.png)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every arm for every seed (with --report-only, read them); returns what
    ablation.json holds."""
    args = parse_args(argv)
    common.configure_logging(args.verbose)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if not args.report_only:
        common.require_gpu(args)                 # before any folder is made
    root = Path(args.run_root or f"runs/ablation-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    llm = common.llm_label(args)
    if args.report_only and not (args.mock or args.mock_server or args.model):
        llm = None                               # the runs' own model, once they are read
    print(f"ablation on {args.problem}: LLM {llm or 'as each run stored it'}, evaluator "
          f"{args.evaluator}, budget {args.budget_tokens} tokens per arm, runs in {root}",
          flush=True)
    with common.llm_server(args):
        rows = [run_arm(args, arm, seed, root / f"{arm}-s{seed}")
                for seed in seeds for arm in arm_list(args)]
    llm = llm or ", ".join(sorted({str(r["model"]) for r in rows}))
    report = markdown(rows, args, llm)
    title = f"{args.problem}: best so far against tokens ({llm})"
    if caveat(args):
        title += f"\n{caveat(args)}"
    plot(rows, root / "ablation.png", title)
    data = {"problem": args.problem, "llm": llm, "evaluator": args.evaluator,
            "caveat": caveat(args), "budget_tokens": args.budget_tokens, "args": vars(args),
            "arms": rows}
    (root / "ablation.md").write_text(report)
    (root / "ablation.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(report, flush=True)
    return data


if __name__ == "__main__":
    sys.exit(common.run_script("ablation_branching", main))
