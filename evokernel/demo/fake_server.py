"""A tiny OpenAI-compatible chat-completions server for tests (stdlib only, no network beyond
127.0.0.1).

litellm reaches it with ``model="openai/fake-model"``, ``api_base=server.api_base`` and the key
``sk-fake`` in ``OPENAI_API_KEY``. Replies are scripted, latency and HTTP errors injectable, and
every request is counted::

    with FakeOpenAI(reply=lambda req: "hello", latency_s=1.0, fail_first=2) as server:
        ...  # the first 2 requests get 429, the rest "hello" after 1 s
        assert server.count == 3
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


class FakeOpenAI:
    """OpenAI-compatible ``POST /v1/chat/completions`` (and ``/chat/completions``) server.

    Args:
        reply: the reply text, or a callable from the request JSON (dict) to the reply text.
        latency_s: seconds each request waits before it is answered (errors included), or a
            callable from the request JSON to those seconds.
        fail_first: the first this-many requests are answered with ``fail_status``.
        fail_status: HTTP status of the injected errors (429, 500, 401, ...).
        fail_message: the injected errors' message.
        prompt_tokens, completion_tokens, reasoning_tokens: the usage each reply reports.
    """

    def __init__(self, reply: str | Callable[[dict[str, Any]], str] = "ok", *,
                 latency_s: float | Callable[[dict[str, Any]], float] = 0.0,
                 fail_first: int = 0, fail_status: int = 429,
                 fail_message: str = "injected error",
                 prompt_tokens: int = 100, completion_tokens: int = 50,
                 reasoning_tokens: int = 0) -> None:
        self.reply = reply
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
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": usage,
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "bad json"}})
                    return
                status, payload = fake._answer(body)
                self._send(status, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # silence stderr
                pass

        return Handler
