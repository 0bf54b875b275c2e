"""The Dask evaluator on CPU: a local cluster (or separate scheduler and worker processes)
whose GPU worker's slot runs the fake engine worker tests.support.fake_gpu_worker, and real
(contained-less) builds. What it must show (issue 16): the same verdicts as the local engine on
the same candidates; a Dask worker killed mid-candidate replaced, that candidate failed for a
named reason and nothing else lost; the scheduler gone, a clear error naming its address, and
the run resumed without evaluating anything twice."""
from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="the Dask evaluator's tests need the 'dask' extra "
                    "(pip install 'evokernel[dask]'; the test extra installs it)")

from evokernel.cluster import connect as clusters  # noqa: E402
from evokernel.cluster.evaluator import DaskEvaluator  # noqa: E402
from evokernel.config import EvalConfig, RunConfig, SearchConfig  # noqa: E402
from evokernel.errors import ClusterError  # noqa: E402
from evokernel.operators import TuneMutation  # noqa: E402
from evokernel.problem import Problem  # noqa: E402
from evokernel.records import Candidate, Reason  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402
from evokernel.search.evolution import Evolution  # noqa: E402
from tests.support.dask_procs import ROOT, process_cluster  # noqa: E402
from tests.support.fakes import KERNEL  # noqa: E402

FAKE = "tests.support.fake_gpu_worker"
REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
            "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"


def problem(tmp_path: Path) -> Problem:
    path = tmp_path / "ident.py"
    path.write_text(REFERENCE)
    return Problem(name="ident", path=path, source=REFERENCE, seed_source=KERNEL)


def config(tmp_path: Path) -> EvalConfig:
    return EvalConfig(sandbox=False, cache_dir=str(tmp_path / "cache"), eval_timeout_s=3,
                      build_workers=2)


def cand(idea: str, n: int = 0) -> Candidate:
    return Candidate(source=f"# {idea} {n}\nclass ModelNew:\n    pass\n", idea=idea)


def dask_evaluator(tmp_path: Path, **kw) -> DaskEvaluator:
    return DaskEvaluator(problem(tmp_path), config(tmp_path), devices=[0], build_workers=2,
                         entry=FAKE, worker_env={"PYTHONPATH": ROOT}, **kw)


def local_evaluator(tmp_path: Path, monkeypatch):
    """The local engine (CudaEvaluator) with the same fake engine worker, on a machine without
    a GPU: torch is told there is one, of arch 9.0 and no NVML uuid."""
    import torch

    from evokernel.build import builder
    from evokernel.engine.evaluator import CudaEvaluator
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda d: types.SimpleNamespace(uuid=""))
    monkeypatch.setattr(builder, "device_arch", lambda: "9.0")
    monkeypatch.setenv("PYTHONPATH", ROOT)
    return CudaEvaluator(problem(tmp_path), config(tmp_path), devices=[0], entry=FAKE)


def same_verdict(r):
    return (r.candidate_id, r.verdict, r.reason, r.detail, r.candidate_ms, r.reference_ms)


def test_same_results_as_the_local_engine(tmp_path, monkeypatch):
    cands = [cand("ok", 1), cand("wrong"), cand("segfault"), cand("ok", 2), cand("fault"),
             cand("hang"), cand("ok", 3),
             Candidate(source="x = 1\n", idea="no ModelNew"),
             Candidate(source="import torch\nclass ModelNew(:\n", idea="syntax"), cand("ok", 1)]
    cands[1] = Candidate(source="# wrong\nclass ModelNew:\n    pass\n", idea="wrong")
    local = local_evaluator(tmp_path, monkeypatch)
    try:
        expected = local.evaluate(cands)
    finally:
        local.close()
    monkeypatch.undo()
    seen = []
    ev = dask_evaluator(tmp_path)
    try:
        assert ev.info["engine"] == "dask" and ev.info["gpus"] == 1
        assert ev.info["dask_scheduler"].startswith("tcp://127.0.0.1:")
        got = ev.evaluate(cands, on_result=seen.append)
    finally:
        ev.close()
    assert [same_verdict(r) for r in got] == [same_verdict(r) for r in expected]
    reasons = [r.reason for r in got]
    assert reasons == [Reason.OK, Reason.WRONG_FUNCTION, Reason.WORKER_CRASH, Reason.OK,
                       Reason.CUDA_FAULT, Reason.TIMEOUT, Reason.OK, Reason.NO_CODE,
                       Reason.BUILD_ERROR, Reason.OK]
    assert sorted(r.candidate_id for r in seen) == sorted({c.id for c in cands})  # once each
    assert all(r.build_s is not None for r in got            # built, then sent to the GPU
               if r.reason not in (Reason.NO_CODE, Reason.BUILD_ERROR))


def worker_keys(client) -> dict:
    """Each Dask worker's view of the driver's credential (None: dropped)."""
    import os
    return client.run(lambda: os.environ.get("OPENAI_API_KEY"))


