"""What each operator call of a generation is told (operators.base.SearchContext).

Built once per generation from the candidates of the earlier generations (``GenerationContexts``),
then per call: its own seeded RNG, its parents' lineage (the attempts on the way to them and
from each step, with the gain over each parent and a rejection's detail), inspirations from the
archive's elites of other lineages, its assigned idea category and call index, and the ideas
already spent on its parents (``taken_ideas``; the search adds the generation's other ideas
before the implementation phase, evokernel.search.variation).
"""
from __future__ import annotations

import random
from typing import Any, Callable, Mapping

from evokernel.config import SearchConfig
from evokernel.operators.base import SearchContext
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult
from evokernel.search.archive import INSPIRATIONS, Archive
from evokernel.search.lineage import LineageIndex
from evokernel.search.variation import Plan


class GenerationContexts:
    """The contexts of generation ``generation``'s calls.

    Args:
        candidates, results: every candidate (proposal order) and verdict so far; only those of
            earlier generations are shown to the calls.
        fitness: a verdict's fitness.
        problem, llm, device, search: what every context carries.
    """

    def __init__(self, *, generation: int, candidates: Mapping[str, Candidate],
                 results: Mapping[str, EvalResult], fitness: Callable[[EvalResult], float],
                 problem: Problem, llm: Any, device: Mapping[str, Any], search: SearchConfig):
        self.generation = generation
        older = {cid: c for cid, c in candidates.items() if c.generation < generation}
        self.results = {cid: r for cid, r in results.items() if cid in older}
        self.lineage = LineageIndex(older, self.results, fitness)
        self.archive = Archive.rebuild(older, self.results, fitness)
        self.seen = frozenset(older)
        attempts = (self.lineage.attempt(cid) for cid, c in older.items() if c.operator != "seed")
        self.history = tuple(a for a in attempts if a is not None)
        self.problem, self.llm, self.device, self.search = problem, llm, dict(device), search

    def _known_ids(self, plan: Plan) -> list[str]:
        """The plan's parents as indexed kernels: a parent of this generation (a repair's
        rejected child) stands for its own parents."""
        ids: list[str] = []
        for p in plan.parents:
            ids.extend([p.id] if p.id in self.seen else p.parent_ids)
        return list(dict.fromkeys(ids))

    def context(self, plan: Plan) -> SearchContext:
        """The SearchContext of one planned call."""
        ids = self._known_ids(plan)
        taken = [i for pid in ids for i in self.lineage.tried_ideas(pid)]
        return SearchContext(
            problem=self.problem, generation=self.generation, rng=random.Random(plan.seed),
            llm=self.llm, results=self.results, history=self.history, seen_ids=self.seen,
            device=self.device, ideas_per_call=self.search.ideas_per_call,
            implementations_per_idea=self.search.implementations_per_idea,
            lineage=tuple(self.lineage.lineage(ids)),
            inspirations=tuple(self.archive.inspirations(ids, self.lineage, n=INSPIRATIONS,
                                                         offset=plan.call_index)),
            category=plan.category, taken_ideas=tuple(dict.fromkeys(taken)),
            call_index=plan.call_index, candidate_form=self.search.candidate_form)
