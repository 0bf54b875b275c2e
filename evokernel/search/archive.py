"""A MAP-Elites archive over (idea category x bottleneck), and the survival selection that keeps
one kernel per cell before it keeps the next-fastest.

MAP-Elites (Mouret and Clune, "Illuminating search spaces by mapping elites", 2015) keeps the best
solution found in each cell of a grid of behaviour descriptors. Here a kernel's descriptor is:

- its **idea category**: the ``[category]`` tag its idea carries (operators.parsing keeps the
  category the model gave, one of operators.prompts.CATEGORY_KEYS; an unknown tag counts as
  ``other``); a child whose idea has no tag inherits its first parent's category (a tune or a
  repair keeps its parent's technique), an untagged child of two parents is ``merge``, and a
  kernel with no parents is ``seed``;
- its **bottleneck**: what bounds its measured time, read from the verdict (``bottleneck``).

The archive supplies each LLM call with *inspirations*: elites of other lineages (kernels that
are neither ancestors nor descendants of the call's parents, evokernel.search.lineage), so a
prompt can learn from techniques that worked elsewhere.
"""
from __future__ import annotations

import re
from typing import Callable, Hashable, Mapping, Sequence

from deap import tools

from evokernel.operators.prompts import CATEGORY_KEYS
from evokernel.records import Candidate, EvalResult
from evokernel.search.lineage import LineageIndex

#: A kernel within this factor of a floor (memory: minimum bytes over copy bandwidth; compute:
#: FLOPs over the FP32 rate, evokernel.timing.floor) is bound by that resource (roofline model:
#: Williams, Waterman and Patterson, CACM 2009). 1.5 is a stated choice, not a measured one.
NEAR_FLOOR = 1.5
#: A kernel whose profiled GPU time covers less than this share of its measured time spends the
#: rest on the host (launches, Python, synchronisation): "host"-bound.
HOST_SHARE = 0.5
#: Inspirations given to one call.
INSPIRATIONS = 2

_TAG = re.compile(r"^\s*\[([^\]]+)\]")


def bottleneck(result: EvalResult) -> str:
    """What bounds an accepted kernel's time, from its verdict, first match wins:

    ``host``: its kernels' profiled GPU time is under HOST_SHARE of its measured time;
    ``spills``: ptxas reports register spills in one of its kernels;
    ``memory`` / ``compute``: within NEAR_FLOOR of the binding floor, the larger of the memory
        and the compute floor (the roofline's bound for this problem), named by it;
    ``latency``: further from the binding floor (occupancy, dependencies, too little
        parallelism);
    ``unknown``: no floor and no profile to judge by (e.g. a stand-in evaluator).
    Returns "rejected" for a rejected verdict (rejected kernels are never elites).
    """
    if not result.accepted:
        return "rejected"
    ms = result.candidate_ms
    gpu_ms = sum(k.gpu_us for k in result.kernels) / 1000.0
    if ms and result.kernels and gpu_ms < HOST_SHARE * ms:
        return "host"
    if any(r.spill_store_bytes or r.spill_load_bytes for r in result.resources):
        return "spills"
    floors = {name: f for name, f in (("memory", result.floor_ms),
                                      ("compute", result.compute_floor_ms)) if f}
    if ms and floors:
        name = max(floors, key=floors.__getitem__)
        return name if ms <= NEAR_FLOOR * floors[name] else "latency"
    return "latency" if ms and result.kernels else "unknown"


def tagged_category(idea: str) -> str | None:
    """The ``[category]`` tag at the start of an idea: a CATEGORY_KEYS key, ``other`` for an
    unknown tag, None when there is no tag."""
    m = _TAG.match(idea or "")
    if m is None:
        return None
    key = m.group(1).strip().lower()
    return key if key in CATEGORY_KEYS else "other"


