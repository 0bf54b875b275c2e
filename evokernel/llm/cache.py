"""The record of one LLM call and the replay cache of replies (no litellm here).

- ``LLMReply``: one completed call (text, model, tokens, cost, cached, latency);
- ``request_key``: the cache key, a SHA-256 of the request's model, messages, sampling
  parameters and sample index;
- ``ReplyCache``: replies stored in one sqlite file by that key, so a re-run replays exactly
  with zero requests.

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
from typing import Any


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
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float
    cached: bool
    latency_s: float


def request_key(model: str, messages: list[dict], temperature: float, max_tokens: int | None,
                sample_index: int) -> str:
    """The replay-cache key: SHA-256 hex of the request's model, messages, sampling parameters
    and sample index. The api_base, keys and timeouts are not part of it (they don't change what
    is asked)."""
    payload = json.dumps({"model": model, "messages": messages, "temperature": temperature,
                          "max_tokens": max_tokens, "sample_index": sample_index},
                         sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


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

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(str(self.path), timeout=30.0)

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored reply for ``key`` (text, model, tokens, cost), or None."""
        with self._lock, closing(self._connect()) as conn:
            row = conn.execute("SELECT model, text, prompt_tokens, completion_tokens,"
                               " reasoning_tokens, cost_usd FROM replies WHERE key = ?",
                               (key,)).fetchone()
        if row is None:
            return None
        return dict(zip(("model", "text", "prompt_tokens", "completion_tokens",
                         "reasoning_tokens", "cost_usd"), row))

    def put(self, key: str, reply: LLMReply) -> None:
        """Store ``reply`` under ``key`` (replacing any earlier entry)."""
        with self._lock, closing(self._connect()) as conn, conn:
            conn.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (key, reply.model, reply.text, reply.prompt_tokens,
                          reply.completion_tokens, reply.reasoning_tokens, reply.cost_usd,
                          time.time()))
