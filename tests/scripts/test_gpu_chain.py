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
    (tree / "scripts").mkdir(parents=True)
    (tree / "scripts/gpu_check.sh").write_text("")               # the repository root's mark
    (tree / "results/abl/run").mkdir(parents=True)
    (tree / "results/abl/run/run.sqlite").write_text("new")
    state = tmp_path / "state"
    (state / "gpu-chain/results/abl/run").mkdir(parents=True)
    (state / "gpu-chain/results/abl/run/run.sqlite").write_text("old")
    (state / "gpu-chain/results/abl/run/stale.txt").write_text("gone after sync")
    (state / "gpu-chain/results/list/bench.txt").parent.mkdir(parents=True)
    (state / "gpu-chain/results/list/bench.txt").write_text("the list's own results")
    (state / "gpu-chain.results").write_text("./results//list/\n")    # as start was given it
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


@pytest.mark.parametrize("spelled", ["results/abl/run", "results/abl/run/", "./results//abl/run"])
def test_sync_replaces_the_path_in_the_lists_copy(chain, spelled):
    tree, state = chain
    proc = running_list(state, "gpu-tests")
    try:
        r = sync(tree, state, spelled)
    finally:
        proc.kill()
    assert r.returncode == 0, r.stderr
    copy = state / "gpu-chain/results/abl/run"
    assert (copy / "run.sqlite").read_text() == "new"
    assert not (copy / "stale.txt").exists()
    assert not list((state / "gpu-chain/results/abl").glob("*.sync-*"))


@pytest.mark.parametrize("stage", ["frontier", "frontier-bench", "replay", "export-op"])
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
                                       ("/etc", "inside the repository"),
                                       (".", "below the repository root"),
                                       ("results/abl/.", "overlaps"),
                                       ("results", "holds the list's results folder"),
                                       ("results/list/x", "inside the list's results folder"),
                                       ("outside/x", "through a symbolic link")])
def test_sync_refuses_bad_paths_and_copies_nothing(chain, path, why, tmp_path):
    tree, state = chain
    (tmp_path / "elsewhere/x").mkdir(parents=True)
    (tree / "outside").symlink_to(tmp_path / "elsewhere")
    (tree / "results/list/x").mkdir(parents=True)
    r = sync(tree, state, "results/abl/run", path)
    assert r.returncode == 2 and why in r.stderr, r.stderr
    assert (state / "gpu-chain/results/abl/run/run.sqlite").read_text() == "old"
    assert (state / "gpu-chain/results/list/bench.txt").read_text() == "the list's own results"


def test_sync_from_outside_the_repository_root_is_refused(chain):
    tree, state = chain
    env = {**os.environ, "GPU_CHAIN_TMP": str(state)}
    r = subprocess.run(["bash", str(SCRIPT), "sync", "abl/run"], cwd=tree / "results", env=env,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "repository root" in r.stderr
    assert not (state / "gpu-chain/abl").exists()


def test_sync_without_a_started_list_says_so(tmp_path):
    (tmp_path / "tree/x").mkdir(parents=True)
    (tmp_path / "tree/scripts").mkdir()
    (tmp_path / "tree/scripts/gpu_check.sh").write_text("")
    r = sync(tmp_path / "tree", tmp_path / "empty", "x")
    assert r.returncode == 2 and "no list was started" in r.stderr
