"""A tiny OpenAI-compatible server for tests (stdlib only, no network beyond 127.0.0.1): chat
completions, and the files and batches endpoints of OpenAI's Batch API.

litellm reaches it with ``model="openai/fake-model"``, ``api_base=server.api_base`` and the key
``sk-fake`` in ``OPENAI_API_KEY``. Replies are scripted, latency and HTTP errors injectable, and
every request is counted::

    with FakeOpenAI(reply=lambda req: "hello", latency_s=1.0, fail_first=2) as server:
        ...  # the first 2 requests get 429, the rest "hello" after 1 s
        assert server.count == 3

Every reply is labelled as a stand-in: its ``system_fingerprint`` is ``STAND_IN`` followed by the
server's ``label``, so the LLM client records it as scripted, never as a model's reply
(evokernel.llm.client).

The Batch API (https://platform.openai.com/docs/api-reference/batch): ``POST /v1/files`` (a
multipart upload with ``purpose=batch``), ``GET /v1/files/{id}`` and ``/v1/files/{id}/content``;
``POST /v1/batches``, ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. A batch reads
``in_progress`` for its first ``batch_polls`` retrievals, then each line of its input file is
answered as a chat completion would be (``fail_first`` and ``reply`` apply; each line counts as a
request) and it ends ``batch_outcome``: with "completed", answers go to an output file and
non-200 answers to an error file, one JSON line each (``{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}``).
"""
from __future__ import annotations

import itertools
import json
import threading
import time
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from evokernel.llm.cache import STAND_IN   # every reply's fingerprint starts with it

#: The states a batch ends in (OpenAI's Batch API).
BATCH_ENDS = ("completed", "failed", "expired", "cancelled")


