"""The GPU worker loads the set-up's modules before its set-up arrives (issue 16: the first flop
count's import of torch._dynamo was 4.0-4.5 s of every problem's set-up on the H200), without
opening a CUDA context (a worker started ahead must not disturb the GPU's timings); asked to stop,
it exits at once, without the interpreter's teardown (1.1 s of every problem's close)."""
import subprocess
import sys
from pathlib import Path

from tests.support.worker_script import start_script

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, time
from evokernel.engine.worker import preload
preload()
import torch
from evokernel.timing.floor import count_flops
t = time.perf_counter()
count_flops(torch.nn.LayerNorm(64), [torch.randn(4, 64)])
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
print("cuda" if torch.cuda.is_initialized() else "no cuda")
print(f"{time.perf_counter() - t:.3f}")
"""


def test_preload_brings_the_flop_counters_imports_and_no_cuda_context():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    dynamo, cuda, first_count_s = out.stdout.splitlines()[-3:]
    assert dynamo == "dynamo" and cuda == "no cuda"
    # Without preload this first count imports torch._dynamo (5.8 s on the CPU machine); with
    # it, a few ms. The bound is loose for a loaded 2-core CI machine.
    assert float(first_count_s) < 1.0


STOPPER = """
import atexit, sys
from evokernel.engine import worker
atexit.register(lambda: print("interpreter teardown", flush=True))
print("candidate output", end="")      # unflushed: the exit must not lose it
sys.exit(worker.main(["worker"] + sys.argv[1:]))
"""


def test_a_worker_asked_to_stop_exits_at_once_without_the_interpreters_teardown():
    """"stop" ends the worker with os._exit: Python's teardown with torch._dynamo loaded took
    1.1-1.2 s on the CPU machine, each problem's "close" step in a problem set on the H200
    (results/h200-2026-12-03-s19/chain/bench_suite.md). Its output is flushed first."""
    from evokernel.engine import protocol
    proc, send, recv = start_script(STOPPER, stdout=subprocess.PIPE, text=True)
    try:
        protocol.send(send, {"kind": "stop"})
        out, _ = proc.communicate(timeout=300)
    finally:
        send.close()
        recv.close()
    assert proc.returncode == 0
    assert out == "candidate output"               # flushed, and no atexit handler ran


LOADER = """
import sys, time
from evokernel.engine import worker

class FakeSession:                      # no GPU here: only the worker's own bookkeeping is tested
    def __init__(self, problem, config, arch, predrawn=None):
        self.info = {"setup_steps_s": {"problem_module": 0.1}}

worker.preload = lambda: time.sleep(1.5)            # a worker still loading when its turn comes
worker.Session = FakeSession
sys.exit(worker.main(["worker"] + sys.argv[1:]))
"""


def test_a_set_up_says_how_long_it_waited_for_its_worker_to_load():
    """The set-up's first step, "load_wait": from the driver sending it to the worker reading it,
    i.e. the worker's load still to go at its turn (issue 16: session 20's "start" was ~1 s
    longer than the worker's own set-up steps, unexplained)."""
    import time

    from evokernel.config import RunConfig
    from evokernel.engine import protocol
    proc, send, recv = start_script(LOADER)
    try:
        protocol.send(send, {"kind": "setup", "config": RunConfig().to_dict(), "arch": "9.0",
                             "problem": {"name": "p"}, "sent_at": time.time()})
        reply = protocol.recv(recv)
        protocol.send(send, {"kind": "stop"})
        assert proc.wait(timeout=300) == 0
    finally:
        send.close()
        recv.close()
    assert reply["kind"] == "ready", reply
    steps = reply["info"]["setup_steps_s"]
    assert list(steps) == ["load_wait", "problem_module"]
    assert 1.3 < steps["load_wait"] < 60
