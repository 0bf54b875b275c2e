"""Planning a generation's operator calls, making them in phases, and ring migration.

Planning (``plan_island``) decides every call before any is made, drawing from DEAP's global RNG
inside ``seeded_global_random`` (evokernel.search.toolbox): the split of DEAP's ``varOr`` (a
crossover with probability cxpb, else a mutation with probability mutpb), parents by
``toolbox.select_parents`` (DEAP's ``selTournament``) among the individuals not yet used as a
parent this generation, so calls get different parents while the population allows, and a
crossover's second parent from another lineage than the first where there is one.
``number_calls`` then gives each call its index in the generation and an idea category, in
rotation (operators.prompts.CATEGORY_KEYS; idea-writing calls first).

``varOr`` itself is not called: it picks parents uniformly with repeats and applies operators
one at a time, each returning one child, while here parents must differ across calls and one
call is an LLM round trip returning k x m children, made concurrently with the others.

Making the calls (``run_calls``), all I/O-bound, in two phases:

1. every IdeasFirst call's ``propose`` at once (the idea mutation's ideas requests);
2. near-duplicate ideas across the generation dropped (evokernel.search.diversity; in call-index
   order, so the outcome does not depend on which reply came first), then every other call at
   once: the kept ideas' implementations, crossovers, tunes, repairs; each told every idea kept
   in the generation (``SearchContext.taken_ideas``).

A request that the batch LLM mode wrote out instead of sending (LLMPending) does not stop the
others of its phase: all are written, then LLMPending is raised for the search to stop on.
"""
from __future__ import annotations

import dataclasses
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from deap import tools
from loguru import logger

from evokernel.errors import LLMPending
from evokernel.operators.base import IdeasFirst, SearchContext
from evokernel.operators.prompts import CATEGORY_KEYS
from evokernel.records import Candidate, EvalResult
from evokernel.search.diversity import drop_near_duplicates, rotate_categories
from evokernel.search.toolbox import operator_name, resolve

#: Most operator calls in flight at once (each may start its own LLM threads).
MAX_CALLS_IN_FLIGHT = 32


class Scored(Protocol):
    """What planning and migration need of an individual (evokernel.search.toolbox.Individual)."""

    candidate: Candidate
    fitness: Any            # a DEAP Fitness; ``values[0]`` is the speedup


@dataclass(frozen=True)
class Plan:
    """One operator call, decided before any call is made.

    Attributes:
        operator: a Mutation, Crossover, IdeasFirst mutation or RepairOperator.
        parents: its parents (one, two, or the rejected candidate for a repair).
        seed: the seed of the call's own RNG (``SearchContext.rng``).
        repair_of: the rejected candidate's result, for a repair call; else None.
        island: the island whose offspring the children join (0 without islands).
        call_index: its index among the generation's calls (``SearchContext.call_index``).
        category: the idea category assigned to it, or None (``SearchContext.category``).
    """

    operator: Any
    parents: tuple[Candidate, ...]
    seed: int
    repair_of: EvalResult | None = None
    island: int = 0
    call_index: int = 0
    category: str | None = None


def two_phase(p: Plan) -> bool:
    """Whether the call runs as ideas first, implementations after (operators.base.IdeasFirst)."""
    return p.repair_of is None and isinstance(p.operator, IdeasFirst)


