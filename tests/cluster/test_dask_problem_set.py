"""A problem set on a Dask cluster (evokernel.cluster.problem_set), on CPU: two fake GPU
workers each taking whole problems, every verdict the fake engine worker's, a problem that
cannot be set up costing only its row, and every candidate built up front (a source in two
problems once)."""
from __future__ import annotations

import pytest

pytest.importorskip("distributed", reason="the Dask evaluator's tests need the 'dask' extra "
                    "(pip install 'evokernel[dask]'; the test extra installs it)")

from evokernel.cluster.connect import local_cluster  # noqa: E402
from evokernel.cluster.problem_set import evaluate_problem_set_on_dask  # noqa: E402
from evokernel.config import EvalConfig  # noqa: E402
from evokernel.engine.problem_jobs import ProblemJob  # noqa: E402
from evokernel.problem import Problem  # noqa: E402
from evokernel.records import Candidate, Reason  # noqa: E402
from tests.support.dask_procs import ROOT  # noqa: E402
from tests.support.fake_gpu_worker import verdict  # noqa: E402

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
            "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"


def job(tmp_path, name, *sources):
    path = tmp_path / f"{name}.py"
    path.write_text(REFERENCE)
    return ProblemJob(Problem(name=name, path=path, source=REFERENCE),
                      tuple(Candidate(source=s, idea=name) for s in sources))


def test_problems_spread_over_gpu_workers_whole(tmp_path):
    shared = "# shared\nclass ModelNew:\n    pass\n"          # in two problems: built once
    jobs = [job(tmp_path, "a", shared, "# a2\nclass ModelNew:\n    pass\n"),
            job(tmp_path, "broken", "# b\nclass ModelNew:\n    pass\n"),
            job(tmp_path, "c", shared, "# wrong\nclass ModelNew:\n    pass\n", "x = 1\n")]
    config = EvalConfig(sandbox=False, cache_dir=str(tmp_path / "cache"), eval_timeout_s=10)
    seen = []
    cluster = local_cluster([0, 1], 2, env={"PYTHONPATH": ROOT})
    try:
        outcomes = evaluate_problem_set_on_dask(
            jobs, config, cluster.scheduler_address, entry="tests.support.fake_gpu_worker",
            worker_env={"PYTHONPATH": ROOT}, on_result=lambda n, r: seen.append(n))
    finally:
        cluster.close()
    assert [o.problem for o in outcomes] == ["a", "broken", "c"]
    assert outcomes[1].error and "NameError" in outcomes[1].error and not outcomes[1].results
    for j, o in zip(jobs, outcomes):
        if o.error is None:
            assert o.info["problem"] == j.problem.name and o.device.startswith("tcp://")
            want = [verdict(c).reason if "ModelNew" in c.source else Reason.NO_CODE
                    for c in j.candidates]
            assert [r.reason for r in o.results] == want
    assert sorted(seen) == ["a", "a", "c", "c", "c"]
    built = [r for o in outcomes for r in o.results if r.build_s is not None]
    assert len(built) == 4
    compiled = [p for p in (tmp_path / "cache" / "candidates").iterdir() if p.is_dir()]
    assert len(compiled) == 4          # up front, the broken problem's too: shared, a2, b, wrong
