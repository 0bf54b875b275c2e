"""The LLM crossover: merge two parent kernels into one."""
from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from evokernel.operators.prompts import crossover_prompt
from evokernel.records import Candidate
from evokernel.operators.base import SearchContext
from evokernel.operators.idea import Request, plan_samples, write_children


def _short(idea: str, limit: int = 120) -> str:
    idea = idea or "seed kernel"
    return idea if len(idea) <= limit else idea[:limit - 3] + "..."


@dataclass
class LLMCrossover:
    """Ask the LLM to combine two parents, shown with their sources, ideas and measured results
    (``ctx.results``), into one kernel.

    Args:
        children: samples per call (concurrent; distinct cache entries).
        name: the operator name recorded in each child.
    Returns (call): up to ``children`` children with ``parent_ids=(a.id, b.id)`` and as idea the
        reply's ``Idea:`` line (else "merge of ... and ..."); [] with no LLM, on LLM failure, or
        when both parents are the same kernel. Never raises on LLM failures or malformed replies.
    """

    children: int = 1
    name: str = "crossover"

    def __post_init__(self) -> None:
        if self.children < 1:
            raise ValueError(f"LLMCrossover: children must be >= 1, got {self.children}")

    def __call__(self, parent_a: Candidate, parent_b: Candidate,
                 ctx: SearchContext) -> list[Candidate]:
        if ctx.llm is None:
            logger.warning("{}: no LLM configured; no children", self.name)
            return []
        if parent_a.id == parent_b.id:
            logger.debug("{}: both parents are {}; nothing to merge", self.name, parent_a.id)
            return []
        fallback = f"merge of ({_short(parent_a.idea)}) and ({_short(parent_b.idea)})"
        n = self.children
        requests = plan_samples(ctx, n, lambda i, j: Request(
            messages=crossover_prompt(ctx, parent_a, parent_b, variant=(j, n)),
            purpose="crossover", sample_index=i, idea=fallback, parents=(parent_a, parent_b),
            idea_from_reply=True, base_source=parent_a.source))
        return write_children(requests, ctx, operator=self.name)
