"""Render, as Markdown, the prompts that one generation of a stored run sends to the LLM.

    python scripts/render_prompts.py RUN_DIR [--generation G] [--out FILE]

The requests are rebuilt from the run store with the operators' own prompt builders
(evokernel.operators.prompts): for each LLM-made child of generation G (default: the last one
with any), the request that made it. An idea child's parent gets one ideas request (k =
the run's ideas_per_call) and the child one implementation request; a crossover child one
crossover request on its two parents; a repair child one repair request on the rejected
candidate; a port child one port request. The context of each request is what the store holds
about the generations before G: results, the history of every lineage, and, rebuilt here (the
store does not record the search's own contexts): the lineage of the parent (its ancestors and
their children), up to two inspirations (the fastest accepted kernels outside that lineage),
the call index (the order below), the category (the idea's ``[category]`` tag) and the ideas
taken by the calls before. The run's device info is the GPU sheet; a run made with the fake
evaluator or the scripted LLM is labelled so at the top: its numbers are not measurements and
its ideas are not a model's.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path
from typing import Iterator

from evokernel.operators.base import Attempt, SearchContext
from evokernel.operators.prompts import (CATEGORY_KEYS, crossover_prompt, ideas_prompt,
                                         implement_prompt, port_prompt, repair_prompt)
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult
from evokernel.runs.store import RunStore


def attempts(cands: dict[str, Candidate], results: dict[str, EvalResult]) -> list[Attempt]:
    """The Attempt of every evaluated non-seed candidate, oldest first, with its parent's
    speedup (eager baseline) and its rejection's detail."""
    out = []
    for cid, c in cands.items():
        r = results.get(cid)
        if r is None or c.operator == "seed":
            continue
        parent = results.get(c.parent_ids[0]) if c.parent_ids else None
        out.append(Attempt(idea=c.idea, operator=c.operator, speedup=r.speedup,
                           reason=r.reason.value, parent_speedup=parent.speedup if parent else None,
                           detail="" if r.accepted else r.detail, candidate_id=cid,
                           generation=c.generation))
    return out


def lineage_ids(cands: dict[str, Candidate], cid: str) -> set[str]:
    """``cid``, its ancestors, and every child of any of them."""
    ancestors, todo = set(), [cid]
    while todo:
        x = todo.pop()
        if x in ancestors or x not in cands:
            continue
        ancestors.add(x)
        todo += list(cands[x].parent_ids)
    return ancestors | {k for k, c in cands.items() if set(c.parent_ids) & ancestors}


def requests(store: RunStore, problem: Problem, generation: int
             ) -> Iterator[tuple[str, Candidate, list[dict]]]:
    """(heading, child, messages) for each request generation ``generation`` made."""
    cands, results = store.candidates(), store.results()
    before = {k: c for k, c in cands.items() if c.generation < generation}
    known = {k: r for k, r in results.items() if k in before}
    every = attempts(before, known)
    search = store.config().search
    device, k, m = (store.meta().get("device") or {}, search.ideas_per_call,
                    search.implementations_per_idea)
    asked, taken, n = set(), [], 0
    for child in (c for c in cands.values() if c.generation == generation):
        if child.operator in ("seed", "tune"):
            continue
        first = child.parent_ids[0] if child.parent_ids else ""
        family = lineage_ids(before, first) if first else set()
        elites = sorted((c for c in before.values() if c.id not in family and c.id in known
                         and known[c.id].accepted), key=lambda c: -known[c.id].speedup)
        tag = re.match(r"\[(\w+)\]", child.idea or "")
        ctx = SearchContext(problem=problem, generation=generation, rng=random.Random(0),
                            results=known, history=every, device=device,
                            lineage=[a for a in every if a.candidate_id in family],
                            inspirations=[(c, known[c.id]) for c in elites[:2]],
                            category=tag.group(1) if tag and tag.group(1) in CATEGORY_KEYS
                            else None, taken_ideas=tuple(taken), call_index=n)
        for heading, messages in _messages(child, ctx, cands, results, k, m, asked):
            yield heading, child, messages
            n += 1
            ctx.call_index = n
        if child.idea:
            taken.append(child.idea)


