"""The idea mutation (Stanford CRFM "fast kernels" style): write k ideas, then m implementations of
each, all implementations concurrently. The search runs it in two phases (operators.base.IdeasFirst):
``propose`` for every idea call of a generation, then ``implement`` for the ideas kept.

A request the batch LLM mode wrote out instead of sending (evokernel.errors.LLMPending) is never
swallowed here: it reaches the search, which stops before evaluating the generation.

Also holds ``write_children``, the concurrent "messages in, candidates out" step that the other
LLM operators (crossover, repair, port) share.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

from loguru import logger

from evokernel.errors import LLMError, LLMPending
from evokernel.operators.parsing import code_from_reply, extract_summary, parse_ideas
from evokernel.operators.prompts import ideas_prompt, implement_prompt
from evokernel.records import NO_CODE_NOTE, Candidate
from evokernel.operators.base import SearchContext

#: Most threads one operator call starts; the LLM client's semaphore bounds requests anyway.
MAX_THREADS = 64


@dataclass(frozen=True)
class Request:
    """One planned LLM call of an operator, and the lineage its child gets."""

    messages: list[dict]
    purpose: str                      # "implement", "crossover", "repair", "port"
    sample_index: int
    idea: str                         # the child's idea when the reply does not override it
    parents: tuple[Candidate, ...]
    idea_from_reply: bool = False     # use the reply's "Idea: ..." line when it has one
    base_source: str | None = None    # the kernel a reply's SEARCH/REPLACE edits apply to


def draw_sample_base(ctx: SearchContext) -> int:
    """A sample index base from the call's seeded RNG, so that the same request made twice in a
    run (same parent chosen twice) gets fresh samples, while a replay draws the same ones."""
    return ctx.rng.randrange(1 << 30)


def write_children(requests: Sequence[Request], ctx: SearchContext, *,
                   operator: str) -> list[Candidate]:
    """Send ``requests`` concurrently and turn each reply into a child of ``ctx.generation``.

    A reply with SEARCH/REPLACE edits is applied to the request's ``base_source``
    (parsing.code_from_reply). A reply with no usable code becomes a child whose source is the
    raw reply, and one whose edits do not apply a child whose source is the reply after a
    NO_CODE_NOTE line naming the failing block and why (the evaluator rejects both as
    ``no_code``, the latter with that detail, and the run store keeps them). A request that
    fails with LLMError
    (including BudgetExceeded) is logged and skipped; the others are kept. Children already in
    ``ctx.seen_ids``, or duplicated within this call, are dropped. Order follows ``requests``.
    Returns: the children ([] when ``ctx.llm`` is None).
    Raises: LLMPending (batch mode) once every request was made, when any of them is pending.
    """
    llm = ctx.llm
    if llm is None or not requests:
        return []

    def one(req: Request) -> Candidate | LLMPending | None:
        try:
            reply = llm.complete(req.messages, purpose=req.purpose,
                                 sample_index=req.sample_index)
        except LLMPending as e:        # returned, not raised: Executor.map would cancel the
            return e                   # requests not yet started, and they would never be written
        except LLMError as e:
            logger.warning("{}: {} call {} failed, skipped: {}", operator, req.purpose,
                           req.sample_index, e)
            return None
        code, failure = code_from_reply(reply.text, req.base_source)
        if failure:
            logger.info("{}: {} reply's edits did not apply ({}); kept as a no-code candidate",
                        operator, req.purpose, failure)
            code = f"{NO_CODE_NOTE}{failure}\n{reply.text}"
        elif code is None:
            logger.info("{}: {} reply holds no usable code; kept as a no-code candidate",
                        operator, req.purpose)
        idea = req.idea
        if req.idea_from_reply:
            idea = extract_summary(reply.text) or req.idea
        return ctx.child(code if code is not None else reply.text, idea=idea,
                         parents=req.parents, operator=operator)

    workers = max(1, min(len(requests), MAX_THREADS))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"evokernel-{operator}") as pool:
        results = list(pool.map(one, requests))
    pending = [r for r in results if isinstance(r, LLMPending)]
    if pending:
        raise pending[0]
    children: list[Candidate] = []
    seen = set(ctx.seen_ids)
    for child in results:
        if child is None:
            continue
        if child.id in seen:
            logger.debug("{}: child {} already proposed; dropped", operator, child.id)
            continue
        seen.add(child.id)
        children.append(child)
    return children


@dataclass
class IdeaMutation:
    """One LLM call writes k distinct ideas for the parent; then m implementations of each idea
    are written concurrently (k*m calls, bounded by the client's concurrency limit).

    The ideas and implementation calls see the problem, the parent's source and measured result
    (``ctx.results[parent.id]``), the lineage's history (``ctx.lineage``, else ``ctx.history``),
    the inspirations, the GPU (``ctx.device``) and this call's place in the generation
    (evokernel.operators.prompts). Implementation j of idea i is requested with ``sample_index = base + j``
    (``base`` drawn from ``ctx.rng``), so the m samples are distinct cache entries, and the same
    idea proposed again later for the same parent gets fresh implementations, not a replay.

    Args:
        k, m: ideas per call and implementations per idea; None takes ``ctx.ideas_per_call`` and
            ``ctx.implementations_per_idea``.
        name: the operator name recorded in each child.
    Returns (call): up to k*m children with ``operator=name``, ``parent_ids=(parent.id,)``,
        ``idea`` = the idea text and ``generation=ctx.generation``; [] when there is no LLM or
        the ideas call fails. Never raises on LLM failures or malformed replies.
    """

    k: int | None = None
    m: int | None = None
    name: str = "idea"

    def __post_init__(self) -> None:
        if (self.k is not None and self.k < 1) or (self.m is not None and self.m < 1):
            raise ValueError(f"IdeaMutation: k and m must be >= 1 (got k={self.k}, m={self.m})")

    def _km(self, ctx: SearchContext) -> tuple[int, int]:
        k = self.k if self.k is not None else ctx.ideas_per_call
        m = self.m if self.m is not None else ctx.implementations_per_idea
        if k < 1 or m < 1:
            raise ValueError(f"{self.name}: k and m must be >= 1 (got k={k}, m={m})")
        return k, m

    def ideas(self, parent: Candidate, ctx: SearchContext, k: int) -> list[str]:
        """The ideas call alone: up to k distinct ideas for ``parent`` ([] on any failure).

        The call is shown the parent's lineage (``ctx.lineage``: what was tried on the way to
        it and from it, with the gain over each parent), or every attempt (``ctx.history``)
        when the context carries no lineage.
        Raises: LLMPending (batch mode: the request was written out, no reply yet).
        """
        if ctx.llm is None:
            return []
        messages = ideas_prompt(ctx, parent, k)
        try:
            reply = ctx.llm.complete(messages, purpose="ideas",
                                     sample_index=draw_sample_base(ctx))
        except LLMPending:
            raise
        except LLMError as e:
            logger.warning("{}: ideas call for {} failed: {}", self.name, parent.id, e)
            return []
        ideas = parse_ideas(reply.text, k)
        if not ideas:
            logger.warning("{}: ideas reply for {} held no readable ideas", self.name, parent.id)
        elif len(ideas) < k:
            logger.info("{}: asked for {} ideas, got {}", self.name, k, len(ideas))
        return ideas

    def propose(self, parent: Candidate, ctx: SearchContext) -> list[str]:
        """Phase one: up to k ideas for ``parent`` ([] with no LLM or on failure)."""
        if ctx.llm is None:
            logger.warning("{}: no LLM configured; no children", self.name)
            return []
        return self.ideas(parent, ctx, self._km(ctx)[0])

    def implement(self, parent: Candidate, ideas: Sequence[str],
                  ctx: SearchContext) -> list[Candidate]:
        """Phase two: m implementations of each of ``ideas``, all requests at once.

        Implementation j of an idea is requested with ``sample_index = base + j``, ``base``
        drawn from ``ctx.rng`` after the ideas call's own draw, so a direct call and the
        search's two phases send the same requests.
        """
        if ctx.llm is None or not ideas:
            return []
        m = self._km(ctx)[1]
        base = draw_sample_base(ctx)    # a repeated idea on the same parent gets fresh samples
        requests = [Request(messages=implement_prompt(ctx, parent, idea, variant=(j, m)),
                            purpose="implement", sample_index=base + j, idea=idea,
                            parents=(parent,), base_source=parent.source)
                    for idea in ideas for j in range(m)]
        return write_children(requests, ctx, operator=self.name)

    def __call__(self, parent: Candidate, ctx: SearchContext) -> list[Candidate]:
        self._km(ctx)
        return self.implement(parent, self.propose(parent, ctx), ctx)


def plan_samples(ctx: SearchContext, n: int, make: Callable[[int, int], Request]
                 ) -> list[Request]:
    """``n`` requests built by ``make(sample_index, j)`` for j = 0..n-1, sample indices drawn
    from ``ctx.rng`` (the prompt names sample j of n, so the n requests differ)."""
    if n < 1:
        raise ValueError(f"need at least one sample, got {n}")
    base = draw_sample_base(ctx)
    return [make(base + j, j) for j in range(n)]
