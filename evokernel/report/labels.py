"""How ``show`` and ``report`` describe a run's LLM replies: how many calls, where the tokens
came from, who answered, and, above all, when the replies were written by a stand-in (litellm's
``mock_response``, the demo fake server, or reply files marked scripted) rather than a model, so
their ideas are never presented as a model's.

Every function reads the totals of ``RunStore.llm_usage()`` (``RunView.llm_usage``).
"""
from __future__ import annotations

from typing import Any

#: What each ``usage_source`` means, as printed.
USAGE_SOURCES = {
    "provider": "from the replies' usage",
    "tokenizer": "counted with litellm.token_counter (the replies carried no usage)",
    "stand-in": "the stand-in's placeholder numbers, not counts",
}


def tokens_note(usage: dict[str, Any]) -> str:
    """Where the tokens came from, e.g. "counted with litellm.token_counter (...)"; with mixed
    sources, each with its number of calls."""
    sources = usage.get("usage_sources") or {}
    if len(sources) == 1:
        return USAGE_SOURCES.get(next(iter(sources)), next(iter(sources)))
    return "; ".join(f"{n} calls {USAGE_SOURCES.get(k, k)}" for k, n in sorted(sources.items()))


def llm_line(usage: dict[str, Any]) -> str | None:
    """The LLM summary line ("12 calls (2 from the replay cache), 100 prompt + 200 completion
    tokens (...), $0.0000"), with how many replies were imported from a batch; None without
    calls."""
    if not usage.get("calls"):
        return None
    text = (f"{usage['calls']} calls ({usage['cached']} from the replay cache), "
            f"{usage['prompt_tokens']:,} prompt + {usage['completion_tokens']:,} completion "
            f"tokens")
    note = tokens_note(usage)
    if note:
        text += f" ({note})"
    text += f", ${usage['cost_usd']:.4f}"
    batch = (usage.get("origins") or {}).get("batch")
    if batch:
        text += f"; {batch} replies imported from the batch mode"
    return text


def scripted_note(usage: dict[str, Any]) -> str | None:
    """The warning for a run whose replies a stand-in wrote (None when a model answered all):
    "SCRIPTED: 12 of 12 LLM calls were answered by a stand-in (...), not a model: ..."."""
    n = usage.get("scripted") or 0
    if not n:
        return None
    who = "; ".join(usage.get("scripted_by") or ["a stand-in"])
    return (f"SCRIPTED: {n} of {usage['calls']} LLM calls were answered by a stand-in ({who}), "
            "not a model: the ideas and kernels they gave are not a model's")


def batch_line(usage: dict[str, Any], run_dir: Any) -> str | None:
    """The batch mode's state ("4 of 12 requests wait for replies: evokernel llm pending
    RUN_DIR"), with the imported replies their operator cannot use (an ideas reply with no
    readable ideas) counted as failed calls; None for a run that never used it."""
    total = usage.get("batch_requests") or 0
    if not total:
        return None
    waiting = usage.get("batch_waiting") or 0
    unusable = usage.get("batch_unusable") or 0
    failed = (f"; {unusable} failed: imported, but nothing its operator can use (e.g. an ideas "
              "reply with no readable ideas)" if unusable else "")
    if not waiting:
        return f"{total} requests written out, every reply imported{failed}"
    return (f"{waiting} of {total} requests written out wait for replies (evokernel llm "
            f"pending {run_dir}){failed}")


def answered_by_line(usage: dict[str, Any]) -> str | None:
    """Who answered the imported replies, as recorded at import; None when none were named."""
    names = usage.get("answered_by") or []
    return ", ".join(names) if names else None


def idea_heading(usage: dict[str, Any]) -> str:
    """The heading of an idea column: "idea", or "idea (scripted, not a model's)" when any
    reply of the run came from a stand-in."""
    return "idea (scripted, not a model's)" if usage.get("scripted") else "idea"
