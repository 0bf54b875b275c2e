"""Who descends from whom: each call's history is its parent's lineage, not the whole run's.

A candidate's *ancestors* are its parents, their parents, and so on (through every parent of a
crossover). The *lineage* of a set of kernels is those kernels, their ancestors, and the children
of all of these: what was tried on the way to the parent and from each step of it, with the gain
each child made over its own parent. Two kernels are *related* when one is the other's ancestor
(or they are the same); kernels that are not related belong to different lineages, which is what
the archive's inspirations and the crossover's second parent look for.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Mapping

from evokernel.operators.base import Attempt
from evokernel.records import Candidate, EvalResult

#: Operators whose ``idea`` is a generated label ("tune BLOCK=256", "seed kernel ...") rather than
#: an optimization idea: not counted as ideas already spent.
LABEL_OPERATORS = frozenset({"seed", "tune"})


def rejection_detail(result: EvalResult) -> str:
    """The rejection's detail for a prompt's history: the verdict's detail and, when the gate
    measured them, the error ratios, their bound and the input distribution that decided, e.g.
    ``"fp16 (fake); error 300x (norm), 280x (max) of PyTorch's FP32 error, bound 16x, on
    'offset' inputs"``. "" for an accepted result."""
    if result.accepted:
        return ""
    parts = [result.detail.splitlines()[0].strip()] if result.detail.strip() else []
    if result.norm_error_ratio is not None or result.max_error_ratio is not None:
        ratio = (f"error {_x(result.norm_error_ratio)} (norm), {_x(result.max_error_ratio)} "
                 "(max) of PyTorch's FP32 error")
        if result.tolerance_factor is not None:
            ratio += f", bound {_x(result.tolerance_factor)}"
        if result.distribution:
            ratio += f", on '{result.distribution}' inputs"
        parts.append(ratio)
    return "; ".join(parts)


def _x(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g}x"


class LineageIndex:
    """Parent and child links over a run's candidates, with each one as an Attempt.

    Args:
        candidates: candidates by id, in the order they were proposed (the run store's order);
            only these are indexed (the search passes those of earlier generations).
        results: verdicts by id; a candidate without one is left out of the attempts.
        fitness: a verdict's fitness (speedup over the run's baseline; 0.0 when rejected).
    """

    def __init__(self, candidates: Mapping[str, Candidate], results: Mapping[str, EvalResult],
                 fitness: Callable[[EvalResult], float]):
        self.candidates = candidates
        self.results = results
        self.fitness = fitness
        self.children: dict[str, list[str]] = defaultdict(list)
        for cid, c in candidates.items():
            for p in dict.fromkeys(c.parent_ids):
                self.children[p].append(cid)
        self._ancestors: dict[str, frozenset[str]] = {}

    def ancestors(self, cid: str) -> frozenset[str]:
        """Every ancestor of ``cid`` among the indexed candidates (not ``cid`` itself)."""
        done = self._ancestors.get(cid)
        if done is not None:
            return done
        out: set[str] = set()
        todo = list(self._parents(cid))
        while todo:                          # iterative: lineages can be hundreds deep
            p = todo.pop()
            if p in out:
                continue
            out.add(p)
            known = self._ancestors.get(p)
            if known is not None:
                out |= known
            else:
                todo.extend(self._parents(p))
        self._ancestors[cid] = frozenset(out)
        return self._ancestors[cid]

    def _parents(self, cid: str) -> tuple[str, ...]:
        c = self.candidates.get(cid)
        return c.parent_ids if c is not None else ()

    def related(self, a: str, b: str) -> bool:
        """True when ``a`` and ``b`` are the same kernel or one descends from the other."""
        return a == b or a in self.ancestors(b) or b in self.ancestors(a)

    def attempt(self, cid: str) -> Attempt | None:
        """``cid`` as an Attempt (None without a verdict): its fitness, its first parent's
        fitness (so ``gain`` is the improvement over that parent) and a rejection's detail."""
        c, r = self.candidates.get(cid), self.results.get(cid)
        if c is None or r is None:
            return None
        parent = self.results.get(c.parent_ids[0]) if c.parent_ids else None
        return Attempt(idea=c.idea, operator=c.operator, speedup=self.fitness(r),
                       reason=r.reason.value,
                       parent_speedup=self.fitness(parent) if parent is not None else None,
                       detail=rejection_detail(r), candidate_id=cid, generation=c.generation)

    def lineage(self, ids: Iterable[str]) -> list[Attempt]:
        """The attempts of the lineage of ``ids``: the kernels, their ancestors and every child
        of these, oldest first (the seed, which has no parent, is not an attempt)."""
        core: set[str] = set()
        for cid in ids:
            core.add(cid)
            core |= self.ancestors(cid)
        members = set(core)
        for cid in core:
            members.update(self.children.get(cid, ()))
        out = []
        for cid in self.candidates:          # proposal order
            if cid in members and self.candidates[cid].parent_ids:
                a = self.attempt(cid)
                if a is not None:
                    out.append(a)
        return out

    def tried_ideas(self, cid: str) -> list[str]:
        """Ideas already spent on ``cid``: the ideas of the path that led to it (they are in its
        source) and those of its children (tried from it). Children without an idea, and the
        labels of LABEL_OPERATORS, are skipped."""
        path = [a for a in self.candidates if a in self.ancestors(cid) or a == cid]
        kids = list(self.children.get(cid, ()))
        ideas = [self.candidates[i].idea for i in path + kids
                 if self.candidates[i].operator not in LABEL_OPERATORS]
        return [i for i in dict.fromkeys(ideas) if i.strip()]
