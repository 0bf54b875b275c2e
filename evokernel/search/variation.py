"""Planning and running a generation's variation, and moving kernels between islands.

The search (evokernel.search.evolution) decides every operator call of a generation first (``plan``), then
makes them all at once (``run_plans``): LLM calls are I/O-bound, so a generation's ideas,
implementations, crossovers and repairs are in flight together. Every random choice is drawn from
the run's seeded RNG while planning, and each call gets its own RNG seeded from it, so a run (or a
resumed run) with the same seed and replayed LLM replies makes the same calls and gets the same
children.
"""
from __future__ import annotations

import dataclasses

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

from deap import tools
from loguru import logger

from evokernel.operators.base import Crossover, Mutation, SearchContext
from evokernel.records import Candidate, EvalResult

#: Most operator calls in flight at once (each may start its own LLM threads).
MAX_CALLS_IN_FLIGHT = 32


class Scored(Protocol):
    """What planning and migration need of an individual (evokernel.search.evolution.Individual)."""

    candidate: Candidate
    fitness: Any            # a DEAP Fitness; ``values[0]`` is the speedup


@dataclass(frozen=True)
class Plan:
    """One operator call, decided before any call is made.

    Attributes:
        operator: a Mutation, Crossover or RepairOperator.
        parents: its parents (one, two, or the rejected candidate for a repair).
        seed: the seed of the call's own RNG (``SearchContext.rng``).
        repair_of: the rejected candidate's result, for a repair call; else None.
        island: the island whose offspring the children join (0 without islands).
    """

    operator: Any
    parents: tuple[Candidate, ...]
    seed: int
    repair_of: EvalResult | None = None
    island: int = 0


def tournament(population: Sequence[Scored], rng: random.Random, size: int = 2) -> Scored:
    """Tournament selection with the run's own RNG (DEAP's selTournament uses the global one).
    Returns the fittest of ``size`` individuals drawn with replacement."""
    contestants = [rng.choice(population) for _ in range(size)]
    return max(contestants, key=lambda i: i.fitness.values[0])


def plan(population: Sequence[Scored], rng: random.Random, n: int, *,
         mutations: Sequence[Mutation], crossovers: Sequence[Crossover],
         crossover_prob: float, island: int = 0) -> list[Plan]:
    """``n`` operator calls for one population (DEAP varOr's split: a crossover of two
    tournament winners with probability ``crossover_prob`` when there are crossovers and two
    individuals, else a mutation of one). Draws from ``rng`` in a fixed order."""
    plans = []
    for _ in range(n):
        if crossovers and len(population) >= 2 and rng.random() < crossover_prob:
            a = tournament(population, rng)
            b = tournament([i for i in population if i is not a], rng)
            plans.append(Plan(rng.choice(crossovers), (a.candidate, b.candidate),
                              rng.getrandbits(64), island=island))
        elif mutations:
            parent = tournament(population, rng)
            plans.append(Plan(rng.choice(mutations), (parent.candidate,), rng.getrandbits(64),
                              island=island))
    return plans


def _children(out: object, name: str, p: Plan, ctx: SearchContext) -> list[Candidate]:
    """An operator's return value as this generation's children: anything that is not a
    Candidate is dropped with a warning, and a child made with ``Candidate(...)`` rather than
    ``ctx.child(...)`` gets the call's lineage (operator, parents, generation)."""
    if out is None:
        return []
    if isinstance(out, Candidate) or not isinstance(out, (list, tuple)):
        out = [out]
    kept = []
    for c in out:
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


def run_plans(plans: Sequence[Plan], context: Callable[[Plan], SearchContext],
              seen: set[str]) -> list[list[Candidate]]:
    """Make the planned operator calls concurrently.

    Args:
        plans: the calls, in plan order.
        context: builds a call's SearchContext (with ``random.Random(plan.seed)`` as its RNG).
        seen: ids of candidates proposed in earlier generations; children already in it, or
            proposed by an earlier plan of this batch, are dropped. Updated in place.
    Returns: each plan's new children, in plan order ([] for a call that raised: a user
        operator's bug costs its children, not the run).
    """
    def call(p: Plan) -> list[Candidate]:
        ctx = context(p)
        name = getattr(p.operator, "name", type(p.operator).__name__)
        try:
            if p.repair_of is not None:
                out = p.operator(p.parents[0], p.repair_of, ctx)
            else:
                out = p.operator(*p.parents, ctx)
        except Exception as e:
            logger.warning("operator {} failed ({}: {}); its children are lost, the run goes on",
                           name, type(e).__name__, e)
            logger.opt(exception=True).debug("operator {} traceback", name)
            return []
        return _children(out, name, p, ctx)
    if not plans:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_CALLS_IN_FLIGHT, len(plans))) as pool:
        batches = list(pool.map(call, plans))
    out: list[list[Candidate]] = []
    for batch in batches:
        kept = []
        for c in batch:
            if c.id not in seen:
                seen.add(c.id)
                kept.append(c)
        out.append(kept)
    return out


def migrate_ring(islands: Sequence[list[Scored]], migrants: int, mu: int,
                 accepted: Callable[[Scored], bool]) -> list[list[Scored]]:
    """Ring migration (DEAP's ``migRing`` with ``selBest`` emigrants and worst-first
    replacement): the ``migrants`` best accepted individuals of island i join island i+1 (the
    last island's join the first), replacing its worst so it keeps at most ``mu``.

    All emigrants are chosen before any island changes. A kernel already on the receiving island
    is not sent twice. Returns new island lists; the inputs are not modified.
    """
    n = len(islands)
    if n < 2 or migrants < 1:
        return [list(pop) for pop in islands]
    emigrants = [tools.selBest([i for i in pop if accepted(i)], migrants) for pop in islands]
    out: list[list[Scored]] = []
    for k, pop in enumerate(islands):
        present = {i.candidate.id for i in pop}
        incoming = [i for i in emigrants[k - 1] if i.candidate.id not in present]
        keep = tools.selBest(list(pop), max(0, min(len(pop), mu - len(incoming))))
        out.append(keep + incoming)
    return out
