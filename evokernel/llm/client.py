"""LLM access through litellm, imported only when a call is made (evokernel.llm.retry).

One call shape for every provider (``litellm.completion(model="provider/name", ...)``), with:
- an optional weighted ensemble (``LLMConfig.models``), the model picked per request by an RNG
  seeded on the request, so a replay picks the same model;
- a concurrency limit (a semaphore of ``max_concurrency``; callers run calls in threads);
- retries with exponential backoff (tenacity) on 429, 5xx, connection errors and timeouts, and
  none on a context-window overflow, authentication or other 4xx errors;
- a hard per-call timeout, enforced even when a provider ignores litellm's ``timeout=``;
- token and cost accounting per call, reported through ``on_usage`` and summed in ``usage``:
  the reply's usage, or tokens counted with a tokenizer when it has none (evokernel.llm.tokens),
  recorded as ``usage_source`` ("provider", "tokenizer", or "stand-in" for a mock's or the fake
  server's placeholder numbers);
- stand-ins labelled: a reply from litellm's ``mock_response`` or from the demo fake server
  (its ``system_fingerprint`` starts with ``evokernel-stand-in``) is recorded with ``scripted``
  naming what wrote it, through the cache too, so it is never shown as a model's reply;
- the batch mode (``batch``, evokernel.llm.batch): a request whose reply is not cached is queued
  for a batch API instead of being sent, and ``complete`` raises LLMPending; an imported reply is
  recorded as the call (with its tokens) the first time it is used;
- a token / cost budget (``budget_exceeded()``; ``complete()`` refuses to send once over it);
- a sqlite reply cache keyed by the request, so a re-run replays exactly with zero requests
  (``LLMReply``, ``request_key`` and ``ReplyCache`` live in ``evokernel.llm.cache``, which does
  not import litellm; they are re-exported here);
- single flight: a request made while the same request (same cache key) is in flight waits for
  that one's reply instead of sending its own, so a live run gets what its replay will get.

API keys come only from the provider's usual environment variables (OPENAI_API_KEY, ...). A local
server goes through ``api_base``: ``hosted_vllm/<name>`` or ``ollama/<name>`` need no key;
``openai/<name>`` (any OpenAI-compatible server) needs OPENAI_API_KEY set to any value.
"""
from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from loguru import logger

from evokernel.config import LLMConfig
from evokernel.errors import BudgetExceeded, LLMError, LLMPending
from evokernel.llm.batch import BatchQueue, BatchRequest
from evokernel.llm.cache import STAND_IN, LLMReply, ReplyCache, mock_label, request_key
from evokernel.llm.retry import (HardTimeout, call_with_deadline, is_retryable, load_litellm,
                                 provider_params, retry_after_s)
from evokernel.llm.tokens import reply_usage

__all__ = ["LLMClient", "LLMReply", "MockResponse", "ReplyCache", "STAND_IN", "is_retryable",
           "mock_label", "request_key"]

MockResponse = str | Callable[[list[dict]], str]


@dataclass
class _Flight:
    """A request in flight, which identical requests wait for (single flight)."""

    done: threading.Event = field(default_factory=threading.Event)
    reply: LLMReply | None = None
    error: BaseException | None = None


