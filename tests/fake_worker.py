"""A stand-in for evokernel.worker that misbehaves on request (by the candidate's idea):
"segfault" kills itself with SIGSEGV, "hang" sleeps forever, "fault" answers with a fatal
CUDA fault and exits, anything else is accepted. Each answer carries the worker's pid."""
import os
import signal
import sys
import time
from multiprocessing.connection import Connection

from evokernel.records import Candidate, EvalResult, Reason, Verdict


def main(argv):
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    while True:
        try:
            msg = conn_in.recv()
        except EOFError:
            return 0
        if msg["kind"] == "setup":
            if msg["problem"]["name"] == "broken":
                conn_out.send({"kind": "setup_error", "error": "NameError: name 'nn' is not defined"})
                return 2
            conn_out.send({"kind": "ready", "info": {"pid": os.getpid()}})
        elif msg["kind"] == "eval":
            cand = Candidate.from_dict(msg["candidate"])
            print(f"evaluating {cand.idea}", flush=True)
            if cand.idea == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if cand.idea == "hang":
                time.sleep(3600)
            if cand.idea == "fault":
                r = EvalResult.failure(cand.id, Reason.CUDA_FAULT, "illegal memory access")
                conn_out.send({"kind": "result", "result": r.to_dict(), "fatal": True})
                os._exit(3)
            r = EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                           detail=str(os.getpid()), reference_ms=1.0, candidate_ms=0.5)
            conn_out.send({"kind": "result", "result": r.to_dict(), "fatal": False})
        elif msg["kind"] == "stop":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
