"""The GPU evaluation worker: the only process that runs problem and candidate code.

Started by evokernel.engine.handle as ``python -m evokernel.engine.worker IN_FD OUT_FD`` with an
environment that holds no API keys (LLM-written code is untrusted) and ``CUDA_VISIBLE_DEVICES``
set to its one GPU. It receives JSON messages (evokernel.engine.protocol) on IN_FD and answers on
OUT_FD:

    {"kind": "setup", "problem": {...}, "config": RunConfig dict, "arch": "9.0"}
        -> {"kind": "ready", "info": {...device, baselines, floor...}} | {"kind": "setup_error"}
    {"kind": "eval", "candidate": Candidate dict}
        -> {"kind": "result", "result": EvalResult dict, "fatal": bool}
    {"kind": "predraw", "problem": {...}, "config": ...}   (optional, before "setup"; no answer)
        -> the set-up's CPU work (its module, model and input sets) done while it waits, until
           the next message comes (evokernel.engine.predraw), handed to its set-up
    {"kind": "warm"}   (optional, before "setup"; no answer)
        -> the CUDA context made and torch.profiler loaded ahead of the set-up (``warm_up``)
    {"kind": "stop"}
        -> exits at once (``os._exit``, no interpreter teardown), no answer

The per-problem state and the stages a candidate goes through live in evokernel.engine.session.
After a sticky CUDA error (illegal address, misaligned access, ...) it answers with
``fatal: True`` and exits, so the next candidate runs in a fresh process and is never blamed.
Anything the candidate prints goes to the worker's log file, not to the protocol pipes. When the
driver dies (its end of IN_FD closed by the kernel) the worker exits, even mid-candidate
(evokernel.engine.lifeline).
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from multiprocessing.connection import Connection

from evokernel.config import RunConfig
from evokernel.engine import protocol
from evokernel.engine.faults import tail
from evokernel.engine.lifeline import exit_when_orphaned
from evokernel.engine.predraw import Predrawn, predraw
from evokernel.engine.session import Session
from evokernel.records import Candidate


def warm_up() -> None:
    """Pay a fresh process's one-time GPU costs before its problem arrives: the CUDA context
    and torch.profiler's first use (CUPTI; its first profile took 4.9 s on the H200,
    results/h200-2026-12-01-s5/call1/probe.txt). It runs a few tiny kernels while another
    process may be timing candidates on the same GPU, so it is opt-in
    (WorkerHandle.prepare(warm=True)), until the bench's suite phase shows it leaves their
    verdicts alone. Errors are ignored: the set-up makes the context again and says why."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    try:
        torch.cuda.set_device(0)
        x = torch.ones(1024, device="cuda")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            (x * 2).sum().item()
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 -- the set-up reports a real problem
        pass


def preload() -> None:
    """Import, before the set-up arrives, what the set-up (Session) imports on first use, so
    that a worker started ahead of its problem (WorkerHandle.prepare) has it ready: torch,
    torch._dynamo (the flop count's torch.func and FlopCounterMode pull it in: 4.0-4.5 s of the
    "floors" step of each set-up on the H200, results/h200-2026-12-03-s18/chain/bench_suite.md;
    on this project's CPU machine the first count_flops took 5.8 s without this, 0.02 s after
    it), and evokernel's gate and timing modules. Opens no CUDA context."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    from evokernel.gate import fallback, judge, reference, trace  # noqa: F401
    from evokernel.timing import clocks, floor, interleaved  # noqa: F401


def set_up(msg: dict, drawn: Predrawn | None) -> Session:
    """The problem's Session from its "setup" message, with what was made for it ahead
    (``drawn``). Its info's "setup_steps_s" starts with the seconds the message waited for this
    worker to load (preload) or to end the set it was drawing ahead (``predraw``).
    Raises: what the set-up raises."""
    config = RunConfig.from_dict(msg["config"]).evaluation
    waited = max(0.0, time.time() - msg.get("sent_at", time.time()))
    session = Session(msg["problem"], config, msg["arch"], predrawn=drawn)
    if drawn is not None:
        drawn.clear()                      # anything the set-up did not take: not kept
    session.info["setup_steps_s"] = {"load_wait": round(waited, 4),
                                     **session.info["setup_steps_s"]}
    return session


def draw_ahead(msg: dict, conn_in: Connection) -> Predrawn | None:
    """``predraw`` for a "predraw" message, stopping before a set when another message is
    waiting on ``conn_in``; None where it cannot (the set-up then does it all and reports what
    is wrong)."""
    try:
        config = RunConfig.from_dict(msg["config"]).evaluation
        return predraw(msg["problem"], config, waiting=lambda: conn_in.poll(0))
    except Exception:  # noqa: BLE001 -- the set-up runs the module afresh and says why
        print("making the problem's inputs ahead failed (the set-up does it):\n"
              + traceback.format_exc(), flush=True)
        return None


def main(argv: list[str]) -> int:
    exit_when_orphaned(int(argv[1]))   # a driver killed mid-candidate takes this worker along
    try:
        preload()
    except Exception:  # noqa: BLE001 -- the set-up imports them again and reports the error
        print("preloading the set-up's modules failed:\n" + traceback.format_exc(), flush=True)
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    session: Session | None = None
    drawn: Predrawn | None = None
    while True:
        try:
            msg = protocol.recv(conn_in)
        except (EOFError, OSError, protocol.ProtocolError):
            return 0
        kind = msg.get("kind")
        if kind == "setup":
            try:
                session, drawn = set_up(msg, drawn), None
                protocol.send(conn_out, {"kind": "ready", "info": session.info})
            except Exception:
                protocol.send(conn_out, {"kind": "setup_error",
                                         "error": tail(traceback.format_exc())})
                return 2
        elif kind == "eval":
            if session is None:
                protocol.send(conn_out, {"kind": "setup_error", "error": "eval before setup"})
                return 2
            cand = Candidate.from_dict(msg["candidate"])
            result, fatal = session.evaluate(cand)
            sys.stdout.flush()
            protocol.send(conn_out, {"kind": "result", "result": result.to_dict(), "fatal": fatal})
            if fatal:
                os._exit(3)  # the CUDA context is gone; never run another candidate here
        elif kind == "predraw" and session is None and drawn is None:
            drawn = draw_ahead(msg, conn_in)
        elif kind == "warm" and session is None:
            warm_up()
        elif kind == "stop":
            # no interpreter teardown: with torch._dynamo loaded it took 1.1-1.2 s (against
            # 0.05-0.07 s for this; CPU, 2026-12-03), each problem's "close" step on the H200
            # (1.1-1.3 s, results/h200-2026-12-03-s19/chain/bench_suite.md); nothing is left
            # to write but the log, and the driver frees the CUDA context at exit either way
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
