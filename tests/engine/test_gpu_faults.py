"""On a GPU: a batch mixing a hang, an out-of-bounds write, a host segfault, a GPU out-of-memory
and a compile error with good kernels. Every good kernel gets its verdict and time, every bad one
its reason, and the engine ends cleanly; the workers are contained, as a run's are by default,
and required to be (--require-sandbox), so a machine where the jail degrades fails the test
instead of passing it uncontained."""
from pathlib import Path

import pytest

from evokernel.config import EvalConfig
from evokernel.problem import load_problem
from evokernel.records import Candidate, Reason

FAULTS = Path(__file__).resolve().parents[1] / "kernels" / "faults"
EXPECTED = {
    "add_ok": Reason.OK, "add_hang": Reason.TIMEOUT, "add_oob": Reason.CUDA_FAULT,
    "add_segfault": Reason.WORKER_CRASH, "add_oom": Reason.OUT_OF_MEMORY,
    "add_compile_error": Reason.BUILD_ERROR, "add_ok2": Reason.OK,
}


@pytest.mark.gpu
def test_fault_batch_blames_only_the_faulty():
    from evokernel.engine.evaluator import CudaEvaluator
    problem = load_problem(FAULTS / "problem_add.py")
    cands = [Candidate(source=(FAULTS / f"{name}.py").read_text(), idea=name)
             for name in EXPECTED]
    # contained, and required to be: a pass shows the fault batch inside the jail (issue 20)
    evaluator = CudaEvaluator(problem, EvalConfig(eval_timeout_s=30, measure_compile=False,
                                                  sandbox=True, require_sandbox=True))
    try:
        results = evaluator.evaluate(cands)
    finally:
        evaluator.close()
    got = {c.idea: r for c, r in zip(cands, results)}
    seen = {name: got[name].reason for name in EXPECTED}
    assert seen == EXPECTED, {n: (got[n].reason.value, got[n].detail[:300]) for n in EXPECTED}
    for name in ("add_ok", "add_ok2"):
        r = got[name]
        assert r.accepted and 0 < r.candidate_ms and 0 < r.reference_ms
    assert "error" in got["add_compile_error"].log.lower()
    assert all(not w.alive() for w in evaluator.workers)
