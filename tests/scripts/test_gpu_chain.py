"""scripts/gpu_chain.sh sync: copies paths of the caller's tree over the running list's copy
(a batch run's newly imported replies, for a frontier stage added later), and refuses while a
stage that reads the runs is running. The list's state is laid out by hand under GPU_CHAIN_TMP,
as `start` leaves it; `start` itself needs the device's gpu_check.sh and is not run here."""
import os
import subprocess

import pytest

from tests.support.scripts import ROOT

SCRIPT = ROOT / "scripts" / "gpu_chain.sh"


@pytest.fixture
def chain(tmp_path):
    """A caller's tree with a run folder, and a list's copy holding an older one."""
    tree = tmp_path / "tree"
    (tree / "results/abl/run").mkdir(parents=True)
    (tree / "results/abl/run/run.sqlite").write_text("new")
    state = tmp_path / "state"
    (state / "gpu-chain/results/abl/run").mkdir(parents=True)
    (state / "gpu-chain/results/abl/run/run.sqlite").write_text("old")
    (state / "gpu-chain/results/abl/run/stale.txt").write_text("gone after sync")
    return tree, state


def sync(tree, state, *paths):
    env = {**os.environ, "GPU_CHAIN_TMP": str(state)}
    return subprocess.run(["bash", str(SCRIPT), "sync", *paths], cwd=tree, env=env,
                          capture_output=True, text=True)


def running_list(state, stage):
    """A live process as the list's leader, in the given stage."""
    proc = subprocess.Popen(["sleep", "30"])
    (state / "gpu-chain.pid").write_text(f"{proc.pid}\n")
    (state / "gpu-chain.stages.now").write_text(f"{stage}\n")
    return proc


def test_sync_replaces_the_path_in_the_lists_copy(chain):
    tree, state = chain
    proc = running_list(state, "gpu-tests")
    try:
        r = sync(tree, state, "results/abl/run")
    finally:
        proc.kill()
    assert r.returncode == 0, r.stderr
    copy = state / "gpu-chain/results/abl/run"
    assert (copy / "run.sqlite").read_text() == "new"
    assert not (copy / "stale.txt").exists()
    assert not (state / "gpu-chain/results/abl/run.sync-new").exists()


@pytest.mark.parametrize("stage", ["frontier", "frontier-bench"])
def test_sync_refuses_while_a_stage_reads_the_runs(chain, stage):
    tree, state = chain
    proc = running_list(state, stage)
    try:
        r = sync(tree, state, "results/abl/run")
    finally:
        proc.kill()
    assert r.returncode == 2
    assert f"in its {stage} stage" in r.stderr
    assert (state / "gpu-chain/results/abl/run/run.sqlite").read_text() == "old"


def test_a_frontier_stage_that_has_ended_does_not_block_sync(chain):
    tree, state = chain
    (state / "gpu-chain.stages.now").write_text("frontier\n")   # no live leader: list ended
    r = sync(tree, state, "results/abl/run")
    assert r.returncode == 0, r.stderr
    assert (state / "gpu-chain/results/abl/run/run.sqlite").read_text() == "new"


@pytest.mark.parametrize("path, why", [("results/nope", "no such path"),
                                       ("../tree", "inside the repository"),
                                       ("/etc", "inside the repository")])
def test_sync_refuses_bad_paths_and_copies_nothing(chain, path, why):
    tree, state = chain
    r = sync(tree, state, "results/abl/run", path)
    assert r.returncode == 2 and why in r.stderr
    assert (state / "gpu-chain/results/abl/run/run.sqlite").read_text() == "old"


def test_sync_without_a_started_list_says_so(tmp_path):
    (tmp_path / "tree/x").mkdir(parents=True)
    r = sync(tmp_path / "tree", tmp_path / "empty", "x")
    assert r.returncode == 2 and "no list was started" in r.stderr
