"""The key holder of the sandbox tests: ``python -m tests.support.key_holder SPEC_JSON``.

Started with the canary key in its environment (as ``evokernel run`` holds OPENAI_API_KEY), it
builds the hostile candidate of tests.support.hostile with a Builder ("build"), evaluates it
through a WorkerHandle running tests.support.sandbox_worker ("eval"), or (on a GPU) through the
real CudaEvaluator ("gpu"), contained (evokernel.sandbox.support.probe) or not, and prints one ``key-holder {json}`` line: the verdict, its text (log and detail) and
the containment found. SPEC_JSON: stage ("build", "eval" or "gpu"), contained, canary, port, run_dir,
home, cache_dir, root (the repository, for PYTHONPATH).
"""
import json
import os
import sys
import time
from pathlib import Path

from evokernel.records import Candidate
from tests.support.hostile import hostile_source


def _say(what, t0=time.monotonic()):
    """A progress line on stderr (hold_key shows it when the key holder runs out of time)."""
    print(f"key-holder progress: {what} at {time.monotonic() - t0:.1f} s", file=sys.stderr,
          flush=True)


def _build(cand, cache, containment):
    from evokernel.build.builder import Builder
    with Builder(cache, arch="9.0", timeout_s=300, sandbox=containment) as b:
        r = b.build(cand)
    return {"ok": r.ok, "reason": r.reason.value if r.reason else None, "text": r.log}


def _evaluate(cand, cache, containment, root):
    from evokernel.engine.handle import WorkerHandle
    from evokernel.sandbox import worker_env
    from evokernel.sandbox.workers import GpuWorkerJail
    env = dict(worker_env(), PYTHONPATH=root)
    setup = {"kind": "setup", "problem": {"name": "hostile", "path": "hostile.py"},
             "config": {"evaluation": {"cache_dir": str(cache)}}}
    jail = GpuWorkerJail(containment, cache) if containment is not None else None
    handle = WorkerHandle(setup, env=env, log_path=cache / "logs" / "worker.log",
                          entry="tests.support.sandbox_worker", setup_timeout_s=120,
                          sandbox=jail)
    try:
        info = handle.start()
        r = handle.evaluate(cand, timeout_s=120)
    finally:
        handle.close()
    return {"ok": r.accepted, "reason": r.reason.value, "text": f"{r.detail}\n{r.log}",
            "info": info, "scratch_left": jail is not None and jail.scratch is not None}


def _gpu(cand, cache, contained, root):
    """The real CudaEvaluator (a GPU needed) on the fault fixtures' add problem: add_ok, then
    the hostile candidate, which builds, then attacks from inside the GPU worker."""
    from evokernel.config import EvalConfig
    from evokernel.engine.evaluator import CudaEvaluator
    from evokernel.problem import load_problem
    faults = Path(root) / "tests" / "kernels" / "faults"
    ok = Candidate(source=(faults / "add_ok.py").read_text(), idea="add_ok")
    # gpu_sharing="mark": pytest, this key holder's parent, holds a CUDA context once an earlier
    # GPU test ran in it, and the shared-GPU guard counts any process on the GPU that is not a
    # descendant as another user: "wait" then slept 120 s up to four times and the test ran past
    # its 240 s (the H200, 2026-12-04, after tests/build's first GPU test; alone it passed in 58 s).
    config = EvalConfig(cache_dir=str(cache), eval_timeout_s=120, measure_compile=False,
                        sandbox=contained, require_sandbox=contained, gpu_sharing="mark")
    _say("starting the evaluator")
    evaluator = CudaEvaluator(load_problem(faults / "problem_add.py"), config)
    try:
        _say("evaluator ready; evaluating add_ok and the hostile candidate")
        good, bad = evaluator.evaluate([ok, cand])
        _say(f"evaluated: {good.reason.value}, {bad.reason.value}")
    finally:
        evaluator.close()
        _say("evaluator closed")
    return {"ok": bad.accepted, "reason": bad.reason.value, "text": f"{bad.detail}\n{bad.log}",
            "good": {"reason": good.reason.value, "candidate_ms": good.candidate_ms}}


def main(spec):
    from evokernel.sandbox.support import probe
    cache = Path(spec["cache_dir"])
    source = hostile_source(holder_pid=os.getpid(), canary=spec["canary"], port=spec["port"],
                            run_dir=spec["run_dir"], home=spec["home"], cache_dir=str(cache),
                            only_on_gpu=spec["stage"] == "gpu")
    cand = Candidate(source=source, idea="hostile")
    containment = probe("nobody", str(cache)) if spec["contained"] else None
    if spec["stage"] == "build":
        out = _build(cand, cache, containment)
    elif spec["stage"] == "eval":
        out = _evaluate(cand, cache, containment, spec["root"])
    else:
        out = _gpu(cand, cache, spec["contained"], spec["root"])
    out["containment"] = None if containment is None else {
        "mode": containment.mode, "uid": containment.uid, "missing": containment.missing}
    print("key-holder " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
