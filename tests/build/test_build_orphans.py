"""Builds that outlive their driver (evokernel.build.builder.Builder): a run killed mid-build
leaves its build process running, and the next run on the same cache must neither build the same
candidate beside it nor take its unpublished result for a cache hit.

On an H200 (results/h200-2026-12-03-s15, call 3) a driver started 15 s after another was killed
found every candidate of the fault batch ``timeout``: its builds were not in the cache, so each
GPU worker compiled them itself inside the evaluation limit. No nvcc here: the candidates have no
extension, or the build process is replaced by a stand-in."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evokernel.build.builder import Builder
from evokernel.build.cache import MARKER
from evokernel.records import Candidate
from tests.support.staged_build import stage_build

KEY = "ab" * 32


def _slow_candidate(flags: Path) -> str:
    """A candidate whose import (the build step runs it) marks its start, notes any other build
    of itself running at once, sleeps 4 s and marks its end."""
    return f'''
import pathlib, time
import torch.nn as nn
flags = pathlib.Path({str(flags)!r})
if (flags / "running").exists():
    (flags / "overlap").write_text("two builds at once")
(flags / "running").write_text("")
(flags / "started").write_text("")
time.sleep(4)
(flags / "running").unlink()
(flags / "ended").write_text(str(time.time()))


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.05)


def test_a_build_whose_driver_was_killed_is_waited_for_not_doubled(tmp_path):
    cache, flags = tmp_path / "cache", tmp_path / "flags"
    flags.mkdir()
    source = _slow_candidate(flags)
    driver = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from evokernel.build.builder import Builder; "
         "from evokernel.records import Candidate; "
         "Builder(sys.argv[1], arch='9.0', timeout_s=120, workers=1).build("
         "Candidate(sys.argv[2]))", str(cache), source],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        _wait_for(flags / "started", 120)
    finally:
        driver.send_signal(signal.SIGKILL)           # its build process lives on, orphaned
        driver.wait()
    assert not (flags / "ended").exists()

    r = Builder(cache, arch="9.0", timeout_s=120, workers=1).build(Candidate(source))
    assert r.ok, r.log
    assert (flags / "ended").exists()                 # the orphan finished before this returned
    assert not (flags / "overlap").exists(), "a second build of the candidate ran beside the first"


def test_an_unpublished_result_is_no_cache_hit(tmp_path, monkeypatch):
    """A result.json naming a build in the candidate's own folder (written by a build process
    after its driver died, so never moved into the cache) makes the candidate build again."""
    builder, cand, folder, runs = _published(tmp_path, monkeypatch)
    assert runs == ["trim"] and folder == tmp_path.resolve() / "builds" / KEY
    assert (folder / MARKER).is_file()
    assert builder.build(cand).cache_hit and runs == ["trim"]      # published: a hit

    (work,) = [f.parent for f in (tmp_path / "candidates").glob("*/result.json")]
    stage_build(work, "cd" * 32)                           # an orphan's result, never published
    again = builder.build(cand)
    assert runs == ["trim", "trim"] and again.ok and not again.cache_hit
    assert again.build_dirs == (str(folder),)


def _published(tmp_path, monkeypatch):
    """A Builder whose build process is a stand-in, after one published build of ``cand``.
    Returns: (builder, cand, its build folder in the cache, the modes it ran)."""
    builder = Builder(tmp_path, arch="9.0", timeout_s=60, workers=1, audit=False)
    cand, runs = Candidate("import torch\n"), []

    def stand_in(work: Path, mode: str, spent_s: float = 0.0, keep_fds=()):
        runs.append(mode)
        stage_build(work, KEY)
        (work / "build.log").write_text("")
        return False, 0

    monkeypatch.setattr(builder, "_run", stand_in)
    first = builder.build(cand)
    (folder,) = first.build_dirs
    return builder, cand, Path(folder), runs


def test_a_cached_build_whose_binary_is_gone_is_built_again_and_replaced(tmp_path, monkeypatch):
    builder, cand, folder, runs = _published(tmp_path, monkeypatch)
    (folder / "ext.so").unlink()                      # the marker stays
    again = builder.build(cand)
    assert runs == ["trim", "trim"] and again.ok and not again.cache_hit
    assert (folder / "ext.so").read_bytes() == b"built"          # the rebuild replaced it
    assert builder.build(cand).cache_hit and runs == ["trim", "trim"]


def test_a_marker_of_another_key_is_no_cache_hit(tmp_path, monkeypatch):
    builder, cand, folder, runs = _published(tmp_path, monkeypatch)
    (work,) = [f.parent for f in (tmp_path / "candidates").glob("*/result.json")]
    other = folder.parent / ("f" * 64)                # a marker copied into another folder
    other.mkdir()
    (other / MARKER).write_text((folder / MARKER).read_text())
    (other / "ext.so").write_bytes(b"x")
    (work / "result.json").write_text(json.dumps(
        {"ok": True, "cache_hit": False, "build_dirs": [str(other)], "flags": []}))
    again = builder.build(cand)
    assert runs == ["trim", "trim"] and again.ok and not again.cache_hit
    assert again.build_dirs == (str(folder),)