def plan_island(population: Sequence[Scored], toolbox: Any, related: Callable[[str, str], bool],
                *, lambda_: int, cxpb: float, mutpb: float, island: int = 0) -> list[Plan]:
    """``lambda_`` operator calls for one population; call inside ``seeded_global_random``.

    Args:
        population: the island's individuals (distinct).
        toolbox: has ``select_parents`` and at least one of ``mate`` and ``mutate``.
        related: whether two kernel ids share a lineage (evokernel.search.lineage).
        lambda_, cxpb, mutpb: DEAP's names: calls, crossover and mutation probabilities (a
            draw above cxpb + mutpb is a reproduction, which makes no call: evokernel never
            re-times a kernel).
    Returns: the plans, in order. A crossover needs two individuals; without them (or without
        ``mate``) its slot becomes a mutation.
    """
    mate, mutate = getattr(toolbox, "mate", None), getattr(toolbox, "mutate", None)
    used: set[str] = set()

    def pick(pool: Sequence[Scored]) -> Scored:
        fresh = [i for i in pool if i.candidate.id not in used] or list(pool)
        winner = toolbox.select_parents(fresh, 1)[0]
        used.add(winner.candidate.id)
        return winner
    plans = []
    for _ in range(lambda_):
        draw = random.random()
        if mate is not None and len(population) >= 2 and draw < cxpb:
            a = pick(population)
            rest = [i for i in population if i is not a]
            apart = [i for i in rest if not related(a.candidate.id, i.candidate.id)]
            b = pick(apart or rest)
            op, parents = resolve(mate), (a.candidate, b.candidate)
        elif mutate is not None and draw < cxpb + mutpb:
            op, parents = resolve(mutate), (pick(population).candidate,)
        else:
            continue
        plans.append(Plan(op, parents, random.getrandbits(64), island=island))
    return plans


def number_calls(plans: Sequence[Plan], *, first_index: int, generation: int,
                 categories: bool = True) -> list[Plan]:
    """The plans with their call indices (``first_index``, ``first_index + 1``, ...) and, with
    ``categories``, idea categories in rotation: the idea-writing (two-phase) calls take the
    first turns, the others the next; the rotation starts where the previous generation's idea
    calls left it, ``(generation - 1) * (number of idea calls)``, so a lineage is not asked for
    the same kind of idea every time."""
    order = sorted(range(len(plans)), key=lambda i: not two_phase(plans[i]))
    n_ideas = sum(two_phase(p) for p in plans)
    cats = rotate_categories(CATEGORY_KEYS, len(plans), max(0, generation - 1) * n_ideas) \
        if categories and plans else [None] * len(plans)
    category = {i: cats[rank] for rank, i in enumerate(order)}
    return [dataclasses.replace(p, call_index=first_index + i, category=category[i])
            for i, p in enumerate(plans)]


def _children(out: object, name: str, p: Plan, ctx: SearchContext) -> list[Candidate]:
    """An operator's return value as this generation's children: anything that is not a
    Candidate (or an individual holding one) is dropped with a warning, and a child made with
    ``Candidate(...)`` rather than ``ctx.child(...)`` gets the call's lineage."""
    if out is None:
        return []
    if isinstance(out, Candidate) or not isinstance(out, (list, tuple)):
        out = [out]
    kept = []
    for c in out:
        c = getattr(c, "candidate", c)          # a DEAP-style operator may return individuals
        if not isinstance(c, Candidate):
            logger.warning("operator {} returned a {} instead of a Candidate; dropped", name,
                           type(c).__name__)
            continue
        if c.generation != ctx.generation or c.operator == "seed" or not c.parent_ids:
            c = dataclasses.replace(
                c, generation=ctx.generation,
                operator=name if c.operator == "seed" else c.operator,
                parent_ids=c.parent_ids or tuple(q.id for q in p.parents))
        kept.append(c)
    return kept


def _concurrently(jobs: Sequence[Callable[[], Any] | None], names: Sequence[str],
                  empty: Any) -> tuple[list[Any], int]:
    """Run the jobs at once. A job that raises costs its own result (``empty``, with a
    warning: a user operator's bug does not stop the run); a None job is skipped (``empty``).
    Returns (results in job order, how many jobs raised LLMPending)."""
    def run(i: int) -> tuple[Any, bool]:
        job = jobs[i]
        if job is None:
            return empty, False
        try:
            return job(), False
        except LLMPending:
            return empty, True
        except Exception as e:
            logger.warning("operator {} failed ({}: {}); its children are lost, the run goes "
                           "on", names[i], type(e).__name__, e)
            logger.opt(exception=True).debug("operator {} traceback", names[i])
            return empty, False
    if not jobs:
        return [], 0
    with ThreadPoolExecutor(max_workers=min(MAX_CALLS_IN_FLIGHT, len(jobs))) as pool:
        out = list(pool.map(run, range(len(jobs))))
    return [r for r, _ in out], sum(p for _, p in out)


