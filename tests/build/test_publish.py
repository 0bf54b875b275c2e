"""A build worker's result and staged builds are untrusted: only complete, plain build folders
of its own reach the cache, never over a build already there; the folder it wrote is taken back
without set-user-ID or world-writable bits."""
import json
import os
import stat
from pathlib import Path

import pytest

from evokernel.build.cache import MARKER
from evokernel.build.publish import publish, read_result
from evokernel.sandbox.workers import give, reclaim

KEY_A, KEY_B = "a" * 64, "b" * 64


def _stage(work, key, marker_key=None, extra=None):
    d = work / "builds" / key
    d.mkdir(parents=True)
    (d / "ext.so").write_bytes(b"\x7fELF staged " + key.encode())
    (d / MARKER).write_text(json.dumps({"key": marker_key or key}))
    if extra:
        extra(d)
    return d


def _result(work, dirs, ok=True, **kw):
    r = {"ok": ok, "cache_hit": False, "build_dirs": [str(d) for d in dirs], "flags": [],
         "trimmed": False, **kw}
    (work / "result.json").write_text(json.dumps(r))


@pytest.fixture
def dirs(tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "cache" / "candidates" / "c"
    work.mkdir(parents=True)
    return cache, work


def test_a_complete_build_moves_into_the_cache(dirs):
    cache, work = dirs
    _result(work, [_stage(work, KEY_A), cache / "builds" / KEY_B])   # B: a cache hit
    r = publish(work, cache)
    assert r["ok"] and r["build_dirs"] == [str(cache / "builds" / KEY_A),
                                           str(cache / "builds" / KEY_B)]
    assert (cache / "builds" / KEY_A / "ext.so").read_bytes().endswith(KEY_A.encode())
    assert not (work / "builds" / KEY_A).exists()
    assert json.loads((work / "result.json").read_text())["build_dirs"] == r["build_dirs"]


def test_a_build_in_the_cache_is_never_replaced(dirs):
    cache, work = dirs
    kept = cache / "builds" / KEY_A
    kept.mkdir(parents=True)
    (kept / "ext.so").write_bytes(b"the original")
    (kept / MARKER).write_text(json.dumps({"key": KEY_A}))
    _result(work, [_stage(work, KEY_A)])
    assert publish(work, cache)["ok"]
    assert (kept / "ext.so").read_bytes() == b"the original"


def test_a_partial_folder_in_the_cache_is_replaced(dirs):
    cache, work = dirs
    partial = cache / "builds" / KEY_A
    partial.mkdir(parents=True)
    (partial / "leftover.o").write_text("a killed build of an older version")
    _result(work, [_stage(work, KEY_A)])
    assert publish(work, cache)["ok"]
    assert not (partial / "leftover.o").exists() and (partial / MARKER).is_file()


@pytest.mark.parametrize("case", ["outside", "not_a_key", "wrong_marker", "no_marker",
                                  "symlink", "fifo"])
def test_untrusted_builds_do_not_reach_the_cache(dirs, tmp_path, case):
    cache, work = dirs
    if case == "outside":
        target = tmp_path / "elsewhere" / KEY_A
        target.mkdir(parents=True)
    elif case == "not_a_key":
        target = _stage(work, "../../x")
    elif case == "wrong_marker":
        target = _stage(work, KEY_A, marker_key=KEY_B)
    elif case == "no_marker":
        target = _stage(work, KEY_A)
        (target / MARKER).unlink()
    elif case == "symlink":
        target = _stage(work, KEY_A, extra=lambda d: (d / "cuda.cu").symlink_to("/etc/passwd"))
    else:
        target = _stage(work, KEY_A, extra=lambda d: os.mkfifo(d / "pipe"))
    _result(work, [target])
    r = publish(work, cache)
    assert not r["ok"] and r["build_dirs"] == [] and r["flags"][-1].startswith("publish: ")
    assert not (cache / "builds" / KEY_A).exists()


def test_failed_builds_stay_in_their_folder(dirs):
    cache, work = dirs
    staged = _stage(work, KEY_A)
    _result(work, [staged], ok=False)
    r = publish(work, cache)
    assert not r["ok"] and r["build_dirs"] == [str(staged)] and staged.is_dir()
    assert not (cache / "builds").exists()


@pytest.mark.parametrize("text", ["", "[]", '{"ok": "yes", "cache_hit": false, "build_dirs": [],'
                                  ' "flags": []}', '{"ok": true, "cache_hit": false, '
                                  '"build_dirs": [1], "flags": []}'])
def test_a_malformed_result_is_no_result(tmp_path, text):
    (tmp_path / "result.json").write_text(text)
    assert read_result(tmp_path / "result.json") is None
    assert publish(tmp_path, tmp_path / "cache") is None


def test_flags_are_bounded(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps(
        {"ok": True, "cache_hit": True, "build_dirs": [], "flags": ["x" * 10_000] * 500}))
    r = read_result(tmp_path / "result.json")
    assert len(r["flags"]) == 50 and all(len(f) == 500 for f in r["flags"])


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_give_and_reclaim(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_text("x")
    (tmp_path / "link").symlink_to("/etc/passwd")
    give(tmp_path, 65534, 65534)
    assert {p.lstat().st_uid for p in [tmp_path, *tmp_path.rglob("*")]} == {65534}
    assert Path("/etc/passwd").stat().st_uid == 0               # links themselves, not targets
    (tmp_path / "sub" / "f").chmod(0o4777)
    reclaim(tmp_path)
    mode = stat.S_IMODE((tmp_path / "sub" / "f").stat().st_mode)
    assert mode == 0o775 and {p.lstat().st_uid for p in [tmp_path, *tmp_path.rglob("*")]} == {0}
