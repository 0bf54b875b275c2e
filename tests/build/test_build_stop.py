"""Stopping a Builder's builds in flight at once (Builder.stop, evokernel.build.inflight).

Builds run in sessions of their own, so a terminal's Ctrl-C never reaches them: before
``stop``, `evokernel check K1.py K2.py --build-only` stopped by Ctrl-C printed "interrupted"
only once the build in flight had ended (18 s for a load_inline build on a 2-core host), and a
second Ctrl-C left the build running as an orphan. No nvcc here: the candidates' import (the
build step runs it) starts a child in a process group of its own, as ninja starts each
compiler, and sleeps."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evokernel.build import inflight
from evokernel.build.builder import Builder, BuildStopped
from evokernel.build.publish import publish_finished
from evokernel.records import Candidate
from tests.support.staged_build import stage_build


def slow_candidate(flags: Path, tag: str) -> str:
    """A candidate whose import, while ``flags/slow`` exists, starts ``sleep 60`` in a process
    group of its own, writes "SESSION CHILD" pids to ``flags/TAG.pids`` and sleeps 60 s; then
    (or at once without ``flags/slow``) writes ``flags/TAG.ended``."""
    return f'''
import os, pathlib, subprocess, time
flags = pathlib.Path({str(flags)!r})
if (flags / "slow").exists():
    child = subprocess.Popen(["sleep", "60"], process_group=0)
    (flags / "{tag}.tmp").write_text(f"{{os.getsid(0)}} {{child.pid}}")
    os.replace(flags / "{tag}.tmp", flags / "{tag}.pids")
    time.sleep(60)
(flags / "{tag}.ended").write_text("")


class ModelNew:
    pass
'''


def wait_for_pids(path: Path, timeout_s: float = 60) -> tuple[int, int]:
    """(session, child) once a slow candidate has written ``path``."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.05)
    sid, child = path.read_text().split()
    return int(sid), int(child)


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def live_in_session(sid: int) -> list[int]:
    """The processes of session ``sid`` that still run (zombies, dead already, left out)."""
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        fields = _stat(int(entry.name))
        if fields and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(entry.name))
    return out


def running(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def test_ctrl_c_in_a_with_block_kills_the_build_in_flight_at_once(tmp_path):
    """A ``with Builder`` block left by KeyboardInterrupt (evokernel.cli.build_only on Ctrl-C)
    kills the build in flight, session and all, within a second, cancels the queued one, and
    publishes nothing of it: built again later, it is no cache hit."""
    flags, cache = tmp_path / "flags", tmp_path / "cache"
    flags.mkdir()
    (flags / "slow").touch()
    before = inflight.stopped_count()
    with pytest.raises(KeyboardInterrupt):
        with Builder(cache, arch="9.0", timeout_s=300, workers=1, audit=False) as builder:
            first = builder.submit(Candidate(slow_candidate(flags, "a")))
            queued = builder.submit(Candidate(slow_candidate(flags, "b")))
            sid, child = wait_for_pids(flags / "a.pids")
            t0 = time.monotonic()
            raise KeyboardInterrupt
    took = time.monotonic() - t0
    assert took < 2, f"the with block took {took:.1f} s to end after Ctrl-C"
    assert inflight.stopped_count() - before == 1
    assert not live_in_session(sid) and not running(child), "the build's processes live on"
    assert queued.cancelled() and not (flags / "b.pids").exists()
    with pytest.raises(BuildStopped):
        first.result(timeout=5)
    assert not (flags / "a.ended").exists()
    assert not list((cache / "candidates").glob("*/result.json"))

    (flags / "slow").unlink()
    with Builder(cache, arch="9.0", timeout_s=300, workers=1, audit=False) as builder:
        again = builder.build(Candidate(slow_candidate(flags, "a")))
    assert again.ok and not again.cache_hit, again.log
    assert (flags / "a.ended").exists()


def test_stop_all_reaches_a_builder_no_with_block_closes(tmp_path):
    """An evaluator's Builder is never left by a ``with`` block: evokernel.cli.main's
    ``stop_all`` stops its build; a build asked for afterwards starts nothing."""
    flags = tmp_path / "flags"
    flags.mkdir()
    (flags / "slow").touch()
    builder = Builder(tmp_path / "cache", arch="9.0", timeout_s=300, workers=2, audit=False)
    with ThreadPoolExecutor(1) as pool:               # the evaluator's threads call build()
        direct = pool.submit(builder.build, Candidate(slow_candidate(flags, "a")))
        sid, child = wait_for_pids(flags / "a.pids")
        t0 = time.monotonic()
        assert inflight.stop_all() == 1
        assert time.monotonic() - t0 < 2
        assert not live_in_session(sid) and not running(child)
        with pytest.raises(BuildStopped):
            direct.result(timeout=5)
    (flags / "slow").unlink()
    with pytest.raises(BuildStopped):
        builder.build(Candidate(slow_candidate(flags, "b")))
    assert not (flags / "b.ended").exists()
    assert builder.stop() == 0 and inflight.stop_all() == 0


def test_a_build_finished_as_the_builder_stops_is_published_a_failed_one_not(tmp_path):
    cache = tmp_path / "cache"
    done, failed, killed = (cache / "candidates" / n for n in ("done", "failed", "killed"))
    stage_build(done, "ab" * 32)
    stage_build(failed, "cd" * 32, ok=False)
    (killed / "builds" / ("ef" * 32)).mkdir(parents=True)      # no marker, no result.json
    r = publish_finished(done, cache)
    assert r is not None and r["build_dirs"] == [str(cache / "builds" / ("ab" * 32))]
    assert (cache / "builds" / ("ab" * 32) / "ext.so").is_file()
    assert publish_finished(failed, cache) is None and publish_finished(killed, cache) is None
    assert [p.name for p in (cache / "builds").iterdir() if p.is_dir()] == ["ab" * 32]
    assert os.path.isdir(failed / "builds" / ("cd" * 32))


def test_a_stop_cut_short_by_a_second_ctrl_c_is_finished_by_the_next(monkeypatch):
    """Two Ctrl-C ~1 ms apart: the second landed inside the first stop, after it had unlisted
    its Builder and before the kills, and the builds ran on (a re-test, 7 of 7 tries)."""
    import subprocess
    sessions = inflight.BuildSessions()
    procs = [sessions.start(lambda: subprocess.Popen(["sleep", "60"], start_new_session=True))
             for _ in range(2)]
    real_kill, calls = inflight.kill_session, []

    def cut_short(sid):
        calls.append(sid)
        if len(calls) == 1:
            raise KeyboardInterrupt           # the second signal, inside the first stop
        return real_kill(sid)
    monkeypatch.setattr(inflight, "kill_session", cut_short)
    before = inflight.stopped_count()
    with pytest.raises(KeyboardInterrupt):
        sessions.stop(wait_s=0)
    assert all(p.poll() is None for p in procs)        # nothing killed yet
    monkeypatch.setattr(inflight, "kill_session", real_kill)
    reaper = ThreadPoolExecutor(2)
    for p in procs:                                    # the builds' own threads reap them
        reaper.submit(lambda p=p: (p.wait(), sessions.ended(p.pid)))
    assert inflight.stop_all() == 0                    # still listed; counted once, by the first
    assert inflight.stopped_count() - before == 2
    reaper.shutdown(wait=True)
    assert all(p.returncode is not None for p in procs)
