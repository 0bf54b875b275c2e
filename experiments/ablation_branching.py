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
--implementations; --no-repair is --repair-attempts 0). With --report-only every label of the
report (problem, LLM and whether its replies were scripted, evaluator and whether it was the fake
one, token budget, each arm's settings) is what the runs stored; the problem and those flags,
where given, are checked against them, and runs that disagree with each other or with them are
refused (one line, exit status 2, nothing written); a run not finished (e.g. waiting for replies)
is marked NOT FINISHED. The budget is checked between
generations, so an arm can overshoot by the calls of its last generation. With --mock or
--mock-server every reply reports the same token counts (litellm's mock: 30; the fake server:
150), so the budget then counts calls; with --evaluator fake the speedups are not measurements,
and scripted replies are not a model's ideas: the report says so.
"""
from __future__ import annotations

import argparse
import dataclasses
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


#: The search-shape flags: flag (argparse dest) -> SearchConfig field, and their defaults (put
#: in only where the script runs the arms; with --report-only a flag given is checked against the
#: runs).
SHAPE_FLAGS = {"k": "ideas_per_call", "m": "implementations_per_idea",
               "population": "population_size", "offspring": "offspring_per_generation",
               "max_generations": "generations"}
SHAPE_DEFAULTS = {"k": 3, "m": 2, "population": 4, "offspring": 4, "max_generations": 50}
#: How a run that stands where it does is finished: its budget reached, or all its generations.
FINISHED = ("budget", "completed")
NOT_FINISHED = {"llm_batch": "waits for LLM replies (batch mode)",
                "needs_gpu": "waits for a GPU step (batch mode)",
                "incomplete": "stopped before its budget and its last generation"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", default=None,
                    help="built-in name or KernelBench-format file (default: softmax; with "
                         "--report-only: the runs' own, checked when given)")
    ap.add_argument("--budget-tokens", type=int, default=None,
                    help="LLM token budget of each arm (prompt + completion tokens); with "
                         "--report-only optional: the runs' own, checked when given")
    ap.add_argument("--k", type=int, default=None,
                    help="branching, evokernel: ideas per call (default 3)")
    ap.add_argument("--m", type=int, default=None,
                    help="branching, evokernel: implementations per idea (default 2)")
    ap.add_argument("--population", type=int, default=None,
                    help="branching: kernels kept as next seeds; evokernel: population size "
                         "(default 4)")
    ap.add_argument("--offspring", type=int, default=None,
                    help="best_of_n: samples per generation; evokernel: calls per generation "
                         "(default 4)")
    ap.add_argument("--max-generations", type=int, default=None,
                    help="stop an arm here if its budget has not stopped it (default 50)")
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
                         "RUN_ROOT/ARM-sSEED`, e.g. in the batch LLM mode); no GPU needed. "
                         "Its labels (problem, LLM, evaluator, budget, the arms' settings) are "
                         "the runs' own; flags given are checked against them")
    common.add_llm_and_evaluator_args(ap)
    ap.set_defaults(evaluator=None)              # given or not: --report-only checks a given one
    args = ap.parse_args(argv)
    if args.report_only and not args.run_root:
        ap.error("--report-only reports on the runs of --run-root: give it")
    if not (args.mock or args.mock_server or args.model or args.report_only):
        ap.error("the ablation compares LLM search strategies: give --model, --mock or "
                 "--mock-server")
    if args.budget_tokens is None and not args.report_only:
        ap.error("--budget-tokens is required: the LLM token budget of each arm")
    if args.budget_tokens is not None and args.budget_tokens < 1:
        ap.error(f"--budget-tokens must be a positive number of tokens, got {args.budget_tokens}")
    for flag, value in [(f, getattr(args, f)) for f in SHAPE_FLAGS]:
        if value is not None and value < (0 if flag == "max_generations" else 1):
            ap.error(f"--{flag.replace('_', '-')} must be >= "
                     f"{0 if flag == 'max_generations' else 1}, got {value}")
    try:
        seeds = seed_list(args)
    except ValueError:
        ap.error(f"--seeds: comma-separated whole numbers (e.g. 0,1,2), got {args.seeds!r}")
    if not seeds:
        ap.error("--seeds: give at least one seed (e.g. 0,1,2)")
    unknown = sorted(set(arm_list(args)) - set(ARMS))
    if unknown:
        ap.error(f"--arms: unknown {', '.join(unknown)} (known: {', '.join(ARMS)})")
    if not arm_list(args):
        ap.error(f"--arms: give at least one of {', '.join(ARMS)}")
    if not args.report_only:                     # the script runs the arms: the defaults
        args.problem = args.problem or "softmax"
        args.evaluator = args.evaluator or "cuda"
        for flag, default in SHAPE_DEFAULTS.items():
            if getattr(args, flag) is None:
                setattr(args, flag, default)
    return args


def seed_list(args: argparse.Namespace) -> list[int]:
    """--seeds as integers. Raises: ValueError for a seed that is not a whole number."""
    return [int(s) for s in args.seeds.split(",") if s.strip()]


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

    resume = common.resuming(run_dir)
    problem = load_problem(args.problem)
    evo = Evolution(problem, config, llm=common.llm_client(args, llm, run_dir),
                    evaluator=common.evaluator(args, problem), on_generation=record)
    stopped = evo.run(resume=resume).stopped
    return summarize(arm, seed, run_dir, progress, stopped)


def read_runs(args: argparse.Namespace, root: Path, seeds: list[int]) -> list[dict[str, Any]]:
    """--report-only: the rows of the runs ROOT/ARM-sSEED, read without changing anything.
    Raises: EvokernelError (one line) for a --run-root that is no folder, a folder of --arms x
    --seeds without a run (naming the runs there), or a run of another strategy than its arm."""
    if not root.is_dir():
        raise EvokernelError(f"--run-root {root}: no such folder (--report-only reads the runs "
                             "in it and creates nothing)")
    arms = arm_list(args)
    missing = [f"{arm}-s{seed}" for seed in seeds for arm in arms
               if not common.resuming(root / f"{arm}-s{seed}")]
    if missing:
        found = sorted(p.name for p in root.iterdir() if p.is_dir() and common.resuming(p))
        raise EvokernelError(
            f"{root}: no run in {', '.join(missing)} (--report-only reads RUN_ROOT/ARM-sSEED for "
            f"every arm of --arms ({','.join(arms)}) and seed of --seeds "
            f"({','.join(map(str, seeds))})); runs there: {', '.join(found) or 'none'}: give "
            "--arms and --seeds to match them")
    rows = []
    for seed in seeds:
        for arm in arms:
            run_dir = root / f"{arm}-s{seed}"
            progress = root / f"{run_dir.name}.progress.jsonl"
            row = summarize(arm, seed, run_dir, progress, stored_stop(run_dir))
            if row["strategy"] != arm:
                raise EvokernelError(f"{run_dir}: a run of search.strategy {row['strategy']!r}, "
                                     f"not {arm!r}: start it with --strategy {arm}")
            rows.append(row)
    return rows


def stored_stop(run_dir: Path) -> str:
    """Why a run that --report-only finds stands where it does: "llm_batch" (requests written
    out or handed to a batch API wait for replies), "needs_gpu" (candidates made, not yet
    evaluated: the budget stops only a generation not yet begun, so a run past it still has
    them to evaluate), "budget" (its LLM token budget is reached), "completed" (all its
    generations), else "incomplete". Raises: EvokernelError naming a folder that is not a run."""
    store = RunStore(run_dir, read_only=True)
    try:
        cfg, usage, gens = store.config(), store.llm_usage(), store.generations()
        pending = store.llm_requests("pending") + store.llm_requests("submitted")
        unevaluated = set(store.candidates()) - set(store.results())
    finally:
        store.close()
    budget = cfg.llm.max_total_tokens
    if pending:
        return "llm_batch"
    if unevaluated:
        return "needs_gpu"
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


def best_at(curve: Sequence[tuple[int, float]], tokens: int) -> float:
    """A best-so-far curve (best_so_far) read at ``tokens``: the best after the last generation
    that ended at or below it (a step function; 0.0 before the curve's first point)."""
    vals = [b for tok, b in curve if tok <= tokens]
    return vals[-1] if vals else 0.0


def mean_curve(curves: Sequence[Sequence[tuple[int, float]]],
               grid: Sequence[int]) -> list[float]:
    """The mean over ``curves`` of each one's best so far at each token count of ``grid``
    (best_at of each)."""
    return [statistics.mean(best_at(c, t) for c in curves) for t in grid] if curves else []


def summarize(arm: str, seed: int, run_dir: Path, progress: Path,
              stopped: str) -> dict[str, Any]:
    store = RunStore(run_dir, read_only=True)
    try:
        cands, results, usage = store.candidates(), store.results(), store.llm_usage()
        gens, logbook, cfg = store.generations(), store.logbook(), store.config()
        meta = store.meta()
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
    curve = best_so_far([p for p in per_gen if p["tokens"] is not None])
    budget = cfg.llm.max_total_tokens
    problem = meta.get("problem")
    device = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    return {"arm": arm, "seed": seed, "run_dir": str(run_dir), "stopped": stopped,
            "finished": stopped in FINISHED,
            # what the run stored of how it was made: the report's labels come from these
            "problem": problem.get("name") if isinstance(problem, dict) and problem.get("name")
            else Path(str(cfg.problem)).stem,
            "device": device.get("device"),
            "strategy": cfg.search.strategy, "model": model_label(cfg.llm),
            "budget_tokens": budget, "search": dataclasses.asdict(cfg.search),
            "scripted": int(usage.get("scripted") or 0),
            "scripted_by": list(usage.get("scripted_by") or []),
            "answered_by": list(usage.get("answered_by") or []),
            "generations": gens[-1]["generation"] if gens else 0,
            "best_speedup": max((r.speedup for r in results.values()), default=0.0),
            "tokens": int(usage["prompt_tokens"] + usage["completion_tokens"]),
            "llm_calls": int(usage["calls"]),
            "llm_requests": int(usage["calls"] - usage["cached"]), "candidates": len(cands),
            "accepted": sum(r.accepted for r in results.values()),
            "waiting": sum(cid not in results for cid in cands),      # made, not yet evaluated
            "distinct_ideas": len(ideas), "per_generation": per_gen,
            "best_so_far": curve,
            # the budget is checked between generations, so a run's last generation can pass
            # it; read at the budget, that generation counts only when it ended within it
            # None: no generation's tokens were recorded, so the reading is unknown
            "best_within_budget": (best_at(curve, budget) if curve else None)
            if budget is not None else max((r.speedup for r in results.values()), default=0.0)}


def model_label(llm: Any) -> str:
    """The model of a stored LLMConfig ("none" without one); with several, each and its
    weight."""
    models = getattr(llm, "models", ()) or ()
    if len(models) > 1:
        return " + ".join(f"{m} (weight {w})" for m, w in models)
    return str(llm.model) if llm.model else "none"


def is_fake(device: str | None) -> bool:
    """Whether a stored device name is the fake evaluator's (evokernel/demo/fake_evaluator.py)."""
    return "fake evaluator" in str(device or "")


def agree(what: str, values: Sequence[tuple[str, Any]]) -> Any:
    """The one value that every run of ``values`` ((run name, value)) has; None for none.
    Raises: EvokernelError naming each value and its runs when they disagree."""
    by_value: dict[Any, list[str]] = {}
    for name, value in values:
        by_value.setdefault(value, []).append(name)
    if len(by_value) > 1:
        raise EvokernelError(
            f"the runs disagree on {what}: " + "; ".join(
                f"{v if v is not None else 'none'} ({', '.join(names)})"
                for v, names in by_value.items())
            + ": one report compares runs made alike; give --arms/--seeds to leave some out")
    return next(iter(by_value), None)


def run_name(row: dict[str, Any]) -> str:
    return f"{row['arm']}-s{row['seed']}"


def stored_labels(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The report's labels, from what the runs stored: problem, LLM (and whether a stand-in
    wrote the replies), evaluator (and whether it is the fake one), token budget, each arm's
    search settings, and the caveat ("" with a model and the GPU evaluator). Flags given with
    --report-only (problem, --model, --mock, --mock-server, --evaluator, --budget-tokens, the
    search-shape flags, --no-repair) are checked against the runs.
    Raises: EvokernelError (one line) when the runs disagree with each other or the flags."""
    named = [(run_name(r), r) for r in rows]
    problem = agree("the problem", [(n, r["problem"]) for n, r in named])
    if args.problem is not None:
        given = load_problem(args.problem).name
        if given != problem:
            raise EvokernelError(f"the runs are of problem {problem!r}, not {args.problem!r}: "
                                 f"give {problem} (or no problem) with --report-only")
    model = agree("the LLM model (llm.model)", [(n, r["model"]) for n, r in named])
    talked = [(n, r) for n, r in named if r["llm_calls"]]
    scripted = agree("whether a stand-in wrote the LLM replies (scripted)",
                     [(n, bool(r["scripted"])) for n, r in talked])
    device = agree("the evaluator (the device their kernels were judged on)",
                   [(n, r["device"]) for n, r in named if r["device"]])
    budget = agree("the token budget (llm.max_total_tokens)",
                   [(n, r["budget_tokens"]) for n, r in named])
    settings = {}
    for arm in [a for a in ARMS if any(r["arm"] == a for r in rows)]:
        shapes = [(n, {k: v for k, v in r["search"].items() if k != "seed"})
                  for n, r in named if r["arm"] == arm]
        differ = [k for k in shapes[0][1] if any(sh[k] != shapes[0][1][k] for _, sh in shapes)]
        agree(f"{arm}'s search settings (config.json's search)",
              [(n, ", ".join(f"{k}={sh[k]!r}" for k in differ)) for n, sh in shapes])
        settings[arm] = shapes[0][1]
    if args.report_only:
        check_flags(args, named, model=model, scripted=scripted, device=device, budget=budget)
    labels = {}
    by = sorted({w for r in rows for w in r["scripted_by"]})
    answered = sorted({w for r in rows for w in r["answered_by"]})
    about = ([f"replies imported, answered by {', '.join(answered)}"] if answered else []) \
        + ([f"scripted replies: {'; '.join(by) or 'a stand-in'}"] if scripted else [])
    llm = model + (f" ({'; '.join(about)})" if about else "")
    if device is None:
        evaluator = None
    else:
        evaluator = "fake" if is_fake(device) else "cuda"
    notes = []
    if scripted:
        notes.append("scripted LLM replies, not a model's ideas")
    if is_fake(device):
        notes.append("fake evaluator: speedups are NOT measurements")
    labels.update(problem=problem, llm=llm, model=model, scripted=bool(scripted),
                  evaluator=evaluator, device=device, budget_tokens=budget, settings=settings,
                  caveat="; ".join(notes),
                  seeds=sorted({r["seed"] for r in rows}),
                  not_finished=[run_name(r) for r in rows if not r["finished"]])
    return labels


def check_flags(args: argparse.Namespace, named: list[tuple[str, dict[str, Any]]], *,
                model: str, scripted: bool | None, device: str | None,
                budget: int | None) -> None:
    """--report-only: the flags given that say how the runs were made must be what the runs
    stored. Raises: EvokernelError naming the first that is not."""
    def refuse(what: str) -> None:
        raise EvokernelError(f"{what}: the report's labels are the runs' own; drop the flag or "
                             "give the runs' value")
    if args.model and model != args.model:
        refuse(f"--model {args.model}: the runs' model (llm.model) is {model}")
    if (args.mock or args.mock_server) and scripted is False:
        refuse(f"--{'mock' if args.mock else 'mock-server'}: the runs' replies are a model's "
               f"({model}), not scripted")
    if args.evaluator and device and ("fake" if is_fake(device) else "cuda") != args.evaluator:
        refuse(f"--evaluator {args.evaluator}: the runs were evaluated by {device}")
    if args.budget_tokens is not None and budget != args.budget_tokens:
        refuse(f"--budget-tokens {args.budget_tokens}: the runs' budget (llm.max_total_tokens) "
               f"is {budget if budget is not None else 'none'}")
    given = {SHAPE_FLAGS[f]: getattr(args, f) for f in SHAPE_FLAGS
             if getattr(args, f) is not None}
    flags = {v: f"--{k.replace('_', '-')}" for k, v in SHAPE_FLAGS.items()}
    if args.no_repair:
        given["repair_attempts"], flags["repair_attempts"] = 0, "--no-repair"
    for name, row in named:
        stored = SearchConfig(**row["search"])
        wanted = preset(row["arm"], dataclasses.replace(stored, **given))
        wrong = [f"{flags.get(k, k)} asks {k}={getattr(wanted, k)!r}, the run has "
                 f"{getattr(stored, k)!r}" for k in given
                 if getattr(wanted, k) != getattr(stored, k)]
        if wrong:
            refuse(f"{name}: {'; '.join(wrong)}")


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


def arm_line(arm: str, sc: dict[str, Any]) -> str:
    """What one arm does per generation, from its stored search settings."""
    p, o = sc["population_size"], sc["offspring_per_generation"]
    k, m = sc["ideas_per_call"], sc["implementations_per_idea"]
    what = {"best_of_n": f"{o} samples ({k} idea x {m} implementation) of the seed per generation",
            "sequential": f"{k} idea x {m} implementation of the best so far per generation",
            "branching": f"{p} kept x k={k} ideas x m={m} implementations",
            "evokernel": f"population {p}, {o} calls per generation, k={k}, m={m}"}[arm]
    return (f"{arm}: {what}; at most {sc['generations']} generations, repair "
            f"{'off' if not sc['repair_attempts'] else sc['repair_attempts']}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _mean_known(values: Any) -> float | None:
    """The mean of the values that are known (not None); None when none is."""
    known = [v for v in values if v is not None]
    return statistics.mean(known) if known else None


def markdown(rows: list[dict[str, Any]], labels: dict[str, Any]) -> str:
    """The report; every label in it is from ``labels`` (stored_labels: what the runs stored)."""
    note = labels["caveat"]
    evaluator = {"fake": "fake", "cuda": f"cuda ({labels['device']})",
                 None: "none yet (no kernel evaluated)"}[labels["evaluator"]]
    budget = labels["budget_tokens"]
    lines = [f"# One token budget, four ways, on {labels['problem']}", "",
             f"LLM: {labels['llm']}; evaluator: {evaluator}" + (f" ({note})" if note else "")
             + f"; token budget per arm: {budget if budget is not None else 'none'}; seeds "
               f"{','.join(map(str, labels['seeds']))}.", ""]
    lines += [f"- {arm_line(arm, sc)}" for arm, sc in labels["settings"].items()]
    if labels["not_finished"]:
        which = "; ".join(f"{run_name(r)} ({r['stopped']}: "
                          f"{NOT_FINISHED.get(r['stopped'], 'not finished')})"
                          for r in rows if not r["finished"])
        lines += ["", f"NOT FINISHED: {which}: their numbers are those so far, not at the end "
                  "of the budget, and the means below include them (marked *)."]
    lines += ["", "The budget is checked between generations, so a run's last generation can pass "
              "it; \"within budget\" is the best after the last generation that ended within "
              "it, the fair reading across arms.",
              "", "| arm | seed | best speedup | within budget | tokens | "
              "LLM requests (replayed) | candidates (accepted, waiting) | distinct ideas | generations |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['best_speedup']:.3f}x | "
                     f"{_x(r['best_within_budget'])} | {r['tokens']} | "
                     f"{r['llm_requests']} ({r['llm_calls'] - r['llm_requests']}) | "
                     f"{r['candidates']} ({r['accepted']}"
                     f"{', %d waiting' % r['waiting'] if r.get('waiting') else ''}) | "
                     f"{r['distinct_ideas']} | {r['generations']} ({r['stopped']}"
                     f"{'' if r['finished'] else ': NOT FINISHED'}) |")
    lines += ["", "| arm | mean best speedup | min-max | mean within budget | mean tokens | "
              "mean distinct ideas |", "|---|---|---|---|---|---|"]
    for arm in [a for a in ARMS if any(r["arm"] == a for r in rows)]:
        mine = [r for r in rows if r["arm"] == arm]
        best = [r["best_speedup"] for r in mine]
        open_ = sum(not r["finished"] for r in mine)
        name = f"{arm} *({open_} of {len(mine)} not finished)" if open_ else arm
        lines.append(f"| {name} | {statistics.mean(best):.3f}x | {min(best):.3f}-"
                     f"{max(best):.3f}x | "
                     f"{_x(_mean_known(r['best_within_budget'] for r in mine))} | "
                     f"{statistics.mean(r['tokens'] for r in mine):.0f} | "
                     f"{statistics.mean(r['distinct_ideas'] for r in mine):.1f} |")
    lines += ["", "Best speedup after each generation (tokens spent by then):", ""]
    for r in rows:
        steps = ", ".join(f"{p['generation']}: {p['best_speedup']:.3f}x"
                          + (f" ({p['tokens']})" if p["tokens"] is not None else "")
                          for p in r["per_generation"])
        lines.append(f"- {r['arm']} seed {r['seed']}"
                     f"{'' if r['finished'] else ' (NOT FINISHED: ' + r['stopped'] + ')'}: "
                     f"{steps}")
    lines += ["", "![best so far against tokens](ablation.png)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every arm for every seed (with --report-only, read them); returns what
    ablation.json holds. With --report-only nothing is written unless the runs agree with each
    other and with the flags given (stored_labels)."""
    args = parse_args(argv)
    common.configure_logging(args.verbose)
    seeds = seed_list(args)
    if args.report_only:
        root = Path(args.run_root)
        rows = read_runs(args, root, seeds)
    else:
        common.require_gpu(args)                 # before any folder is made
        load_problem(args.problem)               # a bad problem: nothing created either
        root = Path(args.run_root or f"runs/ablation-{time.strftime('%Y%m%d-%H%M%S')}")
        root.mkdir(parents=True, exist_ok=True)
        print(f"ablation on {args.problem}: LLM {common.llm_label(args)}, evaluator "
              f"{args.evaluator}, budget {args.budget_tokens} tokens per arm, runs in {root}",
              flush=True)
        with common.llm_server(args):
            rows = [run_arm(args, arm, seed, root / f"{arm}-s{seed}")
                    for seed in seeds for arm in arm_list(args)]
    labels = stored_labels(rows, args)           # raises before anything is written
    report = markdown(rows, labels)
    title = f"{labels['problem']}: best so far against tokens ({labels['llm']})"
    if labels["caveat"]:
        title += f"\n{labels['caveat']}"
    if labels["not_finished"]:
        title += f"\nnot finished: {', '.join(labels['not_finished'])}"
    plot(rows, root / "ablation.png", title)
    data = {**{k: labels[k] for k in ("problem", "llm", "model", "scripted", "evaluator",
                                      "device", "caveat", "budget_tokens", "settings",
                                      "not_finished")},
            "args": vars(args), "arms": rows}
    (root / "ablation.md").write_text(report)
    (root / "ablation.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(report, flush=True)
    return data


if __name__ == "__main__":
    sys.exit(common.run_script("ablation_branching", main))
