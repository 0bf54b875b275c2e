"""An in-process stand-in for evokernel.llm.client.LLMClient, for the search's diversity and batch
tests: replies come from a script that sees the purpose, the messages and the sample index (which
the prompt does not carry), each request is recorded, replies can arrive in a shuffled order, and
in batch mode a request whose reply was not imported yet raises LLMPending, as the batch LLM mode
does. Its replies are scripted test data, never a model's ideas.
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Callable

from evokernel.errors import LLMPending
from tests.support.fakes import KERNEL

IDEA_TEXTS = (
    "Stage each row through shared memory once and reuse it for every pass",
    "Use float4 vectorized loads and stores on 16-byte aligned rows",
    "Give each warp several rows so more independent loads are in flight",
    "Replace the shared-memory tree reduction with warp shuffles",
    "Overlap the next tile's global loads with this tile's math using cp.async",
    "Fuse the scaling into the final store to save one pass over memory",
    "Launch one block per row with 256 threads and a grid-stride loop",
    "Precompute the row offsets once per block in registers",
)
BLOCKS = (64, 128, 256, 512)


@dataclass(frozen=True)
class Reply:
    text: str


def digest(*parts: object) -> int:
    return int(hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:12], 16)


def scripted(purpose: str, messages: list[dict], sample_index: int) -> str:
    """Ideas: four ideas from IDEA_TEXTS picked by the sample index (the operator keeps the first
    k), so calls on the same parent overlap sometimes and near-duplicates across a generation's
    calls happen. Code: KERNEL with a BLOCK picked from the prompt and sample index, and a
    comment naming the request (distinct kernels)."""
    prompt = messages[-1]["content"]
    if purpose == "ideas":
        k = 4
        start = sample_index % len(IDEA_TEXTS)
        cats = ("memory", "parallelism", "compute", "async")
        ideas = [{"idea": IDEA_TEXTS[(start + 2 * i) % len(IDEA_TEXTS)],
                  "category": cats[(start + i) % len(cats)]} for i in range(k)]
        return "```json\n" + json.dumps(ideas) + "\n```"
    idea = next((line[2:] for line in prompt.splitlines() if line.startswith("> ")), purpose)
    block = BLOCKS[digest(prompt, sample_index) % len(BLOCKS)]
    source = KERNEL.replace("BLOCK = 128;", f"BLOCK = {block};") + \
        f"# {idea} ({digest(prompt, sample_index) % 10**6})\n"
    return f"Idea: {idea}\n\n```python\n{source}```\n"


class FakeLLM:
    """LLMClient's surface as the search uses it: ``complete``, ``usage``, ``budget_exceeded``,
    ``on_usage``, ``last_error``.

    Args:
        reply: the script, ``reply(purpose, messages, sample_index) -> text``.
        jitter_s: each reply waits up to this long (fixed per request), so concurrent calls
            finish in an order unrelated to the order they were made.
        batch: batch mode: a request not in ``answers`` is recorded in ``written`` and raises
            LLMPending; ``import_written()`` answers them (as ``evokernel llm import`` would).
    """

    def __init__(self, reply: Callable[[str, list[dict], int], str] = scripted, *,
                 jitter_s: float = 0.0, batch: bool = False):
        self.reply = reply
        self.jitter_s = jitter_s
        self.batch = batch
        self.answers: dict[str, str] = {}
        self.written: dict[str, tuple[str, list[dict], int]] = {}
        self.requests: list[tuple[str, int, list[dict]]] = []
        self.on_usage = None
        self.last_error = None
        self._lock = threading.Lock()
        self._calls = 0

    @property
    def usage(self) -> dict[str, int]:
        return {"calls": self._calls, "cache_hits": 0, "errors": 0, "prompt_tokens": 0,
                "completion_tokens": 0}

    def budget_exceeded(self) -> bool:
        return False

    def complete(self, messages: list[dict], *, purpose: str, sample_index: int = 0) -> Reply:
        key = f"{purpose}:{sample_index}:{digest(messages)}"
        with self._lock:
            self.requests.append((purpose, sample_index, messages))
            if self.batch and key not in self.answers:
                self.written[key] = (purpose, messages, sample_index)
                raise LLMPending(f"request {key} written for the batch API")
        if self.jitter_s:
            time.sleep(self.jitter_s * (digest(key) % 1000) / 1000)
        text = self.answers[key] if key in self.answers else self.reply(purpose, messages,
                                                                         sample_index)
        with self._lock:
            self._calls += 1
        return Reply(text)

    def import_written(self) -> int:
        """Answer every written request; returns how many."""
        with self._lock:
            for key, (purpose, messages, sample_index) in self.written.items():
                self.answers[key] = self.reply(purpose, messages, sample_index)
            n = len(self.written)
            self.written.clear()
        return n
