"""Token counts and prices for replies whose usage is unknown (litellm, imported lazily).

A reply normally carries its usage (``usage.prompt_tokens``, ``usage.completion_tokens``). Replies
imported from reply files carry none (nor may a local server's), so for those the tokens are
counted here with ``litellm.token_counter``: the tokenizer litellm maps the model to (tiktoken's o200k_base or
cl100k_base for OpenAI models and unknown names, a bundled Hugging Face tokenizer for some
others; all shipped with litellm, so counting works offline). For a model whose tokenizer is not
public the count is an estimate; the run store records ``usage_source = "tokenizer"`` so that
``show`` and ``report`` say the tokens were counted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evokernel.llm.retry import load_litellm

#: How counted tokens are described in records and reports.
TOKENIZER = "litellm.token_counter"


def count_tokens(model: str, messages: list[dict], reply_text: str) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a request and its reply, counted with the tokenizer
    litellm uses for ``model`` (litellm.token_counter; the prompt count includes the chat
    template's per-message overhead as litellm adds it).

    Raises:
        ValueError: ``messages`` is not a list of {"role", "content"} dicts.
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m
                                                 for m in messages):
        raise ValueError("count_tokens: messages must be a list of {'role', 'content'} dicts")
    litellm = load_litellm()
    prompt = int(litellm.token_counter(model=model, messages=messages))
    completion = int(litellm.token_counter(model=model, text=reply_text)) if reply_text else 0
    return prompt, completion


def price_usd(model: str, prompt_tokens: int, completion_tokens: int, *,
              batch: bool = False) -> float:
    """The cost in US dollars of that many tokens at litellm's price for ``model`` (its local
    model-cost map); with ``batch``, its Batch API price where the map has one
    (``input_cost_per_token_batches``, typically half), else the regular price. 0.0 when
    litellm knows no price for the model."""
    litellm = load_litellm()
    try:
        if batch:
            from litellm.cost_calculator import batch_cost_calculator
            from litellm.types.utils import Usage
            usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                          total_tokens=prompt_tokens + completion_tokens)
            cost = sum(batch_cost_calculator(usage=usage, model=model))
            if cost > 0:
                return float(cost)
        return float(sum(litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens,
                                                completion_tokens=completion_tokens)))
    except Exception:  # an unknown model or price: the cost is unknown, counted as 0.0
        return 0.0


@dataclass(frozen=True)
class ReplyUsage:
    """A reply's text, tokens and cost; ``source`` is "provider" (its usage) or "tokenizer"."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float
    source: str


def reply_usage(response: Any, model: str, messages: list[dict]) -> ReplyUsage:
    """The text, usage and cost of a litellm chat completion ``response``. The tokens are the
    reply's own usage, or counted (``count_tokens``) when it reports none; the cost is litellm's
    ``completion_cost`` for reported usage, ``price_usd`` for counted tokens (0.0 when
    unpriced)."""
    try:
        text = response.choices[0].message.content or ""
    except (AttributeError, IndexError, TypeError):
        text = ""
    usage = getattr(response, "usage", None)
    details = getattr(usage, "completion_tokens_details", None)
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    source = "provider"
    if prompt + completion == 0:
        prompt, completion = count_tokens(model, messages, text)
        source = "tokenizer"
    try:
        cost = float(load_litellm().completion_cost(completion_response=response) or 0.0) \
            if source == "provider" else price_usd(model, prompt, completion)
    except Exception:  # unknown model or price: cost unknown, counted as 0.0
        cost = 0.0
    return ReplyUsage(text=text, prompt_tokens=prompt, completion_tokens=completion,
                      reasoning_tokens=int(getattr(details, "reasoning_tokens", 0) or 0),
                      cost_usd=cost, source=source)