def test_a_dask_worker_killed_mid_candidate_is_replaced_and_nothing_else_lost(tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-driver-only")   # inherited by the workers...
    cands = [cand("ok", 1), cand("kill-host"), cand("ok", 2), cand("ok", 3)]
    seen = []
    ev = dask_evaluator(tmp_path)
    try:
        before = clusters.gpu_workers(ev.client)
        keys_before = worker_keys(ev.client)
        got = ev.evaluate(cands, on_result=seen.append)
        after = clusters.gpu_workers(ev.client)
        keys_after = worker_keys(ev.client)
        again = ev.evaluate([cand("ok", 4)])
    finally:
        ev.close()
    # ...and dropped by the worker plugin, on the replacement worker too
    assert len(keys_before) == 2 and set(keys_before.values()) == {None}
    assert after[0] in keys_after and set(keys_after.values()) == {None}
    assert [r.reason for r in got] == [Reason.OK, Reason.WORKER_CRASH, Reason.OK, Reason.OK]
    assert "Dask GPU worker" in got[1].detail and before[0] in got[1].detail
    assert len(after) == 1 and after != before          # its Nanny started a new one
    assert sorted(r.candidate_id for r in seen) == sorted(c.id for c in cands)
    assert again[0].accepted


class KillsScheduler:
    """Wraps an evaluator: in its ``call``-th evaluate, after the first verdict is stored, the
    scheduler is killed. Records every candidate id it was asked to evaluate."""

    def __init__(self, inner, kill=None, call: int = 2):
        self.inner, self.kill, self.call, self.calls = inner, kill, call, 0
        self.asked: list[str] = []
        self.info = inner.info

    def evaluate(self, candidates, on_result=None):
        self.calls += 1
        self.asked += [c.id for c in candidates]
        if self.kill is None or self.calls != self.call:
            return self.inner.evaluate(candidates, on_result=on_result)
        kill = self.kill

        def stored_then_kill(r):
            on_result(r)
            if self.kill is not None:
                self.kill, _ = None, kill()
        return self.inner.evaluate(candidates, on_result=stored_then_kill)

    def close(self):
        self.inner.close()


def test_scheduler_gone_names_it_and_the_run_resumes(tmp_path):
    prob = problem(tmp_path)
    run = RunConfig(run_dir=str(tmp_path / "run"), evaluation=config(tmp_path),
                    search=SearchConfig(population_size=2, offspring_per_generation=3,
                                        generations=1, seed=7))
    env = {"FAKE_GPU_DELAY_S": "1"}
    with process_cluster(tmp_path / "first", **env) as first:
        ev = KillsScheduler(DaskEvaluator(prob, run.evaluation, scheduler=first.address,
                                          entry=FAKE, worker_env=env),
                            kill=first.kill_scheduler)
        with pytest.raises(ClusterError, match=first.address.replace(".", r"\.")):
            try:
                Evolution(prob, run, mutations=[TuneMutation()], evaluator=ev).run()
            finally:
                ev.close()
    stored = set(RunStore(run.run_dir, read_only=True).results())
    assert 2 <= len(stored) < len(set(ev.asked))        # the seed, one of generation 1
    with process_cluster(tmp_path / "second", **env) as second:
        again = KillsScheduler(DaskEvaluator(prob, run.evaluation, scheduler=second.address,
                                             entry=FAKE, worker_env=env))
        try:
            result = Evolution(prob, run, mutations=[TuneMutation()],
                               evaluator=again).run(resume=True)
        finally:
            again.close()
    assert not stored & set(again.asked)                 # nothing evaluated twice
    store = RunStore(result.run_dir, read_only=True)
    assert set(store.candidates()) == set(store.results()) == stored | set(again.asked)
    assert [g["generation"] for g in store.generations()] == [0, 1]


def test_an_unreachable_scheduler_is_named():
    with pytest.raises(ClusterError, match=r"Dask scheduler tcp://127\.0\.0\.1:9: .*`dask scheduler`"):
        clusters.connect("tcp://127.0.0.1:9", timeout_s=2)


def test_without_the_extra_the_error_names_it(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_distributed(name, *args, **kw):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError("No module named 'distributed'")
        return real(name, *args, **kw)
    monkeypatch.setattr(builtins, "__import__", no_distributed)
    from evokernel.engine.factory import make_evaluator
    from evokernel.errors import ConfigError
    p = Problem(name="x", path=Path("x.py"), source=REFERENCE)
    with pytest.raises(ConfigError, match=r"evokernel\[dask\]"):
        make_evaluator(p, EvalConfig(), dask="tcp://127.0.0.1:9")


def test_placement_flags():
    from evokernel.cli import options
    from evokernel.errors import ConfigError
    ns = types.SimpleNamespace
    assert options.placement(ns(gpus=2, dask=True, dask_scheduler=None)) == {
        "devices": [0, 1], "dask": True}
    assert options.placement(ns(gpus=None, dask=False, dask_scheduler="tcp://h:8786")) == {
        "dask": "tcp://h:8786"}
    assert options.placement(ns(gpus=None, dask=False, dask_scheduler=None)) == {}
    with pytest.raises(ConfigError, match="--gpus"):
        options.placement(ns(gpus=1, dask=False, dask_scheduler="tcp://h:8786"))
    assert dataclasses.is_dataclass(EvalConfig())     # placement is not in the saved config
    assert not {"dask", "gpus", "dask_scheduler"} & {f.name for f in
                                                      dataclasses.fields(EvalConfig)}


def test_evolution_hands_dask_to_the_factory_and_needs_no_local_gpu(tmp_path, monkeypatch):
    """Evolution(dask=ADDRESS) asks the factory for that cluster's evaluator (through the
    toolbox's map, as any evaluator) and does not require a GPU on the driver's host."""
    import torch

    from evokernel.engine import factory
    from tests.support.fakes import FakeEvaluator
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    asked = []

    def make(problem, config, **kw):
        asked.append(kw)
        return FakeEvaluator()
    monkeypatch.setattr(factory, "make_evaluator", make)
    run = RunConfig(run_dir=str(tmp_path / "run"), search=SearchConfig(
        population_size=2, offspring_per_generation=2, generations=1, seed=7))
    result = Evolution(problem(tmp_path), run, mutations=[TuneMutation()],
                       dask="tcp://head:8786").run()
    assert asked == [{"compile_ms": None, "dask": "tcp://head:8786"}]
    assert result.best is not None