class LLMClient:
    """Thread-safe chat completions through litellm, with retries, timeout, budget and cache.

    Args:
        config: model(s), api_base, sampling parameters, limits and budget (LLMConfig).
        cache_path: sqlite file (or folder, then ``llm_cache.sqlite`` in it) for the replay
            cache; None disables caching.
        on_usage: called after every call (sent, cached or failed) with a dict: purpose, model,
            sample_index, prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, cached,
            latency_s, attempts, error (None or the error text). For the run store.
        mock_response: passed to ``litellm.completion(mock_response=...)`` so tests go through
            litellm without a network; a callable gets the messages and returns the reply text.
        backoff_initial_s, backoff_max_s: exponential backoff between retries (the first wait,
            doubling, capped), plus up to ``backoff_initial_s`` of jitter; a server's
            Retry-After is honoured up to the cap.
        batch: the batch mode's queue (evokernel.llm.batch.BatchQueue): cache misses are queued
            there, not sent, and raise LLMPending. Needs ``cache_path`` (replies are imported
            into the cache). May also be set later as ``client.batch``.
    Raises:
        ValueError: no model configured, bad backoff values, or ``batch`` without a cache.

    ``spent`` (tokens and cost_usd already spent, e.g. RunStore.llm_usage() of a resumed run)
    counts towards the budget, so a resumed run stops where the uninterrupted one would.
    """

    def __init__(self, config: LLMConfig, *, cache_path: Path | None = None,
                 on_usage: Callable[[dict], None] | None = None,
                 mock_response: MockResponse | None = None,
                 backoff_initial_s: float = 1.0, backoff_max_s: float = 60.0,
                 spent: Mapping[str, float] | None = None,
                 batch: BatchQueue | None = None) -> None:
        if batch is not None and cache_path is None:
            raise ValueError("LLMClient: the batch mode needs a cache_path (replies are imported "
                             "into the reply cache)")
        if config.model is None and not config.models:
            raise ValueError("LLMClient: LLMConfig.model (or models) must name a litellm model")
        if not 0 <= backoff_initial_s <= backoff_max_s:
            raise ValueError("LLMClient: need 0 <= backoff_initial_s <= backoff_max_s")
        self.config = config
        self.cache = ReplyCache(cache_path) if cache_path is not None else None
        self.on_usage = on_usage
        self.mock_response = mock_response
        self.batch = batch
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._semaphore = threading.Semaphore(config.max_concurrency)
        self._lock = threading.Lock()
        self._jitter = random.Random()
        self._unpriced: set[str] = set()
        self._in_flight: dict[str, _Flight] = {}
        self._totals: dict[str, Any] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                        "reasoning_tokens": 0, "cost_usd": 0.0,
                                        "cache_hits": 0, "errors": 0, "retries": 0}
        self.last_error: str | None = None
        for key in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd"):
            self._totals[key] += (spent or {}).get(key, 0)

    @property
    def usage(self) -> dict[str, Any]:
        """Totals so far: calls (answered requests), prompt/completion/reasoning tokens, cost_usd,
        cache_hits, errors (calls that failed for good) and retries. Cache hits add no tokens."""
        with self._lock:
            return dict(self._totals)

    def budget_exceeded(self) -> bool:
        """True once prompt + completion tokens reach ``max_total_tokens`` or the cost reaches
        ``max_cost_usd``. Calls in flight when it turns True still finish, so a run can overshoot
        by up to ``max_concurrency`` calls."""
        cfg = self.config
        with self._lock:
            tokens = self._totals["prompt_tokens"] + self._totals["completion_tokens"]
            cost = self._totals["cost_usd"]
        return ((cfg.max_total_tokens is not None and tokens >= cfg.max_total_tokens)
                or (cfg.max_cost_usd is not None and cost >= cfg.max_cost_usd))

    def missing_credentials(self) -> list[str]:
        """Environment variables litellm says the configured models need but that are unset
        (e.g. ["OPENAI_API_KEY"]); [] with an ``api_base`` (local servers often need none),
        with scripted replies, or when litellm cannot tell."""
        if self.mock_response is not None or self.config.api_base:
            return []
        models = [m for m, _ in self.config.models] or [self.config.model]
        missing: list[str] = []
        for model in models:
            try:
                found = load_litellm().validate_environment(model=model)
            except Exception:  # an unknown provider: let the first call report it
                continue
            missing += [k for k in found.get("missing_keys", []) if k not in missing]
        return missing

    def choose_model(self, messages: list[dict], sample_index: int = 0) -> str:
        """The model for this request: ``config.model``, or with an ensemble a weighted draw
        from an RNG seeded by (messages, sample_index), so the same request picks the same model."""
        if not self.config.models:
            return str(self.config.model)
        seed = hashlib.sha256(json.dumps([messages, sample_index], sort_keys=True,
                                         default=str).encode()).hexdigest()
        names = [m for m, _ in self.config.models]
        weights = [w for _, w in self.config.models]
        return random.Random(int(seed[:16], 16)).choices(names, weights=weights)[0]

    def complete(self, messages: list[dict], *, purpose: str, sample_index: int = 0) -> LLMReply:
        """Send one chat completion (or replay it from the cache, or wait for the same request
        already in flight and take its reply, counted as a cache hit).

        Args:
            messages: OpenAI-style ``[{"role": ..., "content": ...}, ...]``.
            purpose: what the call is for ("ideas", "implement", "repair", ...), for the record.
            sample_index: distinguishes repeated samples of the same request (cache key).
        Returns: the LLMReply.
        Raises:
            BudgetExceeded: the budget is already spent (nothing is sent).
            LLMPending: batch mode, and the reply is not in the cache: the request was queued
                (``self.batch``), not sent.
            LLMError: the call failed for good (after retries, with a non-retried error, or, in
                the batch mode, as the batch reported it).
            ValueError: malformed messages.
        """
        if not messages or not all(isinstance(m, dict) and "role" in m and "content" in m
                                   for m in messages):
            raise ValueError("complete: messages must be a non-empty list of "
                             "{'role': ..., 'content': ...} dicts")
        cfg = self.config
        model = self.choose_model(messages, sample_index)
        key = request_key(model, messages, cfg.temperature, cfg.max_tokens, sample_index)
        start = time.perf_counter()
        with self._lock:
            flight = self._in_flight.get(key)
            leader = flight is None
            if flight is None:
                flight = self._in_flight[key] = _Flight()
        if not leader:  # the same request is in flight: its reply is this one's, as in a replay
            flight.done.wait()
            if flight.reply is not None:
                return self._replayed(flight.reply, purpose, sample_index, start, key)
            error = flight.error
            if isinstance(error, LLMError):
                raise type(error)(str(error)) from error
            raise LLMError(f"{purpose}: {model}: the identical request in flight failed: "
                           f"{type(error).__name__}: {error}") from error
        try:
            flight.reply = self._complete(messages, model, key, purpose, sample_index, start)
            return flight.reply
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                del self._in_flight[key]
            flight.done.set()

    # -- internals ---------------------------------------------------------------------------

    def _replayed(self, reply: LLMReply, purpose: str, sample_index: int,
                  start: float, key: str | None = None) -> LLMReply:
        """``reply`` as a cache hit: no tokens, no cost; counted and reported."""
        reply = replace(reply, prompt_tokens=0, completion_tokens=0, reasoning_tokens=0,
                        cost_usd=0.0, cached=True, latency_s=time.perf_counter() - start)
        with self._lock:
            self._totals["cache_hits"] += 1
        self._report(reply, purpose, sample_index, attempts=0, error=None, key=key)
        return reply

    def _complete(self, messages: list[dict], model: str, key: str, purpose: str,
                  sample_index: int, start: float) -> LLMReply:
        """The cache, else the budget check and the request itself (``complete`` minus the
        single flight)."""
        cfg = self.config
        hit = self.cache.get(key) if self.cache is not None else None
        if hit is not None:
            reply = LLMReply(text=hit["text"], model=hit["model"] or model,
                             prompt_tokens=int(hit["prompt_tokens"] or 0),
                             completion_tokens=int(hit["completion_tokens"] or 0),
                             reasoning_tokens=int(hit["reasoning_tokens"] or 0),
                             cost_usd=float(hit["cost_usd"] or 0.0), cached=False,
                             latency_s=time.perf_counter() - start,
                             usage_source=hit["usage_source"], scripted=hit["scripted"],
                             origin=hit["origin"], answered_by=hit["answered_by"])
            if hit["unbilled"] and self.cache.claim(key):   # an imported reply's first use
                self._count(reply)
                self._report(reply, purpose, sample_index, attempts=0, error=None, key=key)
                return reply
            return self._replayed(reply, purpose, sample_index, start, key)
        asked = self.batch is not None and self.batch.waiting(key)   # written out in budget
        if self.budget_exceeded() and not asked:
            raise BudgetExceeded(f"{purpose}: LLM budget spent ({self._budget_text()}); "
                                 "not sending")
        if self.batch is not None:
            return self._queue(messages, model, key, purpose, sample_index)
        attempts = [0]
        try:
            response = self._call_with_retries(model, messages, purpose, attempts)
        except Exception as e:  # every failure becomes LLMError, after the record is written
            error = f"{type(e).__name__}: {str(e)[:500]}"
            failed = LLMReply("", model, 0, 0, 0, 0.0, False, time.perf_counter() - start)
            with self._lock:
                self._totals["errors"] += 1
                self.last_error = error
            self._report(failed, purpose, sample_index, attempts=attempts[0], error=error,
                         key=key)
            if isinstance(e, HardTimeout):
                error = f"no reply within timeout_s={cfg.timeout_s}"
            raise LLMError(f"{purpose}: {model}: {error} (after {attempts[0]} attempt(s))") from e
        reply = self._reply_from(response, model, messages, time.perf_counter() - start)
        self._count(reply)
        if self.cache is not None:
            self.cache.put(key, reply)
        self._report(reply, purpose, sample_index, attempts=attempts[0], error=None, key=key)
        return reply

    def _count(self, reply: LLMReply) -> None:
        with self._lock:
            t = self._totals
            t["calls"] += 1
            t["prompt_tokens"] += reply.prompt_tokens
            t["completion_tokens"] += reply.completion_tokens
            t["reasoning_tokens"] += reply.reasoning_tokens
            t["cost_usd"] += reply.cost_usd

    def _queue(self, messages: list[dict], model: str, key: str, purpose: str,
               sample_index: int) -> LLMReply:
        """The batch mode's cache miss: raise the batch's error for a request it failed for
        good, else queue the request and raise LLMPending."""
        assert self.batch is not None
        failed = self.batch.failure(key)
        if failed is not None:
            with self._lock:
                self._totals["errors"] += 1
                self.last_error = failed
            self._report(LLMReply("", model, 0, 0, 0, 0.0, False, 0.0, origin="batch"), purpose,
                         sample_index, attempts=0, error=failed, key=key)
            raise LLMError(f"{purpose}: {model}: the batch failed this request: {failed}")
        cfg = self.config
        self.batch.add(BatchRequest(custom_id=key, model=model, messages=messages,
                                    temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                                    purpose=purpose, sample_index=sample_index,
                                    params=provider_params(model, cfg.temperature,
                                                           cfg.max_tokens)))
        raise LLMPending(f"{purpose}: request {key[:12]} queued for the LLM batch (not sent; "
                         "waiting for its reply, not an error)")

    def _budget_text(self) -> str:
        u = self.usage
        return (f"{u['prompt_tokens'] + u['completion_tokens']} tokens of "
                f"{self.config.max_total_tokens}, ${u['cost_usd']:.4f} of "
                f"{self.config.max_cost_usd}")

    def _call_with_retries(self, model: str, messages: list[dict], purpose: str,
                           attempts: list[int]) -> Any:
        from tenacity import Retrying, retry_if_exception, stop_after_attempt

        def wait_s(state: Any) -> float:
            base = min(self.backoff_max_s,
                       self.backoff_initial_s * 2.0 ** (state.attempt_number - 1))
            base += self._jitter.uniform(0.0, self.backoff_initial_s)
            exc = state.outcome.exception() if state.outcome else None
            return min(self.backoff_max_s, max(base, retry_after_s(exc)))

        def before_sleep(state: Any) -> None:
            with self._lock:
                self._totals["retries"] += 1
            exc = state.outcome.exception() if state.outcome else None
            logger.warning("LLM {} ({}): attempt {} failed ({}: {}); retrying in {:.1f} s",
                           purpose, model, state.attempt_number, type(exc).__name__,
                           str(exc)[:200], state.next_action.sleep if state.next_action else 0)

        retrying = Retrying(stop=stop_after_attempt(self.config.max_retries + 1), wait=wait_s,
                            retry=retry_if_exception(is_retryable), before_sleep=before_sleep,
                            reraise=True)
        for attempt in retrying:
            with attempt:
                attempts[0] += 1
                return self._attempt(model, messages)
        raise AssertionError("unreachable: tenacity reraises the last error")  # pragma: no cover

    def _attempt(self, model: str, messages: list[dict]) -> Any:
        """One request in a worker thread; stop waiting after timeout_s (hard deadline)."""
        litellm = load_litellm()
        cfg = self.config
        kwargs: dict[str, Any] = {"model": model, "messages": messages,
                                  "temperature": cfg.temperature, "timeout": cfg.timeout_s,
                                  "num_retries": 0, "max_retries": 0, "drop_params": True}
        if cfg.max_tokens is not None:
            kwargs["max_tokens"] = cfg.max_tokens
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        mock = self.mock_response

        def call() -> Any:               # a mock's reply is made inside the deadline, too
            if mock is not None:
                kwargs["mock_response"] = mock(messages) if callable(mock) else mock
            return litellm.completion(**kwargs)
        with self._semaphore:
            return call_with_deadline(call, cfg.timeout_s, model)

    def _reply_from(self, response: Any, model: str, messages: list[dict],
                    latency_s: float) -> LLMReply:
        """The LLMReply of a litellm response (evokernel.llm.tokens.reply_usage), with the
        stand-in label when a mock or the demo fake server wrote it."""
        fingerprint = str(getattr(response, "system_fingerprint", None) or "")
        scripted = mock_label(self.mock_response) if self.mock_response is not None else \
            fingerprint if fingerprint.startswith(STAND_IN) else None
        usage = reply_usage(response, model, messages)
        # a stand-in's own numbers are placeholders (litellm's mock: 10 + 20 whatever the text)
        source = "stand-in" if scripted and usage.source == "provider" else usage.source
        if usage.cost_usd == 0.0 and model not in self._unpriced:
            self._unpriced.add(model)
            logger.info("LLM {}: litellm knows no price; its cost is counted as 0.0", model)
        return LLMReply(text=usage.text, model=model, prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens,
                        reasoning_tokens=usage.reasoning_tokens, cost_usd=usage.cost_usd,
                        cached=False, latency_s=latency_s, usage_source=source,
                        scripted=scripted)

    def _report(self, reply: LLMReply, purpose: str, sample_index: int, *, attempts: int,
                error: str | None, key: str | None = None) -> None:
        if self.on_usage is None:
            return
        record = {"purpose": purpose, "model": reply.model, "sample_index": sample_index,
                  "prompt_tokens": reply.prompt_tokens,
                  "completion_tokens": reply.completion_tokens,
                  "reasoning_tokens": reply.reasoning_tokens, "cost_usd": reply.cost_usd,
                  "cached": reply.cached, "latency_s": reply.latency_s, "attempts": attempts,
                  "error": error, "key": key, "usage_source": reply.usage_source,
                  "scripted": reply.scripted, "origin": reply.origin,
                  "answered_by": reply.answered_by}
        try:
            self.on_usage(record)
        except Exception:  # a broken recorder must not lose the reply
            logger.exception("on_usage callback failed for an LLM {} call", purpose)
