"""On a GPU (scripts/gpu_check.sh gpu-tests): what the no-GPU work of issue 15 changed on the
GPU path. A resumed run's torch.compile baseline reaches the workers and every result; `check`
still gates the good files of a mix and rejects the faulty ones unsent; `check --build-only`
builds for this GPU's arch by default."""
import json
from pathlib import Path

import pytest

from evokernel.cli.main import main
from evokernel.config import EvalConfig, RunConfig
from evokernel.problem import load_problem
from evokernel.records import Candidate
from evokernel.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "kernels" / "problems" / "softmax_small.py"
KERNEL = ROOT / "tests" / "kernels" / "legit" / "softmax_block_tree.py"


@pytest.mark.gpu
def test_a_given_compile_baseline_is_used_by_every_worker_and_result(tmp_path):
    from evokernel.engine.evaluator import CudaEvaluator
    problem = load_problem(PROBLEM, seed=KERNEL)
    evaluator = CudaEvaluator(problem, EvalConfig(cache_dir=str(tmp_path / "cache")),
                              compile_ms=0.123)
    try:
        (res,) = evaluator.evaluate([Candidate(source=problem.seed_source)])
    finally:
        evaluator.close()
    assert evaluator.info["compile_ms"] == 0.123
    assert res.accepted, res.detail
    assert res.compile_ms == 0.123
    store = RunStore.create(tmp_path / "run", RunConfig(), problem)
    store.set_meta("device", evaluator.info)
    assert store.compile_baseline_ms() == 0.123                # same GPU and torch: reused


@pytest.mark.gpu
def test_check_gates_the_good_files_and_rejects_the_faulty_unsent(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass ModelNew(torch.nn.Module:\n")
    out_json = tmp_path / "check.json"
    assert main(["check", str(PROBLEM), str(KERNEL), str(bad), "--json", str(out_json)]) == 1
    out = capsys.readouterr().out
    assert f"{bad}:2: error: syntax error" in out
    assert "verdict:        accept (ok)" in out and "not sent to the GPU" in out
    kernels = json.loads(out_json.read_text())["kernels"]
    assert [k["verdict"] for k in kernels] == ["accept", "reject"]
    assert main(["check", str(PROBLEM), str(KERNEL)]) == 0


@pytest.mark.gpu
def test_build_only_defaults_to_this_gpus_arch(tmp_path, capsys, monkeypatch):
    import torch
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    major, minor = torch.cuda.get_device_capability()
    assert main(["check", str(PROBLEM), str(KERNEL), "--build-only"]) == 0
    out = capsys.readouterr().out
    assert f"for sm_{major}{minor} (this machine's GPU)" in out and "1 of 1 kernel file(s) built" \
        in out