@dataclass(frozen=True)
class CallsOutcome:
    """What a batch of calls gave: each plan's new children (plan order), and the ideas
    dropped as near-duplicates, as (call index, dropped idea, the idea it repeats)."""

    children: list[list[Candidate]]
    dropped: list[tuple[int, str, str]]


def run_calls(plans: Sequence[Plan], context: Callable[[Plan], SearchContext],
              seen: set[str]) -> CallsOutcome:
    """Make the planned calls in the two phases of the module docstring.

    Args:
        plans: the calls, in call-index order.
        context: a call's SearchContext (its ``rng`` is ``random.Random(plan.seed)``; phase two
            gets the same context with ``taken_ideas`` extended, and the same RNG).
        seen: ids of candidates proposed before; children already in it, or proposed by an
            earlier plan of this batch, are dropped. Updated in place.
    Returns: a CallsOutcome ([] children for a call that raised).
    Raises: LLMPending when any request was written out for the batch API instead of sent
        (after every call that does not need a pending reply was made).
    """
    ctxs = [context(p) for p in plans]
    names = [operator_name(p.operator) for p in plans]
    phased = [i for i, p in enumerate(plans) if two_phase(p)]
    proposed, pending = _concurrently(
        [_job(plans[i].operator.propose, plans[i].parents[0], ctxs[i]) for i in phased],
        [names[i] for i in phased], [])
    kept, dropped = drop_near_duplicates(proposed, [ctxs[i].taken_ideas for i in phased])
    for i, idea, twin in dropped:
        logger.info("call {}: idea dropped as a near-duplicate of {!r}: {!r}",
                    plans[phased[i]].call_index, twin, idea)
    ideas = dict(zip(phased, kept))
    generation_ideas = [idea for mine in kept for idea in mine]
    jobs: list[Callable[[], Any] | None] = []
    for i, (p, ctx) in enumerate(zip(plans, ctxs)):
        mine = ideas.get(i, [])
        others = tuple(x for x in generation_ideas if x not in mine)
        ctx = dataclasses.replace(ctx, taken_ideas=tuple(ctx.taken_ideas) + others)
        if i in ideas:
            jobs.append(None if pending else _job(p.operator.implement, p.parents[0], mine, ctx))
        elif p.repair_of is not None:
            jobs.append(_job(p.operator, p.parents[0], p.repair_of, ctx))
        else:
            jobs.append(_job(p.operator, *p.parents, ctx))
        ctxs[i] = ctx
    outs, pending_now = _concurrently(jobs, names, None)
    pending += pending_now
    if pending:
        raise LLMPending(f"{pending} operator calls of generation {ctxs[0].generation} wait for "
                         "replies from the batch API")
    children = []
    for p, ctx, out, name in zip(plans, ctxs, outs, names):
        batch = []
        for c in _children(out, name, p, ctx):
            if c.id not in seen:
                seen.add(c.id)
                batch.append(c)
        children.append(batch)
    return CallsOutcome(children=children, dropped=dropped)


def _job(func: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: func(*args)


def migrate_ring(islands: Sequence[list[Scored]], migrants: int,
                 accepted: Callable[[Scored], bool]) -> list[list[Scored]]:
    """Ring migration with DEAP's ``migRing``: island i's ``migrants`` best accepted individuals
    (``selBest``) replace the worst of island i+1 (``selWorst``; the last island sends to the
    first). Emigrants are chosen among the accepted kernels not already on the receiving island
    (a rejected one never leaves its island), and an island receives at most as many as it has
    members.

    Returns new island lists; the inputs are not modified.
    """
    pops = [list(pop) for pop in islands]
    n = len(pops)
    if n < 2 or migrants < 1:
        return pops
    sending = []
    for k, pop in enumerate(pops):
        there = {i.candidate.id for i in pops[(k + 1) % n]}
        sending.append(tools.selBest([i for i in pop if accepted(i)
                                      and i.candidate.id not in there], migrants))
    replaced = [tools.selWorst(pop, min(len(sending[k - 1]), len(pop)))
                for k, pop in enumerate(pops)]
    index = {id(pop): k for k, pop in enumerate(pops)}
    tools.migRing(pops, migrants, selection=lambda pop, _k: sending[index[id(pop)]],
                  replacement=lambda pop, _k: replaced[index[id(pop)]])
    return pops
