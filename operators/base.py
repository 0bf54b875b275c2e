"""What an operator is, and what it is given.

An operator is a small picklable class with a ``name``. It takes parents and returns new
candidates; it never builds, gates or times anything (the evaluator does). A user's own operator
is just another class with the same shape, passed to ``Evolution(mutations=[...])`` or
registered on the DEAP toolbox (``evolution.toolbox.register("mutate", op)``).

A mutation that first writes ideas and then implements them (``IdeasFirst``, such as the idea
mutation) is run in two phases by the search: every such call's ``propose`` first, all at once;
then near-duplicate ideas across the generation are dropped; then every ``implement`` together
with the generation's other calls (evokernel.search.variation).

An LLM reply with no usable code is returned as a candidate whose source is the reply text; the
evaluator rejects it with reason ``no_code`` and the run store keeps it, so nothing is lost.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult

if TYPE_CHECKING:  # evokernel.llm.client imports litellm; only its type is needed here
    from evokernel.llm.client import LLMClient


@dataclass(frozen=True)
class Attempt:
    """One idea already tried, and how it did: for the prompts' history.

    Attributes:
        idea: the idea text ("" when none was stated).
        operator: the operator that made the candidate ("idea", "crossover", "tune", ...).
        speedup: its fitness (speedup over the run's baseline); 0.0 when rejected.
        reason: its Reason value ("ok" when accepted).
        parent_speedup: the fitness of its (first) parent, when it has one; the gain over the
            parent is ``speedup / parent_speedup``.
        detail: the verdict's detail for a rejection (the reason's numbers: error ratios and the
            distribution that decided, the build error's first line, ...); "" when accepted.
        candidate_id: the candidate's id ("" when unknown).
        generation: the generation it was made in.
    """

    idea: str
    operator: str
    speedup: float          # 0.0 when rejected
    reason: str             # Reason value ("ok" when accepted)
    parent_speedup: float | None = None
    detail: str = ""
    candidate_id: str = ""
    generation: int = 0

    @property
    def gain(self) -> float | None:
        """speedup / parent_speedup for an accepted child of an accepted parent, else None."""
        if self.reason != "ok" or not self.parent_speedup:
            return None
        return self.speedup / self.parent_speedup


@dataclass
class SearchContext:
    """What an operator may look at when it proposes children.

    Attributes:
        problem: the reference problem (its source is the reference).
        generation: the generation being produced (1 for the first offspring).
        rng: this call's own seeded RNG; use it, not the global one, for reproducibility.
        llm: the LLM client, or None when no model is configured.
        results: evaluation results so far, by candidate id (parents are always in it).
        history: ideas tried so far with their outcomes, oldest first.
        seen_ids: ids of every candidate already proposed; don't propose them again.
        device: GPU properties for prompts (name, sm_count, shared_mem_per_block_kb, l2_mb,
            bandwidth_gbs, ...), or {} when unknown.
        ideas_per_call, implementations_per_idea: the idea mutation's k and m.
        lineage: the attempts of this call's parent's lineage (its ancestors and their other
            children), oldest first; ``history`` holds every lineage's.
        inspirations: accepted kernels from other lineages (an archive's elites) with their
            results, for the prompt to learn from; () when there are none.
        category: the idea category assigned to this call (operators.prompts.CATEGORY_KEYS,
            rotated over the generation's calls), so that they ask for different kinds of
            ideas; None: any (repair calls).
        taken_ideas: ideas this call must not repeat: those already spent on its parent (the
            ideas on the path to it and of its earlier children) and, for calls made after the
            generation's ideas phase (implementations, crossovers, tunes), every idea kept in
            this generation by the other calls (evokernel.search.variation).
        call_index: this call's index among the generation's calls (0, 1, ...; repair rounds go
            on counting), sent to the model so that no two requests of a generation are
            identical.
        candidate_form: the candidate form the run prefers: "load_inline", "nvrtc" or "any".
    """

    problem: Problem
    generation: int
    rng: random.Random
    llm: "LLMClient | None" = None
    results: Mapping[str, EvalResult] = field(default_factory=dict)
    history: Sequence[Attempt] = ()
    seen_ids: frozenset[str] = frozenset()
    device: Mapping[str, Any] = field(default_factory=dict)
    ideas_per_call: int = 3
    implementations_per_idea: int = 2
    lineage: Sequence[Attempt] = ()
    inspirations: Sequence[tuple[Candidate, EvalResult]] = ()
    category: str | None = None
    taken_ideas: Sequence[str] = ()
    call_index: int = 0
    candidate_form: str = "load_inline"

    def child(self, source: str, *, idea: str, parents: Sequence[Candidate],
              operator: str) -> Candidate:
        """A candidate of this generation with the given lineage."""
        return Candidate(source=source, idea=idea, parent_ids=tuple(p.id for p in parents),
                         operator=operator, generation=self.generation)


@runtime_checkable
class Mutation(Protocol):
    """One parent in, zero or more children out."""

    name: str

    def __call__(self, parent: Candidate, ctx: SearchContext) -> list[Candidate]: ...


@runtime_checkable
class Crossover(Protocol):
    """Two parents in, zero or more children out."""

    name: str

    def __call__(self, parent_a: Candidate, parent_b: Candidate,
                 ctx: SearchContext) -> list[Candidate]: ...


@runtime_checkable
class RepairOperator(Protocol):
    """A rejected candidate and its result in, fixed children out."""

    name: str

    def __call__(self, candidate: Candidate, result: EvalResult,
                 ctx: SearchContext) -> list[Candidate]: ...


@runtime_checkable
class IdeasFirst(Protocol):
    """A mutation the search runs in two phases: ``propose`` ideas for a parent, then
    ``implement`` the ideas kept (near-duplicates across the generation dropped). Calling it
    directly (``op(parent, ctx)``) does both."""

    name: str

    def propose(self, parent: Candidate, ctx: SearchContext) -> list[str]: ...

    def implement(self, parent: Candidate, ideas: Sequence[str],
                  ctx: SearchContext) -> list[Candidate]: ...

    def __call__(self, parent: Candidate, ctx: SearchContext) -> list[Candidate]: ...
