"""A GPU worker stand-in for the sandbox tests, started through the same contained launch path
(evokernel.engine.handle.WorkerHandle with a GpuWorkerJail): at set-up it writes a device
measurement into its cache's ``peaks`` folder, as evokernel.timing.floor.measure_peaks does;
for each candidate it runs the module through evokernel.build.cache.load_candidate, as
evokernel.engine.worker does, and a module that raises is a LOAD_ERROR naming the exception."""
import json
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from evokernel.engine import protocol
from evokernel.records import Candidate, EvalResult, Reason, Verdict

MEASURED = {"device_name": "sandbox-test-device", "measured_by": "set-up"}


def _cache_dir(msg):
    return Path(msg["config"]["evaluation"]["cache_dir"])


def main(argv):
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    cache = None
    while True:
        try:
            msg = protocol.recv(conn_in)
        except EOFError:
            return 0
        if msg["kind"] == "setup":
            cache = _cache_dir(msg)
            (cache / "peaks").mkdir(parents=True, exist_ok=True)
            (cache / "peaks" / "sandbox-test-device.json").write_text(json.dumps(MEASURED))
            protocol.send(conn_out, {"kind": "ready", "info": {
                "pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(),
                "cache_dir": str(cache)}})
        elif msg["kind"] == "eval":
            cand = Candidate.from_dict(msg["candidate"])
            from evokernel.build.cache import load_candidate
            try:
                load_candidate(cand.source, f"evokernel_cand_{cand.id}", cache, "9.0")
                r = EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                               detail="loaded", reference_ms=1.0, candidate_ms=1.0)
            except Exception as e:
                r = EvalResult.failure(cand.id, Reason.LOAD_ERROR, f"{type(e).__name__}: {e}")
            protocol.send(conn_out, {"kind": "result", "result": r.to_dict(), "fatal": False})
        elif msg["kind"] == "stop":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
