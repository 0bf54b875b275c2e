"""On the H200: the GPU worker, contained as a run's are (EvalConfig's defaults plus
require_sandbox), still runs CUDA and gates and times a good kernel, and a candidate that
attacks from inside it (after checking that CUDA works there) gets nothing out. The fault batch
and the gate fixtures (tests/engine/test_gpu_faults.py, tests/gate/test_gpu_gate_fixtures.py)
run contained too, as EvalConfig(sandbox=True) is the default."""
import pytest

from tests.support.arena import arena, connections, hold_key, snapshot
from tests.support.hostile import ATTACKS, outcomes


@pytest.mark.gpu
def test_the_contained_gpu_worker_runs_cuda_and_keeps_the_key():
    with arena() as scene:
        before = snapshot(scene["run_dir"], scene["home"])
        out = hold_key(scene, "gpu", contained=True)
        assert out["good"]["reason"] == "ok" and out["good"]["candidate_ms"] > 0, out
        seen = outcomes(out["text"])
        assert seen.get("cuda") == "ok" and set(seen) == {"cuda", *ATTACKS}, out["text"][-2000:]
        assert "LEAKED" not in seen.values(), seen
        assert out["reason"] == "load_error" and scene["canary"] not in out["text"]
        assert connections(scene["listener"]) == 0
        assert snapshot(scene["run_dir"], scene["home"]) == before


@pytest.mark.gpu
def test_uncontained_the_gpu_worker_leaks():
    """The control, so the test above can fail."""
    with arena() as scene:
        out = hold_key(scene, "gpu", contained=False)
        seen = outcomes(out["text"])
        assert seen.get("cuda") == "ok"
        assert all(seen[k] == "LEAKED" for k in ("connect", "write_run", "write_home")), seen
