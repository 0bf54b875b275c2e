"""The LLM port: a first CUDA kernel written from the reference, for problems with no seed."""
from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from evokernel.problem import Problem
from evokernel.operators.prompts import port_prompt
from evokernel.records import Candidate
from evokernel.operators.base import SearchContext
from evokernel.operators.idea import Request, plan_samples, write_children


@dataclass
class SeedPort:
    """Ask the LLM for a first correct kernel of ``problem`` from its reference source.

    Args:
        children: samples per call (concurrent; distinct cache entries); more samples raise the
            chance that one passes the gate.
        name: the operator name recorded in each child.
    Returns (call ``(problem, ctx)``): up to ``children`` candidates with no parents, generation
        ``ctx.generation`` and as idea the reply's ``Idea:`` line (else "port of the reference");
        [] with no LLM or on LLM failure. Never raises on LLM failures or malformed replies.
    """

    children: int = 1
    name: str = "port"

    def __post_init__(self) -> None:
        if self.children < 1:
            raise ValueError(f"SeedPort: children must be >= 1, got {self.children}")

    def __call__(self, problem: Problem, ctx: SearchContext) -> list[Candidate]:
        if ctx.llm is None:
            logger.warning("{}: no LLM configured; cannot write a first kernel for {}",
                           self.name, problem.name)
            return []
        n = self.children
        requests = plan_samples(ctx, n, lambda i, j: Request(
            messages=port_prompt(ctx, variant=(j, n)), purpose="port", sample_index=i,
            idea=f"port of the {problem.name} reference to CUDA", parents=(),
            idea_from_reply=True))
        return write_children(requests, ctx, operator=self.name)
