"""The record of one LLM call and the replay cache of replies (no litellm here).

- ``LLMReply``: one completed call (text, model, tokens, cost, cached, latency);
- ``request_key``: the cache key, a SHA-256 of the request's model, messages, sampling
  parameters and sample index;
- ``ReplyCache``: replies stored in one sqlite file by that key, so a re-run replays exactly
  with zero requests. Each reply keeps where it came from: ``origin`` ("live": sent by this
  client; "batch": imported from a batch API's results or from reply files, evokernel.llm.batch),
  ``usage_source`` ("provider": the reply's own usage; "tokenizer": counted, the reply had none;
  "stand-in": a stand-in's placeholder numbers),
  ``scripted`` (the stand-in that wrote it, e.g. litellm's mock_response or the demo fake server;
  None for a model) and ``answered_by``. An imported reply is "unbilled" until the client first
  uses it (``claim``): that use is recorded as the call, with the reply's tokens, and later uses
  are replays that cost nothing.

``evokernel.llm.client`` (the only module that imports litellm) uses these and re-exports them.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: The start of a stand-in server's ``system_fingerprint`` (the demo fake server's replies).
STAND_IN = "evokernel-stand-in"


def mock_label(mock: str | Callable[[list[dict]], str]) -> str:
    """How a litellm ``mock_response`` is named in the records (``LLMReply.scripted``): its
    function, or "a fixed string"."""
    if callable(mock):
        name = f"{getattr(mock, '__module__', '?')}.{getattr(mock, '__qualname__', repr(mock))}"
        return f"litellm mock_response: {name}"
    return "litellm mock_response: a fixed string"


@dataclass(frozen=True)
class LLMReply:
    """One completed call.

    Attributes:
        text: the reply's content ("" when the provider returned none).
        model: the litellm model string that answered.
        prompt_tokens, completion_tokens, reasoning_tokens: token usage as the provider reported
            it (reasoning tokens are part of completion tokens); 0 for a cache hit.
        cost_usd: litellm's cost estimate in US dollars; 0.0 when unknown and for a cache hit.
        cached: True when the reply came from the replay cache (no request was sent).
        latency_s: wall time of the call including retries and backoff, in seconds.
        usage_source: "provider" (the reply's usage), "tokenizer" (counted by
            evokernel.llm.tokens because the reply carried none), or "stand-in" (a mock's or the
            demo fake server's own placeholder numbers, not counts).
        scripted: the stand-in that wrote the reply ("litellm mock_response: <function>", or
            the demo fake server's label); None when a model answered. Kept through the cache.
        origin: "live" (sent by LLMClient) or "batch" (imported: evokernel.llm.batch).
        answered_by: who answered an imported reply, as the batch output or the importer named
            it; None for a live reply (``model`` answered).
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float
    usage_source: str = "provider"
    scripted: str | None = None
    origin: str = "live"
    answered_by: str | None = None


def request_key(model: str, messages: list[dict], temperature: float, max_tokens: int | None,
                sample_index: int) -> str:
    """The replay-cache key: SHA-256 hex of the request's model, messages, sampling parameters
    and sample index. The api_base, keys and timeouts are not part of it (they don't change what
    is asked)."""
    payload = json.dumps({"model": model, "messages": messages, "temperature": temperature,
                          "max_tokens": max_tokens, "sample_index": sample_index},
                         sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


#: The reply table's columns after ``key`` and ``text``, with their SQL types; older cache files
#: lack the provenance columns and get them added (NULL reads as the defaults above).
_COLUMNS = (("model", "TEXT"), ("prompt_tokens", "INTEGER"), ("completion_tokens", "INTEGER"),
            ("reasoning_tokens", "INTEGER"), ("cost_usd", "REAL"), ("created_s", "REAL"),
            ("usage_source", "TEXT"), ("scripted", "TEXT"), ("origin", "TEXT"),
            ("answered_by", "TEXT"), ("unbilled", "INTEGER"))
_FIELDS = ("model", "text", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd",
           "usage_source", "scripted", "origin", "answered_by", "unbilled")


class ReplyCache:
    """Replies stored in one sqlite file, by ``request_key``. Safe across threads and processes."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        if path.is_dir():
            path = path / "llm_cache.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        with self._lock, closing(self._connect()) as conn, conn:
            conn.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, model TEXT,"
                         " text TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,"
                         " reasoning_tokens INTEGER, cost_usd REAL, created_s REAL)")
            have = {row[1] for row in conn.execute("PRAGMA table_info(replies)")}
            for name, kind in _COLUMNS:
                if name not in have:
                    conn.execute(f"ALTER TABLE replies ADD COLUMN {name} {kind}")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(str(self.path), timeout=30.0)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for ``key`` (text, model, tokens, cost, usage_source, scripted,
        origin, answered_by, unbilled), or None."""
        with self._lock, closing(self._connect()) as conn:
            row = conn.execute(f"SELECT {', '.join(_FIELDS)} FROM replies WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            return None
        hit = dict(zip(_FIELDS, row))
        hit["usage_source"] = hit["usage_source"] or "provider"
        hit["origin"] = hit["origin"] or "live"
        hit["unbilled"] = bool(hit["unbilled"])
        return hit

    def keys(self) -> set[str]:
        """Every key with a stored reply."""
        with self._lock, closing(self._connect()) as conn:
            return {k for (k,) in conn.execute("SELECT key FROM replies")}

    def put(self, key: str, reply: LLMReply, *, unbilled: bool = False) -> None:
        """Store ``reply`` under ``key`` (replacing any earlier entry). ``unbilled``: an imported
        reply whose tokens are counted when the client first uses it (``claim``)."""
        values = (key, reply.model, reply.text, reply.prompt_tokens, reply.completion_tokens,
                  reply.reasoning_tokens, reply.cost_usd, time.time(), reply.usage_source,
                  reply.scripted, reply.origin, reply.answered_by, int(unbilled))
        names = ("key", "model", "text", "prompt_tokens", "completion_tokens",
                 "reasoning_tokens", "cost_usd", "created_s", "usage_source", "scripted",
                 "origin", "answered_by", "unbilled")
        with self._lock, closing(self._connect()) as conn, conn:
            conn.execute(f"INSERT OR REPLACE INTO replies ({', '.join(names)}) VALUES "
                         f"({', '.join('?' * len(names))})", values)

    def claim(self, key: str) -> bool:
        """Mark an unbilled (imported) reply as used; True for exactly one caller, across
        threads and processes (the one whose use is recorded as the call)."""
        with self._lock, closing(self._connect()) as conn, conn:
            cur = conn.execute("UPDATE replies SET unbilled = 0 WHERE key = ? AND unbilled = 1",
                               (key,))
            return cur.rowcount == 1
