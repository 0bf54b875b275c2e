"""Parent-side handles on GPU worker processes (evokernel.engine.worker): spawn, timeout, kill, respawn.

One handle per GPU. A candidate that hangs past its timeout, crashes the process, or leaves a
sticky CUDA error gets the worker killed; the candidate is marked invalid with that reason and the
next candidate runs in a fresh worker, so it is never blamed. Workers are also recycled after
``recycle_after`` candidates so that leaked memory cannot accumulate.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loguru import logger

from evokernel.engine import gpu_share, protocol
from evokernel.errors import ProblemError, WorkerClosed
from evokernel.records import Candidate, EvalResult, Reason

if TYPE_CHECKING:
    from evokernel.sandbox.workers import GpuWorkerJail


def _log_tail(path: Path, n: int = 3000) -> str:
    try:
        data = path.read_bytes()[-n:]
    except OSError:
        return ""
    return data.decode(errors="replace")


class WorkerHandle:
    """A GPU worker process for one problem on one GPU.

    Args:
        setup: the setup message sent to every (re)spawned worker (``start`` adds
            "sent_at", time.time() as it sends, for the worker's "load_wait").
        env: its environment (no API keys: see evokernel.build.builder.worker_env).
        log_path: file that receives the worker's stdout/stderr (candidate prints included).
        device_index: the GPU it owns (CUDA_VISIBLE_DEVICES).
        setup_timeout_s: how long building the reference (truths, baselines) may take.
        recycle_after: restart the process after this many candidates.
        entry: the worker module to run (tests substitute a fake one).
        sandbox: the jail each spawn runs in (evokernel.sandbox.workers.GpuWorkerJail: its own
            scratch folder, the cache read-only, what set-up measured harvested before the
            first candidate); None: not contained.
    """

    def __init__(self, setup: dict[str, Any], *, env: dict[str, str], log_path: Path,
                 device_index: int = 0, setup_timeout_s: float = 900.0,
                 recycle_after: int = 50, entry: str = "evokernel.engine.worker",
                 sandbox: "GpuWorkerJail | None" = None):
        self.setup_msg = setup
        self.env = dict(env, CUDA_VISIBLE_DEVICES=str(device_index), PYTHONUNBUFFERED="1")
        self.log_path = Path(log_path)
        self.setup_timeout_s = setup_timeout_s
        self.recycle_after = recycle_after
        self.entry = entry
        self.sandbox = sandbox
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self.spawns = 0
        self._done = 0
        self._send: Connection | None = None
        self._recv: Connection | None = None
        self._pending_setup: dict[str, Any] | None = None   # a prepared process's set-up
        self._closed = False       # close() was called: what is in flight gets no verdict

    # -- process life ---------------------------------------------------------------------
    def prepare(self, warm: bool = False) -> None:
        """Spawn the worker process now, without its set-up: it loads its modules (torch and
        the set-up's own, evokernel.engine.worker.preload) and waits, so that a later ``start``
        costs the set-up alone. Used to get the next problem's worker ready while the current
        one is set up and its candidates are timed (evokernel.engine.problem_set); it opens no
        CUDA context, so it cannot disturb them. It is sent its problem at once, to do the
        set-up's CPU part (module, model, input sets) while it waits (evokernel.engine.predraw).
        ``warm``: also ``warm()`` it now."""
        self._spawn()
        if self._send is not None and self._pending_setup is not None:
            try:
                protocol.send(self._send, {**self._pending_setup, "kind": "predraw"})
            except OSError:        # gone already: start() spawns a new one
                pass
        if warm:
            self.warm()

    def warm(self) -> None:
        """Ask a prepared worker to make its CUDA context and load torch.profiler before its
        set-up arrives (the worker's ``warm_up``: a few tiny kernels beside whatever the GPU is
        timing). Does nothing unless ``prepare`` spawned a worker that is still waiting."""
        if self._send is None or self._pending_setup is None:
            return
        try:
            protocol.send(self._send, {"kind": "warm"})
        except OSError:            # gone already: start() spawns a new one
            pass

    def start(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Spawn the worker (unless ``prepare`` did) and wait until its reference is ready, at
        most ``timeout_s`` (default ``setup_timeout_s``); returns its info dict.

        Raises:
            ProblemError: the problem failed to set up (its message holds the worker's error).
            WorkerClosed: ``close`` was called (from another thread) before it was ready.
        """
        self._check_open("set-up")
        if self._pending_setup is None or not self.alive():
            self._spawn()
        setup, self._pending_setup = self._pending_setup, None
        send = self._send
        self.spawns += 1
        self._done = 0
        try:
            self._check_open("set-up")       # a close() since the spawn emptied the pipes
            assert setup is not None and send is not None
            protocol.send(send, {**setup, "sent_at": time.time()})   # the worker's load_wait
        except OSError:
            self._check_open("set-up")
            raise
        return self._ready(self.setup_timeout_s if timeout_s is None else timeout_s)

    def _check_open(self, what: str) -> None:
        """Raises: WorkerClosed when ``close`` was called; ``what`` was cut short by it."""
        if self._closed:
            raise WorkerClosed(f"the evaluator was closed during the GPU worker's {what}; "
                               "what it was evaluating stays pending")

    def _spawn(self) -> None:
        """A fresh worker process (in its jail), its pipes open, its set-up not yet sent."""
        self.kill()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", self.entry, str(to_child_r), str(from_child_w)]
        env, setup, cwd = self.env, self.setup_msg, None
        if self.sandbox is not None:
            cmd, env, setup, cwd = self.sandbox.start(cmd, env, setup)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, pass_fds=(to_child_r, from_child_w), env=env, cwd=cwd, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._send = Connection(to_child_w, readable=False)
        self._recv = Connection(from_child_r, writable=False)
        self._pending_setup = setup

    def _ready(self, timeout_s: float) -> dict[str, Any]:
        """Wait for the set-up's answer. Raises: ProblemError (see ``start``)."""
        t0 = time.perf_counter()
        msg = self._wait(timeout_s)
        if msg is None or msg.get("kind") != "ready":
            self._check_open("set-up")       # a close() is no fault of the problem
            why = (msg or {}).get("error") or (   # a silent worker: no 5 s wait for its exit
                f"stopped answering during set-up (no answer in {timeout_s:.0f} s)"
                if time.perf_counter() - t0 >= timeout_s and self.alive()
                else self._death_note("during set-up"))
            self.kill()
            raise ProblemError(f"{self.setup_msg['problem']['path']}: the GPU worker could not "
                               f"set up the problem:\n{why}")
        if self.sandbox is not None:          # before any candidate runs in it
            self.sandbox.harvest()
        self.info = msg["info"]
        if self.info.get("compile_ms") is not None:   # reused by respawned workers
            self.setup_msg["problem"]["compile_ms"] = self.info["compile_ms"]
        return self.info

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill the worker's whole process group (compilers it started included)."""
        for conn in (self._send, self._recv):
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
        self._send = self._recv = None
        self._pending_setup = None
        if self.proc is not None and self.proc.poll() is None:
            try:
                gpu_share.retire(gpu_share.descendants(self.proc.pid))
            except OSError:   # /proc unreadable: the guard may then wait for the dying worker
                pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        if self.sandbox is not None:
            self.sandbox.cleanup()

    def close(self) -> None:
        """Ask the worker to stop; kill it if it does not within 10 s. A candidate another
        thread is evaluating then ends in WorkerClosed, never in a verdict."""
        self._closed = True
        if self.alive() and self._send is not None:
            try:
                protocol.send(self._send, {"kind": "stop"})
                self.proc.wait(timeout=10)  # type: ignore[union-attr]
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, cand: Candidate, timeout_s: float) -> EvalResult:
        """Gate and time one candidate in the worker. Never raises for a bad candidate.

        Raises:
            ProblemError: a respawned worker could not set the problem up again.
            WorkerClosed: ``close`` was called (from another thread) before the verdict came.
        """
        self._check_open(f"evaluation of {cand.id}")       # no new worker after close()
        if not self.alive() or self._done >= self.recycle_after:
            if self.alive():
                logger.debug("recycling GPU worker after {} candidates", self._done)
            self.start()
        send, t0 = self._send, time.perf_counter()
        try:
            self._check_open(f"evaluation of {cand.id}")
            if send is None:
                raise OSError("the worker's pipe is closed")
            protocol.send(send, {"kind": "eval", "candidate": cand.to_dict()})
        except OSError:
            return self._dead(cand, "the worker was gone before the candidate was sent")
        msg = self._wait(timeout_s)
        self._done += 1
        # a shutdown killed the worker: no timeout, no crash
        self._check_open(f"evaluation of {cand.id}")
        if msg is None:
            timed_out = time.perf_counter() - t0 >= timeout_s
            if timed_out and self.alive():
                self.kill()
                return EvalResult.failure(
                    cand.id, Reason.TIMEOUT,
                    f"no answer after {timeout_s:.0f} s (hang or endless loop); worker killed",
                    eval_s=time.perf_counter() - t0, log=_log_tail(self.log_path))
            return self._dead(cand, "the worker process died")
        try:
            result = EvalResult.from_dict(msg["result"])
        except (KeyError, TypeError, ValueError) as e:
            self.kill()
            return EvalResult.failure(cand.id, Reason.WORKER_CRASH,
                                      f"the worker sent a malformed result ({e}); worker killed")
        if result.candidate_id != cand.id:
            self.kill()
            return EvalResult.failure(
                cand.id, Reason.WORKER_CRASH, f"the worker answered for candidate "
                f"{result.candidate_id!r} while evaluating {cand.id}; worker killed")
        if msg.get("fatal"):
            try:
                self.proc.wait(timeout=10)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                pass
            self.kill()
        return result

    def _dead(self, cand: Candidate, what: str) -> EvalResult:
        self._check_open(f"evaluation of {cand.id}")    # a close() is no crash of the worker
        note = self._death_note("while evaluating")
        self.kill()
        return EvalResult.failure(cand.id, Reason.WORKER_CRASH, f"{what}: {note}",
                                  log=_log_tail(self.log_path))

    def _death_note(self, when: str) -> str:
        if self.proc is None:
            return "not started"
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"stopped answering {when}"
        if self.sandbox is not None and rc > 128:     # the jail's init: signal N -> 128 + N
            rc = 128 - rc
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            return f"killed by signal {name} {when}"
        return f"exited with status {rc} {when}"

    def _wait(self, timeout_s: float) -> dict[str, Any] | None:
        """The worker's next message, or None on timeout or death (its pipe closed; the process
        may not have been reaped yet, so callers tell the two apart by the time waited)."""
        recv = self._recv      # kept: a close() from another thread sets self._recv to None
        if recv is None:       # closed already: the caller's _check_open says so
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self._closed:
                return None
            try:
                if recv.poll(min(left, 1.0)):
                    return protocol.recv(recv)
            except (EOFError, OSError, protocol.ProtocolError):
                return None
            if not self.alive():
                # Drain what it sent before it died (a fatal result precedes its exit).
                try:
                    if recv.poll(0.1):
                        return protocol.recv(recv)
                except (EOFError, OSError, protocol.ProtocolError):
                    pass
                return None
