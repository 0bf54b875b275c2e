"""The batch LLM mode (``evokernel run --llm-batch DIR``): a generation's requests are written out
for a batch API, or for a model answering each request on its own, instead of being sent.

How a round goes (evokernel.search.evolution calls ``BatchMode.flush``, evokernel.llm.batch_mode,
after each round of operator calls):

1. The LLM client (``LLMClient(batch=BatchQueue())``) answers what the run's reply cache holds;
   every other request is queued here (``BatchQueue.add``) and the call raises LLMPending.
2. ``flush`` writes the queued requests (``write_export``): one OpenAI Batch API input file,
   ``DIR/<run>-g<generation>-r<round>.jsonl`` (one line per request: ``custom_id`` = the
   reply-cache key, ``method``, ``url`` ``/v1/chat/completions``, ``body`` with the model, the
   system and user messages and the sampling settings), and each request as its own file,
   ``DIR/requests/<custom_id>.json`` (custom_id, model, messages, temperature, max_tokens), and
   as ``DIR/requests/<custom_id>.md`` (the same messages as plain text, for a reader that
   shortens long lines), to be answered in a fresh context from that file alone, its reply text saved verbatim as
   ``DIR/replies/<custom_id>.txt``. The run store records each request as pending
   (RunStore.add_llm_requests).
3. Without ``submit`` it raises LLMPending: the search stops before the round's children are
   evaluated (``RunResult.stopped == "llm_batch"``). ``evokernel llm import`` fills the reply
   cache (evokernel.llm.batch_import) and ``evokernel run --resume RUN_DIR --llm-batch DIR``
   makes the same calls again, now answered from the cache. With ``submit``
   (``--llm-batch-submit``) the file goes to the provider's Batch API through litellm
   (evokernel.llm.submit), is polled, and its results are imported; the round is then made
   again in the same process.

The idea mutation makes two rounds per generation (its ideas, then their implementations), and
repairs a third: each round is one export. Nothing here imports litellm.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

#: The Batch API endpoint every line asks for.
ENDPOINT = "/v1/chat/completions"
#: The line around each message's role in a ``requests/<custom_id>.md`` file.
MESSAGE_RULE = "========"
#: The reply folder's optional manifest: {"answered_by": "...", "scripted": false}.
MANIFEST = "answered_by.json"


def provider_model(model: str) -> str:
    """The model name a provider's own API expects: litellm's ``provider/name`` without the
    provider ("openai/gpt-4o" -> "gpt-4o"; "openrouter/a/b" -> "a/b"; "gpt-4o" unchanged)."""
    return model.split("/", 1)[1] if "/" in model else model


@dataclass(frozen=True)
class BatchRequest:
    """One request the batch mode writes out instead of sending.

    Attributes:
        custom_id: the reply-cache key (evokernel.llm.cache.request_key), hex SHA-256.
        model: the litellm model string (part of the key); the batch line carries
            ``provider_model(model)``.
        messages: the OpenAI-style chat messages, as the live call would send them.
        temperature, max_tokens: the sampling settings (max_tokens None: not sent).
        purpose, sample_index: what the call is for, and its sample index (part of the key,
            never sent to the model).
        params: the sampling settings in the provider's own names and limits, or None (sent
            as temperature and max_tokens).
    """

    custom_id: str
    model: str
    messages: list[dict]
    temperature: float
    max_tokens: int | None
    purpose: str
    sample_index: int
    params: Mapping[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The chat-completions body: model, messages and the sampling settings, as the
        provider takes them when ``params`` is given (evokernel.llm.client.provider_params:
        litellm's mapping, e.g. ``max_completion_tokens`` and no temperature for gpt-5), else
        temperature and max_tokens as they are."""
        body: dict[str, Any] = {"model": provider_model(self.model), "messages": self.messages}
        if self.params is not None:
            body.update(self.params)
            return body
        body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def batch_line(self) -> dict[str, Any]:
        """The request as one line of an OpenAI Batch API input file."""
        return {"custom_id": self.custom_id, "method": "POST", "url": ENDPOINT,
                "body": self.body()}

    def request_file(self) -> dict[str, Any]:
        """The request as ``requests/<custom_id>.json``: what a model answering it alone
        needs (messages and settings), with the id its reply file must carry."""
        return {"custom_id": self.custom_id, "model": self.model, "messages": self.messages,
                "temperature": self.temperature, "max_tokens": self.max_tokens}

    def request_text(self) -> str:
        """The same request as ``requests/<custom_id>.md``: the messages verbatim, with real
        line breaks, each under a line naming its role. A JSON file holds each message on one
        line (35,000 characters for a prompt with three kernels), and a reader that shortens
        long lines, as an agent's file viewer does, shows the model a kernel with its middle
        cut out (seen in the frontier run of 2026-12-02)."""
        head = [f"LLM request {self.custom_id}",
                f"model: {self.model}; temperature: {self.temperature}; max_tokens: "
                f"{self.max_tokens}",
                "Reply with the assistant message's content; it is saved verbatim as "
                f"replies/{self.custom_id}.txt."]
        body = "\n\n".join(f"{MESSAGE_RULE} {m.get('role', '?')} message {MESSAGE_RULE}\n"
                           f"{m.get('content', '')}" for m in self.messages)
        head.append(f"The messages below are {body.count(chr(10)) + 1} lines: read every one "
                    "(in parts, if a viewer shortens the file) before answering.")
        return "\n".join(head) + "\n\n" + body + "\n"


