"""The bench's GPU-side dependencies, wired without a GPU: each hands its call to the engine
function it names. A name that shadows the function it wraps (cuda_deps' make_evaluator called
itself with a keyword it does not take, 2026-12-02) failed every evaluator of an H200 bench."""
from pathlib import Path

import torch

from evokernel.bench.plan import BenchPlan
from evokernel.bench.run import cuda_deps
from evokernel.config import EvalConfig
from evokernel.engine import factory


def test_cuda_deps_make_evaluator_calls_the_factory_with_a_log_folder(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(factory, "make_evaluator",
                        lambda problem, config, **kw: seen.append((problem, config, kw)) or "ev")
    deps = cuda_deps(BenchPlan(results_dir=tmp_path / "r", work_dir=tmp_path / "w"))
    config = EvalConfig(cache_dir=str(tmp_path / "cache"))
    assert deps.make_evaluator("problem", config) == "ev"
    assert seen == [("problem", config, {"log_dir": Path(config.cache_path) / "logs"})]
