"""A stand-in for evokernel.engine.worker that misbehaves on request (by the candidate's idea):
"segfault" kills itself with SIGSEGV, "hang" sleeps forever, "fault" answers with a fatal
CUDA fault and exits, "forge" answers for another candidate, "pickle" sends a pickle instead of
JSON; anything else is accepted. Each answer carries the worker's pid. The problem "broken"
fails its set-up; "slow" takes 3 s over it."""
import os
import signal
import sys
import time
from multiprocessing.connection import Connection

from evokernel.engine import protocol

from evokernel.records import Candidate, EvalResult, Reason, Verdict


def main(argv):
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    warmed = False                                    # a "warm" came before the set-up
    predraw = None                                    # the problem a "predraw" named
    while True:
        try:
            msg = protocol.recv(conn_in)
        except EOFError:
            return 0
        if msg["kind"] == "setup":
            if msg["problem"]["name"] == "broken":
                protocol.send(conn_out, {"kind": "setup_error", "error": "NameError: name 'nn' is not defined"})
                return 2
            if msg["problem"]["name"] == "slow":     # a real set-up: torch, truths, baselines
                time.sleep(3)
            protocol.send(conn_out, {"kind": "ready", "info": {"pid": os.getpid(), "warmed": warmed,
                                                               "sent_at": msg.get("sent_at"),
                                                               "predraw": predraw}})
        elif msg["kind"] == "predraw":
            predraw = msg["problem"]["name"]
        elif msg["kind"] == "warm":
            warmed = True
        elif msg["kind"] == "eval":
            cand = Candidate.from_dict(msg["candidate"])
            print(f"evaluating {cand.idea}", flush=True)
            if cand.idea == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if cand.idea == "hang":
                time.sleep(3600)
            if cand.idea == "forge":      # answer for another candidate, as a cheat might
                r = EvalResult(candidate_id="someone-else", verdict=Verdict.ACCEPT,
                               reason=Reason.OK, reference_ms=1000.0, candidate_ms=1.0)
                protocol.send(conn_out, {"kind": "result", "result": r.to_dict(), "fatal": False})
                continue
            if cand.idea == "pickle":     # a pickle that would run code if it were unpickled
                import pickle
                conn_out.send_bytes(pickle.dumps(os.system))
                continue
            if cand.idea == "fault":
                r = EvalResult.failure(cand.id, Reason.CUDA_FAULT, "illegal memory access")
                protocol.send(conn_out, {"kind": "result", "result": r.to_dict(), "fatal": True})
                os._exit(3)
            r = EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                           detail=str(os.getpid()), reference_ms=1.0, candidate_ms=0.5)
            protocol.send(conn_out, {"kind": "result", "result": r.to_dict(), "fatal": False})
        elif msg["kind"] == "stop":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
