"""The LLM repair: fix a rejected candidate, given why it was rejected."""
from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from evokernel.operators.prompts import repair_prompt
from evokernel.records import Candidate, EvalResult
from evokernel.operators.base import SearchContext
from evokernel.operators.idea import Request, plan_samples, write_children


@dataclass
class Repair:
    """Ask the LLM to fix a rejected candidate, shown its reason, detail, error ratios and the
    tail of its build log or traceback.

    Args:
        children: samples per call (concurrent; distinct cache entries).
        name: the operator name recorded in each child.
    Returns (call): up to ``children`` children with ``parent_ids=(candidate.id,)`` and the
        candidate's idea (the fix implements the same idea; the reply's ``Idea:`` line when the
        candidate had none); [] with no LLM, for an accepted candidate, or on LLM failure.
        Never raises on LLM failures or malformed replies.
    """

    children: int = 1
    name: str = "repair"

    def __post_init__(self) -> None:
        if self.children < 1:
            raise ValueError(f"Repair: children must be >= 1, got {self.children}")

    def __call__(self, candidate: Candidate, result: EvalResult,
                 ctx: SearchContext) -> list[Candidate]:
        if ctx.llm is None:
            logger.warning("{}: no LLM configured; no children", self.name)
            return []
        if result.accepted:
            logger.warning("{}: {} was accepted; nothing to repair", self.name, candidate.id)
            return []
        idea = candidate.idea or f"repair of {candidate.id} ({result.reason.value})"
        n = self.children
        requests = plan_samples(ctx, n, lambda i, j: Request(
            messages=repair_prompt(ctx, candidate, result, variant=(j, n)), purpose="repair",
            sample_index=i, idea=idea, parents=(candidate,), idea_from_reply=not candidate.idea,
            base_source=candidate.source))
        return write_children(requests, ctx, operator=self.name)