class BatchQueue:
    """The requests a round could not answer from the cache (thread-safe; one per run), and the
    requests a batch failed for good (the client raises their error instead of queueing them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, BatchRequest] = {}
        self._failed: dict[str, str] = {}
        self._waiting: set[str] = set()

    def wait_for(self, custom_ids: Iterable[str]) -> None:
        """Note requests written out earlier and not answered yet: they were asked within the
        budget, so the client queues them again past it instead of refusing them."""
        with self._lock:
            self._waiting.update(custom_ids)

    def waiting(self, custom_id: str) -> bool:
        """Whether ``custom_id`` was written out earlier and is still without a reply."""
        with self._lock:
            return custom_id in self._waiting

    def add(self, request: BatchRequest) -> None:
        """Queue ``request`` (an identical request queued twice is written out once)."""
        with self._lock:
            self._pending.setdefault(request.custom_id, request)

    def take(self) -> list[BatchRequest]:
        """The queued requests, sorted by custom_id (so an export's bytes do not depend on
        thread timing), and an empty queue."""
        with self._lock:
            out = [self._pending[k] for k in sorted(self._pending)]
            self._pending.clear()
        return out

    def fail(self, custom_id: str, error: str) -> None:
        """Mark a request failed for good: the client raises LLMError with ``error`` for it."""
        with self._lock:
            self._failed[custom_id] = error

    def failure(self, custom_id: str) -> str | None:
        """The error of a request failed for good, or None."""
        with self._lock:
            return self._failed.get(custom_id)


@dataclass(frozen=True)
class Export:
    """One round's requests written out (``write_export``).

    Attributes:
        path: the Batch API input file (JSONL).
        folder: the batch folder (``requests/`` and ``replies/`` are in it).
        generation, round: the generation and its round (1 = its first export).
        custom_ids: the requests' ids, in the file's order.
        reused: ``path`` is the generation's last export, already there with the very same
            lines (not written again).
    """

    path: Path
    folder: Path
    generation: int
    round: int
    custom_ids: tuple[str, ...]
    reused: bool = False


def write_export(store: Any, folder: Path, generation: int,
                 requests: list[BatchRequest]) -> Export:
    """Write ``requests`` as the Batch API input file and as one request file each (see the
    module docstring), create ``folder/replies/``, and record them as pending in ``store`` (a
    RunStore). Files are written whole before they are recorded, so a crash leaves at worst an
    export that a resume writes again. A round written again with the very same lines as the
    generation's last export (a resume before its replies came) reuses that file and its round
    number instead of writing a second copy that someone could submit, and pay for, twice.

    Raises:
        ValueError: no requests.
        OSError: the folder cannot be written.
    """
    if not requests:
        raise ValueError("write_export: no requests to write")
    folder = Path(folder)
    (folder / "requests").mkdir(parents=True, exist_ok=True)
    (folder / "replies").mkdir(exist_ok=True)
    stem = f"{store.run_dir.name}-g{generation:03d}-r"
    rounds = [int(f.name[len(stem):-6]) for f in folder.glob(f"{stem}*.jsonl")
              if f.name[len(stem):-6].isdigit()]
    lines = "".join(json.dumps(r.batch_line(), ensure_ascii=False) + "\n" for r in requests)
    last = folder / f"{stem}{max(rounds):02d}.jsonl" if rounds else None
    if last is not None and _same_text(last, lines):
        # the same round again (a resume before its replies came): the file that is already
        # there, so that no one submits (and pays for) the same requests twice
        round_, path = max(rounds), last
    else:
        round_ = max(rounds, default=0) + 1     # never overwrites an earlier round's file
        path = folder / f"{stem}{round_:02d}.jsonl"
    for r in requests:
        _write_text(folder / "requests" / f"{r.custom_id}.json",
                    json.dumps(r.request_file(), indent=1, ensure_ascii=False) + "\n")
        _write_text(folder / "requests" / f"{r.custom_id}.md", r.request_text())
    if path != last:
        _write_text(path, lines)
    store.add_llm_requests(generation, str(path), [
        {"key": r.custom_id, "purpose": r.purpose, "sample_index": r.sample_index,
         "model": r.model, "request": r.request_file()} for r in requests])
    return Export(path=path, folder=folder, generation=generation, round=round_,
                  custom_ids=tuple(r.custom_id for r in requests), reused=path == last)


def _same_text(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_replies(folder: Path, answer: Callable[[list[dict]], str], *, answered_by: str,
                  scripted: bool) -> int:
    """Answer every request file in ``folder/requests/`` that has no reply file yet with
    ``answer(messages)``, writing ``folder/replies/<custom_id>.txt`` verbatim, and the manifest
    ``folder/replies/answered_by.json`` ({"answered_by", "scripted"}) that ``evokernel llm
    import`` reads, so replies written by a stand-in stay labelled. Returns how many it wrote.

    Raises:
        ValueError: ``folder`` has no ``requests/`` folder.
    """
    folder = Path(folder)
    if not (folder / "requests").is_dir():
        raise ValueError(f"{folder}: no requests/ folder (not a batch folder)")
    replies = folder / "replies"
    replies.mkdir(exist_ok=True)
    written = 0
    for path in sorted((folder / "requests").glob("*.json")):
        out = replies / f"{path.stem}.txt"
        if out.exists():
            continue
        request = json.loads(path.read_text(encoding="utf-8"))
        _write_text(out, answer(request["messages"]))
        written += 1
    _write_text(replies / MANIFEST, json.dumps({"answered_by": answered_by,
                                                "scripted": scripted}) + "\n")
    return written
