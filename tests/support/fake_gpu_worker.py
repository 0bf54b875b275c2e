"""A stand-in for evokernel.engine.worker with deterministic verdicts, for comparing engines
(tests/cluster): the verdict and times depend only on the candidate's source, never on the
process, so the local engine and the Dask evaluator must agree on them. Misbehaves on request
(by the candidate's idea): "segfault" kills itself with SIGSEGV, "hang" sleeps, "fault" answers
with a fatal CUDA fault and exits, "kill-host" kills its parent (the Dask worker that holds
it) mid-candidate, "slow" takes 3 s; every candidate takes FAKE_GPU_DELAY_S seconds more
(environment; default 0). Its numbers are not measurements."""
import hashlib
import os
import signal
import sys
import time
from multiprocessing.connection import Connection

from evokernel.engine import protocol
from evokernel.records import Candidate, EvalResult, Reason, Verdict


def verdict(cand: Candidate) -> EvalResult:
    """The verdict a source gets: rejected as wrong_function when it says "wrong", else
    accepted with a time fixed by its hash."""
    if "wrong" in cand.source:
        return EvalResult.failure(cand.id, Reason.WRONG_FUNCTION, "fake: wrong outputs")
    unit = int(hashlib.sha256(cand.source.encode()).hexdigest()[:8], 16) / 2**32
    return EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      detail="fake gpu worker", reference_ms=1.0, candidate_ms=0.5 + unit,
                      norm_error_ratio=1.0, max_error_ratio=1.0, tolerance_factor=16.0)


def main(argv):
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    while True:
        try:
            msg = protocol.recv(conn_in)
        except EOFError:
            return 0
        if msg["kind"] == "setup":
            if msg["problem"]["name"] == "broken":
                protocol.send(conn_out, {"kind": "setup_error", "error": "NameError: nn"})
                return 2
            protocol.send(conn_out, {"kind": "ready", "info": {
                "device": "fake GPU", "reference_ms": 1.0, "pid": os.getpid(),
                "problem": msg["problem"]["name"], "compile_ms": msg["problem"]["compile_ms"]}})
        elif msg["kind"] == "eval":
            cand = Candidate.from_dict(msg["candidate"])
            print(f"evaluating {cand.idea}", flush=True)
            time.sleep(float(os.environ.get("FAKE_GPU_DELAY_S", "0")))
            if cand.idea == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            if cand.idea == "hang":
                time.sleep(3600)
            if cand.idea == "slow":
                time.sleep(3)
            if cand.idea == "kill-host":
                os.kill(os.getppid(), signal.SIGKILL)
                return 0                  # no orphan left behind by the test
            if cand.idea == "fault":
                r = EvalResult.failure(cand.id, Reason.CUDA_FAULT, "illegal memory access")
                protocol.send(conn_out, {"kind": "result", "result": r.to_dict(), "fatal": True})
                os._exit(3)
            protocol.send(conn_out, {"kind": "result", "result": verdict(cand).to_dict(),
                                     "fatal": False})
        elif msg["kind"] == "stop":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