def _messages(child: Candidate, ctx: SearchContext, cands: dict[str, Candidate],
              results: dict[str, EvalResult], k: int, m: int, asked: set[str]
              ) -> Iterator[tuple[str, list[dict]]]:
    """The request(s) that made ``child``: a repair's rejected parent may be of the same
    generation (it is repaired once its verdict is in), every other parent is older."""
    parents = [cands[p] for p in child.parent_ids if p in cands]
    if child.operator == "repair" and parents and parents[0].id in results:
        yield "repair", repair_prompt(ctx, parents[0], results[parents[0].id])
    elif child.operator == "port" or not parents:
        yield "port", port_prompt(ctx)
    elif child.operator == "crossover" and len(parents) == 2:
        yield "crossover", crossover_prompt(ctx, parents[0], parents[1])
    else:
        if parents[0].id not in asked:
            asked.add(parents[0].id)
            yield "ideas", ideas_prompt(ctx, parents[0], k)
        twins = [c.id for c in cands.values() if c.generation == child.generation and
                 c.operator == child.operator and c.parent_ids == child.parent_ids and
                 c.idea == child.idea]
        yield "implement", implement_prompt(ctx, parents[0], child.idea or "(no idea)",
                                            variant=(twins.index(child.id), max(m, len(twins))))


def stand_ins(store: RunStore) -> list[str]:
    """What in the run is not real: the fake evaluator's numbers, the scripted LLM's ideas."""
    notes = []
    device = str((store.meta().get("device") or {}).get("device", ""))
    if "fake" in device.lower():
        notes.append(f"RENDERED FROM FAKE NUMBERS: the run's evaluator was a stand-in "
                     f"({device}); its times, speedups, GPU sheet and reports are not "
                     "measurements.")
    models = {c.get("model", "") for c in store.llm_calls()}
    if any("scripted" in m or "mock" in m for m in models):
        notes.append(f"The LLM was the scripted stand-in ({', '.join(sorted(models))}): the "
                     "ideas and replies in the history were written by a script, not proposed "
                     "by a model.")
    return notes


def render(run_dir: Path, generation: int | None = None) -> str:
    """The Markdown of generation ``generation``'s requests (default: the last with any).
    Raises: ConfigError for a directory that holds no run; ValueError when the generation
    made no LLM request."""
    store = RunStore(run_dir, read_only=True)
    meta = store.meta()
    problem = Problem(name=(meta.get("problem") or {}).get("name", run_dir.name),
                      path=run_dir / "problem.py",
                      source=(run_dir / "problem.py").read_text(encoding="utf-8"))
    made = sorted({c.generation for c in store.candidates().values()
                   if c.operator not in ("seed", "tune")})
    if generation is None and made:
        generation = made[-1]
    if generation is None or generation not in made:
        raise ValueError(f"{run_dir}: generation {generation} made no LLM request "
                         f"(generations with some: {made or 'none'})")
    rendered = list(requests(store, problem, generation))
    system = rendered[0][2][0]["content"] if rendered else ""
    out = [f"# Prompts of generation {generation}: {problem.name} ({run_dir})", ""]
    out += [f"> **{note}**\n" for note in stand_ins(store)]
    out += [f"{len(rendered)} requests, rebuilt from the run store by "
            "scripts/render_prompts.py (see its docstring for what is rebuilt).", "",
            "## System prompt (the same for every request)", "", fence(system), ""]
    for i, (heading, child, messages) in enumerate(rendered):
        out += [f"## Request {i}: {heading} (child {child.id}, {child.operator}; parents "
                f"{', '.join(child.parent_ids) or 'none'})", "", fence(messages[-1]["content"]),
                ""]
    return "\n".join(out)


def fence(text: str) -> str:
    """``text`` in a fence longer than any run of backticks inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(4, longest + 1)
    return f"{ticks}text\n{text.rstrip()}\n{ticks}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--generation", type=int, default=None,
                    help="the generation to render (default: the last with LLM requests)")
    ap.add_argument("--out", type=Path, default=None, help="write here instead of stdout")
    args = ap.parse_args(argv)
    from evokernel.errors import ConfigError
    try:
        text = render(args.run_dir, args.generation)
    except (ConfigError, ValueError) as e:
        print(f"render_prompts: {e}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text + "\n")
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
