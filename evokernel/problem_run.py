"""Running problem files' set-up without a GPU: ``evokernel problems --run``.

    run_setups(paths, timeout_s=60, jobs=None) -> list[SetupRun]

The files run in evokernel.problem_probe: one server process imports torch once, then forks a
process of its own for each file, so a file that hangs, crashes or changes global state harms
nothing else, and is killed at ``timeout_s`` (counted from its fork). What the set-up does there
(meta device, then the CPU), and what counts as a failure, is described in that module.
The server runs with the environment of a build worker (no credentials, evokernel.sandbox) and
no visible GPU (``CUDA_VISIBLE_DEVICES=""``): this checks what a machine without one can.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Sequence

from evokernel.errors import EvokernelError

#: Seconds the server may take to import torch before the first file is sent.
START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class SetupRun:
    """What running one problem file's set-up gave.

    status: "ok", "failed", "needs_gpu" (the set-up itself asks for a CUDA device) or
        "timeout".
    stage: where it stopped: "import", "get_init_inputs", "Model", "get_inputs", "run"
        (the process died or hung); "" when ok.
    message: the error in one line (with the file's line where known), or for "ok" the inputs
        ("2 inputs: 16x64 float32, 64 int64").
    device: "cpu" or "meta": where the set-up last ran (None when it did not).
    input_bytes, parameter_bytes: sizes of the inputs and of the Model's parameters and
        buffers (None when unknown).
    elapsed_s: wall seconds from the file's fork to its answer.
    """

    path: Path
    status: str
    stage: str
    message: str
    device: str | None = None
    input_bytes: int | None = None
    parameter_bytes: int | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_setups(paths: Sequence[Path], *, timeout_s: float = 60.0,
               jobs: int | None = None) -> list[SetupRun]:
    """Run each file's set-up, ``jobs`` at a time (None: the CPU count), each within
    ``timeout_s`` wall seconds. Returns: one SetupRun per path, in order.
    Raises: ValueError for timeout_s <= 0 or jobs < 1; EvokernelError when the server process
    cannot start (torch does not import)."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    jobs = jobs if jobs is not None else max(1, os.cpu_count() or 1)
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    if not paths:
        return []
    from evokernel.sandbox import worker_env
    env = dict(worker_env(), CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    server = subprocess.Popen([sys.executable, "-m", "evokernel.problem_probe"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        return _Session(server, [Path(p) for p in paths], timeout_s, jobs).run()
    finally:
        if server.stdin is not None and not server.stdin.closed:
            server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


class _Session:
    """The parent's side of the server's line protocol (evokernel.problem_probe)."""

    def __init__(self, server: subprocess.Popen, paths: list[Path], timeout_s: float,
                 jobs: int):
        self.server, self.paths, self.timeout_s, self.jobs = server, paths, timeout_s, jobs
        self.results: dict[int, SetupRun] = {}
        self.sent: dict[int, float] = {}         # index -> monotonic time it was sent
        self.killed: set[int] = set()
        self.buffer = b""

    def run(self) -> list[SetupRun]:
        self._read_until(lambda msg: msg.get("ready"), START_TIMEOUT_S)
        todo = list(range(len(self.paths)))
        while todo or self.sent:
            while todo and len(self.sent) < self.jobs:
                i = todo.pop(0)
                self._send({"i": i, "path": str(self.paths[i])})
                self.sent[i] = time.monotonic()
            deadline = min(t0 for i, t0 in self.sent.items() if i not in self.killed) \
                + self.timeout_s if set(self.sent) - self.killed else time.monotonic() + 30
            for msg in self._messages(max(0.0, deadline - time.monotonic())):
                self._answer(msg)
            now = time.monotonic()
            for i, t0 in self.sent.items():
                if i not in self.killed and now - t0 >= self.timeout_s:
                    self._send({"kill": i})
                    self.killed.add(i)
        return [self.results[i] for i in range(len(self.paths))]

    def _answer(self, msg: dict[str, Any]) -> None:
        i = msg["i"]
        elapsed = time.monotonic() - self.sent.pop(i)
        path = self.paths[i]
        if i in self.killed:
            self.results[i] = SetupRun(path, "timeout", "run", f"its set-up took over "
                                       f"{self.timeout_s:g} s (killed)", elapsed_s=elapsed)
        elif "result" in msg:
            self.results[i] = SetupRun(path=path, elapsed_s=elapsed, **msg["result"])
        else:
            self.results[i] = SetupRun(path, "failed", "run", f"its process died "
                                       f"({msg.get('died')}) while the set-up ran",
                                       elapsed_s=elapsed)

    def _send(self, msg: dict[str, Any]) -> None:
        stdin: IO[bytes] = self.server.stdin   # type: ignore[assignment]
        stdin.write(json.dumps(msg).encode() + b"\n")
        stdin.flush()

    def _read_until(self, done: Any, timeout_s: float) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if any(done(m) for m in self._messages(end - time.monotonic())):
                return
        raise EvokernelError(f"problems --run: the set-up process did not start within "
                             f"{timeout_s:g} s (does `{sys.executable} -c 'import torch'` "
                             "work?)")

    def _messages(self, timeout_s: float) -> list[dict[str, Any]]:
        """The complete lines the server wrote within ``timeout_s``, as JSON objects.
        Raises: EvokernelError when the server has exited."""
        out = self.server.stdout
        ready, _, _ = select.select([out], [], [], timeout_s)
        if not ready:
            return []
        data = os.read(out.fileno(), 1 << 16)       # type: ignore[union-attr]
        if not data:
            raise EvokernelError(f"problems --run: the set-up process exited (status "
                                 f"{self.server.wait()})")
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]
