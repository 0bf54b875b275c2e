"""What DEAP sees of the search: the individual and its fitness, the toolbox, the batch-evaluating
``map``, the statistics, and DEAP's global random number generator seeded by the run.

The toolbox (a ``deap.base.Toolbox``, on ``Evolution.toolbox``) holds, as a DEAP user expects:

``evaluate(individual) -> EvalResult``
    judge one individual's kernel (build, gate, time). It returns the whole verdict, not only the
    fitness tuple, because the run store keeps the verdict; the loop sets
    ``individual.fitness.values = (speedup,)`` from it.
``map(evaluate, individuals)``
    the one seam through which a batch is evaluated. The default, ``batch_map``, hands the whole
    batch to the evaluator at once (it spreads it over every GPU and stores each verdict as it
    comes); register another (a process pool's, Dask's, SCOOP's ``map``) to evaluate elsewhere.
``mutate(parent, ctx) -> [Candidate, ...]`` and ``mate(parent_a, parent_b, ctx) -> [...]``
    the variation: one operator call on parent Candidates (evokernel.operators.base), returning
    its children. The defaults are ``OperatorChoice``s over ``Evolution(mutations=...,
    crossovers=...)``: each planned call draws one of them.
``select(individuals, k)``
    survival selection of the (mu + lambda) loop (evokernel.search.archive.sel_niches);
``select_parents(individuals, k)``
    parent selection: DEAP's ``selTournament`` with ``tournsize=2``.

DEAP's operators draw from the global ``random`` module. ``seeded_global_random`` lends it the
run's own generator for the length of a block and puts the caller's state back afterwards, so a
run draws the same numbers whatever else uses ``random``, a resumed run goes on exactly where the
killed one stopped, and the user's own state is left as it was.
"""
from __future__ import annotations

import functools
import random
import statistics
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

from deap import base, tools

from evokernel.errors import ConfigError
from evokernel.records import Candidate, EvalResult

#: The Logbook's columns, in order (evokernel show prints them).
LOGBOOK_HEADER = ("gen", "nevals", "accepted", "cells", "max", "median", "min", "tokens")


class SpeedupFitness(base.Fitness):
    """DEAP fitness: one objective, speedup over the run's baseline, maximized. Rejected: 0."""

    weights = (1.0,)


class Individual:
    """A DEAP individual: a candidate kernel and its ``(speedup,)`` fitness (invalid until the
    candidate is evaluated, as for any DEAP offspring)."""

    __slots__ = ("candidate", "fitness")

    def __init__(self, candidate: Candidate, speedup: float | None = None):
        self.candidate = candidate
        self.fitness = SpeedupFitness() if speedup is None else SpeedupFitness((speedup,))

    def __repr__(self) -> str:
        value = f"{self.fitness.values[0]:.3f}x" if self.fitness.valid else "not evaluated"
        return f"Individual({self.candidate.id}, {value})"


def operator_name(op: Any) -> str:
    """The name an operator's children record: its ``name``, else its function's name (an
    operator registered on a toolbox is a ``functools.partial``)."""
    func = op.func if isinstance(op, functools.partial) else op
    for owner in (op, func):
        name = getattr(owner, "name", None)
        if isinstance(name, str) and name:
            return name
    return getattr(func, "__name__", type(func).__name__)


class OperatorChoice:
    """The default ``toolbox.mutate`` / ``toolbox.mate``: one of ``operators`` per call, drawn
    uniformly. The search draws while planning (``choose``, DEAP's global RNG seeded by the
    run); called directly, it draws from ``ctx.rng``.

    Raises: ValueError for an empty list.
    """

    def __init__(self, operators: Sequence[Any]):
        if not operators:
            raise ValueError("OperatorChoice needs at least one operator")
        self.operators = list(operators)

    def choose(self, rng: Any = random) -> Any:
        return rng.choice(self.operators)

    def __call__(self, *args: Any) -> list[Candidate]:
        ctx = args[-1]
        return self.choose(ctx.rng)(*args)


def resolve(registered: Any) -> Any:
    """The operator one planned call runs: an OperatorChoice's draw (from the global RNG, so
    call inside ``seeded_global_random``), or the registered operator itself. A partial without
    bound arguments is unwrapped, so an operator object registered as is keeps its methods."""
    func = registered.func if isinstance(registered, functools.partial) else registered
    if isinstance(func, OperatorChoice):
        return func.choose()
    if isinstance(registered, functools.partial) and not registered.args \
            and not registered.keywords:
        return func
    return registered


class KernelEvaluation:
    """The default ``toolbox.evaluate``: one individual's verdict from the run's evaluator.

    ``evaluator`` and ``on_result`` (the run store's writer) are set when the run starts.
    ``batch`` evaluates many at once; ``batch_map`` uses it.
    """

    def __init__(self) -> None:
        self.evaluator: Any = None
        self.on_result: Callable[[EvalResult], None] | None = None

    def __call__(self, individual: Individual) -> EvalResult:
        return self.batch([individual])[0]

    def batch(self, individuals: Sequence[Individual]) -> list[EvalResult]:
        if self.evaluator is None:
            raise ConfigError("toolbox.evaluate: no evaluator yet (Evolution.run sets it)")
        return list(self.evaluator.evaluate([i.candidate for i in individuals],
                                            on_result=self.on_result))


def batch_map(func: Callable[..., Any], *iterables: Iterable[Any]) -> list[Any]:
    """The default ``toolbox.map``: ``func.batch(items)`` in one call when ``func`` can take a
    batch (the default evaluate), else the builtin ``map``. Returns a list."""
    batch = getattr(func, "batch", None)
    if batch is None and isinstance(func, functools.partial) and not func.args \
            and not func.keywords:
        batch = getattr(func.func, "batch", None)
    if batch is not None and len(iterables) == 1:
        return list(batch(list(iterables[0])))
    return list(map(func, *iterables))


@contextmanager
def seeded_global_random(rng: random.Random) -> Iterator[None]:
    """Within the block, the global ``random`` module draws from ``rng``'s state; afterwards
    ``rng`` holds the advanced state and the global state is what it was before. Not for
    blocks that run while other threads use ``random``."""
    saved = random.getstate()
    random.setstate(rng.getstate())
    try:
        yield
    finally:
        rng.setstate(random.getstate())
        random.setstate(saved)


def fitness_statistics() -> tools.Statistics:
    """DEAP Statistics of a population's speedups: max, median, min."""
    stats = tools.Statistics(key=lambda ind: ind.fitness.values[0])
    stats.register("max", max)
    stats.register("median", statistics.median)
    stats.register("min", min)
    return stats


def logbook_record(gen: int, population: Sequence[Individual], *, nevals: int, accepted: int,
                   cells: int, tokens: int) -> dict[str, Any]:
    """One Logbook record (LOGBOOK_HEADER): the generation, its distinct offspring (each
    evaluated once, however often the run was resumed), how many were accepted, the archive's
    filled cells, the population's max/median/min speedup after selection (DEAP Statistics),
    and the LLM tokens spent so far."""
    return {"gen": gen, "nevals": nevals, "accepted": accepted, "cells": cells,
            **fitness_statistics().compile(population), "tokens": tokens}


def new_logbook(records: Iterable[dict[str, Any]] = ()) -> tools.Logbook:
    """A DEAP Logbook with LOGBOOK_HEADER, holding ``records`` (as read from the run store)."""
    book = tools.Logbook()
    book.header = list(LOGBOOK_HEADER)
    for r in records:
        book.record(**r)
    return book