class FakeOpenAI:
    """OpenAI-compatible ``POST /v1/chat/completions`` (and ``/chat/completions``) server, with
    the Batch API's files and batches endpoints (see the module docstring).

    Args:
        reply: the reply text, or a callable from the request JSON (dict) to the reply text.
        latency_s: seconds each request waits before it is answered (errors included), or a
            callable from the request JSON to those seconds.
        fail_first: the first this-many requests are answered with ``fail_status``.
        fail_status: HTTP status of the injected errors (429, 500, 401, ...).
        fail_message: the injected errors' message.
        prompt_tokens, completion_tokens, reasoning_tokens: the usage each reply reports.
        label: what answers, for the replies' ``system_fingerprint`` (``STAND_IN: label``);
            None sends no fingerprint (only for tests of how a model's reply is recorded).
        batch_polls: retrievals of a batch that see it ``in_progress`` before it is answered.
        batch_outcome: the state a batch ends in ("completed", "failed", "expired").

    Attributes (besides ``requests``, ``count``): ``files`` (id -> {"meta", "content"}),
    ``batches`` (id -> the batch object), ``batch_polls_seen`` (retrievals so far).
    """

    def __init__(self, reply: str | Callable[[dict[str, Any]], str] = "ok", *,
                 latency_s: float | Callable[[dict[str, Any]], float] = 0.0,
                 fail_first: int = 0, fail_status: int = 429,
                 fail_message: str = "injected error",
                 prompt_tokens: int = 100, completion_tokens: int = 50,
                 reasoning_tokens: int = 0, label: str | None = "evokernel.demo.fake_server",
                 batch_polls: int = 1, batch_outcome: str = "completed") -> None:
        if batch_outcome not in BATCH_ENDS:
            raise ValueError(f"FakeOpenAI: batch_outcome must be one of {BATCH_ENDS}, "
                             f"got {batch_outcome!r}")
        self.reply = reply
        self.label = label
        self.batch_polls = batch_polls
        self.batch_outcome = batch_outcome
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_polls_seen = 0
        self._ids = itertools.count(1)
        self.latency_s = latency_s
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.fail_message = fail_message
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.reasoning_tokens = reasoning_tokens
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def count(self) -> int:
        """Requests received so far (answered or not)."""
        with self._lock:
            return len(self.requests)

    def start(self) -> "FakeOpenAI":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()        # wakes handlers that are sleeping out their latency
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            latency_s = self.latency_s(body) if callable(self.latency_s) else self.latency_s
            if latency_s:
                self._stop.wait(latency_s)
        finally:
            with self._lock:
                self.in_flight -= 1
        if index < self.fail_first:
            return self.fail_status, {"error": {"message": self.fail_message,
                                                "type": "fake_error", "code": self.fail_status}}
        text = self.reply(body) if callable(self.reply) else self.reply
        usage: dict[str, Any] = {"prompt_tokens": self.prompt_tokens,
                                 "completion_tokens": self.completion_tokens,
                                 "total_tokens": self.prompt_tokens + self.completion_tokens}
        if self.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return 200, {
            "id": f"chatcmpl-fake-{index}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "fake-model"),
            "system_fingerprint": f"{STAND_IN}: {self.label}" if self.label else None,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": usage,
        }

    # -- the Batch API ---------------------------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        with self._lock:
            return f"{prefix}-fake-{next(self._ids)}"

    def _add_file(self, content: bytes, filename: str, purpose: str) -> dict[str, Any]:
        meta = {"id": self._new_id("file"), "object": "file", "bytes": len(content),
                "created_at": int(time.time()), "filename": filename, "purpose": purpose,
                "status": "processed"}
        with self._lock:
            self.files[meta["id"]] = {"meta": meta, "content": content}
        return meta

    def _upload(self, content_type: str, raw: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /v1/files``: a multipart form with ``purpose`` and ``file``."""
        form = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
        if not form.is_multipart():
            return 400, {"error": {"message": "expected multipart/form-data"}}
        fields = {part.get_param("name", header="content-disposition"): part
                  for part in form.iter_parts()}
        if "file" not in fields:
            return 400, {"error": {"message": "no file in the upload"}}
        purpose = (fields["purpose"].get_payload(decode=True) or b"").decode() \
            if "purpose" in fields else ""
        data = fields["file"].get_payload(decode=True) or b""
        return 200, self._add_file(data, fields["file"].get_filename() or "upload", purpose)

    def _create_batch(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        file_id = body.get("input_file_id")
        if file_id not in self.files:
            return 404, {"error": {"message": f"no file {file_id!r}"}}
        batch = {"id": self._new_id("batch"), "object": "batch",
                 "endpoint": body.get("endpoint", "/v1/chat/completions"),
                 "input_file_id": file_id,
                 "completion_window": body.get("completion_window", "24h"),
                 "status": "validating", "output_file_id": None, "error_file_id": None,
                 "created_at": int(time.time()), "metadata": body.get("metadata"),
                 "request_counts": {"total": 0, "completed": 0, "failed": 0}}
        with self._lock:
            self.batches[batch["id"]] = batch
        return 200, batch

    def _retrieve_batch(self, batch_id: str) -> tuple[int, dict[str, Any]]:
        batch = self.batches.get(batch_id)
        if batch is None:
            return 404, {"error": {"message": f"no batch {batch_id!r}"}}
        with self._lock:
            self.batch_polls_seen += 1
            polls = batch.setdefault("_polls", 0)
            batch["_polls"] = polls + 1
        if batch["status"] not in BATCH_ENDS:
            if polls < self.batch_polls:
                batch["status"] = "in_progress"
            else:
                self._finish(batch)
        return 200, {k: v for k, v in batch.items() if not k.startswith("_")}

    def _finish(self, batch: dict[str, Any]) -> None:
        """Answer every line of the batch's input file and end it as ``batch_outcome``."""
        if self.batch_outcome != "completed":
            batch["status"] = self.batch_outcome
            batch["errors"] = {"object": "list", "data": [
                {"code": self.batch_outcome, "message": f"injected: batch {self.batch_outcome}"}]}
            return
        out, err = [], []
        lines = self.files[batch["input_file_id"]]["content"].decode().splitlines()
        for n, line in enumerate(x for x in lines if x.strip()):
            request = json.loads(line)
            status, payload = self._answer(request.get("body") or {})
            row = {"id": f"batch_req_{n}", "custom_id": request.get("custom_id"),
                   "response": {"status_code": status, "request_id": f"req_{n}",
                                "body": payload}, "error": None}
            (out if status == 200 else err).append(json.dumps(row))
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                meta = self._add_file(("\n".join(rows) + "\n").encode(),
                                      f"{batch['id']}_{name}.jsonl", "batch_output")
                batch[name] = meta["id"]
        batch["request_counts"] = {"total": len(out) + len(err), "completed": len(out),
                                   "failed": len(err)}
        batch["status"] = "completed"

    def _route_get(self, path: str) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:1] == ["v1"]:
            parts = parts[1:]
        if len(parts) == 2 and parts[0] == "batches":
            return self._retrieve_batch(parts[1])
        if len(parts) in (2, 3) and parts[0] == "files" and parts[1] in self.files:
            f = self.files[parts[1]]
            return (200, f["content"]) if parts[2:] == ["content"] else (200, f["meta"])
        return 404, {"error": {"message": f"no route GET {path}"}}

    def _route_post(self, path: str, content_type: str, raw: bytes) -> tuple[int, Any]:
        route = path.rstrip("/")
        if route.startswith("/v1/"):
            route = route[3:]
        if route == "/files":
            return self._upload(content_type, raw)
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return 400, {"error": {"message": "bad json"}}
        if route == "/chat/completions":
            return self._answer(body)
        if route == "/batches":
            return self._create_batch(body)
        parts = route.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel" \
                and parts[1] in self.batches:
            self.batches[parts[1]]["status"] = "cancelled"
            return self._retrieve_batch(parts[1])
        return 404, {"error": {"message": f"no route {path}"}}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                self._send(*fake._route_post(self.path, self.headers.get("Content-Type", ""),
                                             raw))

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                self._send(*fake._route_get(self.path.split("?")[0]))

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/octet-stream"
                                     if isinstance(payload, bytes) else "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # silence stderr
                pass

        return Handler
