"""The GPU worker's isolation holds when it is contained: a hang, a segfault and a fatal fault
each cost one candidate and a respawn, a forged answer is refused, each spawn gets a fresh
scratch folder that is gone once the worker is, and set-up measurements are harvested only
before the first candidate."""
import json
import os
from pathlib import Path

from evokernel.engine.handle import WorkerHandle
from evokernel.records import Candidate, Reason
from evokernel.sandbox.workers import GpuWorkerJail
from tests.support.jails import contained, needs_util_linux
from tests.support.sandbox_worker import MEASURED

ROOT = str(Path(__file__).resolve().parents[2])


def _handle(tmp_path, entry="tests.support.fake_worker", recycle_after=50):
    cache = tmp_path / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OPENAI_API_KEY", None)
    setup = {"kind": "setup", "problem": {"name": "p", "path": "p.py"},
             "config": {"evaluation": {"cache_dir": str(cache)}}}
    jail = GpuWorkerJail(contained(cache), cache)
    return WorkerHandle(setup, env=env, log_path=tmp_path / "worker.log", entry=entry,
                        setup_timeout_s=60, recycle_after=recycle_after, sandbox=jail), jail


def cand(idea, n=0):
    return Candidate(source=f"# {idea} {n}\nclass ModelNew: pass\n", idea=idea)


@needs_util_linux
def test_contained_faults_cost_one_candidate_and_respawn(tmp_path):
    tmp_path.chmod(0o755)
    w, jail = _handle(tmp_path)
    scratches = []
    try:
        assert w.evaluate(cand("ok", 1), timeout_s=30).accepted
        scratches.append(jail.scratch)
        hang = w.evaluate(cand("hang"), timeout_s=2)
        assert hang.reason is Reason.TIMEOUT
        assert not scratches[-1].exists()            # killed: its scratch folder went with it
        assert w.evaluate(cand("ok", 2), timeout_s=30).accepted
        scratches.append(jail.scratch)
        seg = w.evaluate(cand("segfault"), timeout_s=30)
        assert seg.reason is Reason.WORKER_CRASH and "SIGSEGV" in seg.detail, seg.detail
        assert "evaluating segfault" in seg.log
        assert w.evaluate(cand("ok", 3), timeout_s=30).accepted
        assert w.evaluate(cand("fault"), timeout_s=30).reason is Reason.CUDA_FAULT
        forged = w.evaluate(cand("forge"), timeout_s=30)
        assert forged.reason is Reason.WORKER_CRASH and "someone-else" in forged.detail
        assert w.evaluate(cand("ok", 4), timeout_s=30).accepted
        assert w.spawns == 5 and len(set(scratches)) == 2
    finally:
        w.close()
    assert not w.alive() and jail.scratch is None


@needs_util_linux
def test_contained_recycling(tmp_path):
    tmp_path.chmod(0o755)
    w, _ = _handle(tmp_path, recycle_after=2)
    try:
        pids = [w.evaluate(cand("ok", i), timeout_s=30).detail for i in range(3)]
    finally:
        w.close()
    assert w.spawns == 2 and pids[0] == pids[1] == "2"      # pid 2 of each worker's namespace


@needs_util_linux
def test_set_up_measurements_reach_the_cache(tmp_path):
    tmp_path.chmod(0o755)
    w, jail = _handle(tmp_path, entry="tests.support.sandbox_worker")
    cache = tmp_path / "cache"
    try:
        info = w.start()
        assert info["uid"] == 65534 and info["cache_dir"] == str(jail.scratch / "cache")
        assert json.loads((cache / "peaks" / "sandbox-test-device.json").read_text()) == MEASURED
        (jail.scratch / "cache" / "peaks" / "later.json").write_text('{"late": 1}')
    finally:
        w.close()
    assert not (cache / "peaks" / "later.json").exists()     # after set-up: never harvested
    assert not (cache / "builds").is_symlink() and not list((cache / "builds").iterdir())


def test_harvest_takes_only_plain_json_objects(tmp_path):
    from evokernel.sandbox.support import Containment
    cache = tmp_path / "cache"
    (cache / "peaks").mkdir(parents=True)
    (cache / "peaks" / "same.json").write_text('{"a": 1}')
    jail = GpuWorkerJail(Containment("namespaces", None, None, "me"), cache)
    _, env, msg, cwd = jail.start(["w"], {"TMPDIR": "/x", "PATH": "/usr/bin"},
                                  {"config": {"evaluation": {"cache_dir": None}}})
    peaks = jail.scratch / "cache" / "peaks"
    assert msg["config"]["evaluation"]["cache_dir"] == str(jail.scratch / "cache")
    assert "TMPDIR" not in env and env["HOME"] == str(jail.scratch / "home") and cwd
    assert (peaks / "same.json").read_text() == '{"a": 1}'      # a copy of the cache's
    (peaks / "new.json").write_text('{"b": 2}')
    (peaks / "list.json").write_text("[1, 2]")
    (peaks / "bad.json").write_text("{")
    (peaks / "notes.txt").write_text("{}")
    (peaks / "big.json").write_text('{"x": "' + "y" * (2 << 20) + '"}')
    (peaks / "link.json").symlink_to(cache / "peaks" / "same.json")
    assert jail.harvest() == [cache / "peaks" / "new.json"]
    assert sorted(p.name for p in (cache / "peaks").iterdir()) == ["new.json", "same.json"]
    scratch = jail.scratch
    jail.cleanup()
    assert not scratch.exists() and jail.scratch is None