class Archive:
    """The MAP-Elites grid of a run: each cell's elite, and every kernel's cell.

    Build it by ``observe``-ing candidates in proposal order (parents before children), each
    with its verdict; a cell's elite is its fittest accepted kernel, the earliest on a tie, so
    the archive is a function of the run store and a resumed run rebuilds the same one.

    Args:
        fitness: a verdict's fitness (speedup over the run's baseline; 0.0 when rejected).
    """

    def __init__(self, fitness: Callable[[EvalResult], float]):
        self.fitness = fitness
        self.category: dict[str, str] = {}
        self.cell: dict[str, tuple[str, str]] = {}
        self.elites: dict[tuple[str, str], tuple[Candidate, EvalResult]] = {}

    def __len__(self) -> int:
        """The number of filled cells."""
        return len(self.elites)

    def observe(self, cand: Candidate, result: EvalResult | None) -> None:
        """Give ``cand`` its category and, once it has a verdict, its cell; an accepted kernel
        fitter than its cell's elite (strictly) becomes the elite."""
        cat = tagged_category(cand.idea)
        if cat is None:
            if len(cand.parent_ids) >= 2:
                cat = "merge"
            elif cand.parent_ids:
                cat = self.category.get(cand.parent_ids[0], "other")
            else:
                cat = "seed"
        self.category[cand.id] = cat
        if result is None:
            return
        cell = (cat, bottleneck(result))
        self.cell[cand.id] = cell
        if not result.accepted:
            return
        elite = self.elites.get(cell)
        if elite is None or self.fitness(result) > self.fitness(elite[1]):
            self.elites[cell] = (cand, result)

    @classmethod
    def rebuild(cls, candidates: Mapping[str, Candidate], results: Mapping[str, EvalResult],
                fitness: Callable[[EvalResult], float]) -> "Archive":
        """The archive of ``candidates`` (in proposal order) with their ``results``."""
        archive = cls(fitness)
        for cid, c in candidates.items():
            archive.observe(c, results.get(cid))
        return archive

    def niche(self, cid: str) -> Hashable:
        """The cell of ``cid`` (its id alone when it has none yet)."""
        return self.cell.get(cid, ("?", cid))

    def inspirations(self, parent_ids: Sequence[str], lineage: LineageIndex, *,
                     n: int = INSPIRATIONS, offset: int = 0) -> list[tuple[Candidate, EvalResult]]:
        """Up to ``n`` elites of other lineages than ``parent_ids`` (related to none of them).

        Elites are ranked by fitness (cell order on a tie); call ``offset`` starts at rank
        ``offset`` mod their number, so the calls of a generation get different ones.
        """
        others = [(c, r) for c, r in self.elites.values()
                  if not any(lineage.related(c.id, p) for p in parent_ids)]
        if not others or n < 1:
            return []
        others.sort(key=lambda e: -self.fitness(e[1]))
        start = offset % len(others)
        return [others[(start + j) % len(others)] for j in range(min(n, len(others)))]


def sel_niches(individuals: Sequence, k: int, niche: Callable[[object], Hashable]) -> list:
    """Survival selection: the fittest individual of each niche first (fittest niche first),
    then the fittest of the rest, ``k`` in all. The overall best is always kept (elitism), and
    with one niche this is DEAP's ``selBest``.

    Args:
        individuals: DEAP individuals (a ``fitness`` attribute).
        k: how many to keep.
        niche: an individual's niche (evokernel: its archive cell, ``Archive.niche``).
    Returns: at most ``k`` individuals, in the order they were chosen.
    """
    ranked = tools.selBest(list(individuals), len(individuals))
    chosen: list = []
    filled: set[Hashable] = set()
    for ind in ranked:
        if len(chosen) >= k:
            return chosen
        cell = niche(ind)
        if cell not in filled:
            filled.add(cell)
            chosen.append(ind)
    picked = {id(i) for i in chosen}
    chosen += [i for i in ranked if id(i) not in picked][:max(0, k - len(chosen))]
    return chosen
