"""evokernel.build.host.BuildLadder: running builds ranked by submission, the oldest at
BUILD_NICENESS, each younger one a step nicer (up to 19), their autogroups written as builds start
and end, through a handle opened at each build's start; below_gpu: processes at BUILD_NICENESS,
the autogroup at a given rung; the Builder's builds on the ladder (a stand-in build process: no
compiler runs here)."""
from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
from loguru import logger

from evokernel.build import builder as builder_module
from evokernel.build.builder import Builder
from evokernel.build.host import BUILD_NICENESS, Autogroup, BuildLadder, below_gpu
from evokernel.records import Candidate


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))      # EAGAIN: a BlockingIOError, ESRCH: ...Lookup...


class Writes:
    """A ladder's opener whose handles record (pid, niceness) instead of writing /proc: the
    first ``fail_times`` writes raise OSError(``fail``); every write through pid P's handle
    raises OSError(``fail_for[P]``), every open of P OSError(``open_fail[P]``). ``opened`` and
    ``closed`` list the pids of the handles opened and closed; a write through a closed handle
    is recorded in ``after_close`` (and raises EBADF); ``alive(pid)`` (default: always) is asked
    at each open."""

    def __init__(self, fail: int | None = None, fail_times: int = 0,
                 fail_for: dict[int, int] | None = None, open_fail: dict[int, int] | None = None):
        self.calls: list[tuple[int, int]] = []
        self.done: list[tuple[int, int]] = []
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.after_close: list[tuple[int, int]] = []
        self.fail, self.fail_times = fail, fail_times
        self.fail_for, self.open_fail = fail_for or {}, open_fail or {}
        self.alive = lambda pid: True
        self.lock = threading.Lock()

    def __call__(self, pid: int) -> "Writes.Handle":
        with self.lock:
            assert self.alive(pid), f"pid {pid} opened after its process was reaped"
            if pid in self.open_fail:
                raise _error(self.open_fail[pid])
            self.opened.append(pid)
        return Writes.Handle(self, pid)

    class Handle:
        def __init__(self, writes: "Writes", pid: int):
            self.writes, self.pid, self.is_closed = writes, pid, False

        def write(self, niceness: int) -> None:
            w = self.writes
            with w.lock:
                if self.is_closed:
                    w.after_close.append((self.pid, niceness))
                    raise _error(errno.EBADF)
                w.calls.append((self.pid, niceness))
                if w.fail is not None and len(w.calls) <= w.fail_times:
                    raise _error(w.fail)
                if self.pid in w.fail_for:
                    raise _error(w.fail_for[self.pid])
                w.done.append((self.pid, niceness))

        def close(self) -> None:
            with self.writes.lock:
                assert not self.is_closed, f"pid {self.pid}'s handle closed twice"
                self.is_closed = True
                self.writes.closed.append(self.pid)

    def last(self) -> dict[int, int]:
        with self.lock:
            return dict(self.done)


def test_the_oldest_running_build_gets_build_niceness_and_younger_ones_step_down():
    ladder = BuildLadder(opener=Writes())
    assert [ladder.enter(s) for s in (0, 1, 5)] == [10, 11, 12]
    assert ladder.enter(3) == 12                      # between 1 and 5: 5 steps down
    assert ladder.snapshot() == {0: 10, 1: 11, 3: 12, 5: 13}
    assert BUILD_NICENESS == 10


def test_rungs_stop_at_19():
    ladder = BuildLadder(opener=Writes())
    assert [ladder.enter(s) for s in range(14)] == list(range(10, 20)) + [19] * 4
    assert BuildLadder.niceness(0) == BUILD_NICENESS and BuildLadder.niceness(500) == 19


def test_writes_follow_the_ranks_as_builds_start_and_end():
    w = Writes()
    ladder = BuildLadder(opener=w)
    ladder.enter(0)
    ladder.started(0, 100)
    assert w.calls == [(100, 10)]
    assert ladder.enter(1) == 11
    ladder.started(1, 101)
    assert w.calls == [(100, 10), (101, 11)]          # 100 is at its rung already
    assert ladder.enter(2) == 12
    ladder.started(2, 102)
    ladder.leave(0)                                    # the younger ones move up
    assert w.calls[3:] == [(101, 10), (102, 11)]
    assert ladder.snapshot() == {1: 10, 2: 11}
    ladder.leave(2)                                    # a younger one ends: no change above
    assert len(w.calls) == 5
    ladder.leave(1)
    assert ladder.snapshot() == {} and len(w.calls) == 5
    assert w.opened == [100, 101, 102] and w.closed == [100, 102, 101]
    assert w.after_close == []
    ladder.leave(1)                                    # again: nothing
    assert w.closed == [100, 102, 101]


def test_writes_go_to_the_process_opened_at_its_start_never_to_a_reused_pid():
    """The Builder reaps a build's process (proc.wait) before it leaves the ladder; meanwhile
    its rung may change. The write goes through the handle opened at its start, bound to the
    process (the kernel answers ESRCH once it is reaped), never to /proc/<pid> by path, which
    by then may be another process's (a GPU worker's) with the same pid."""
    table: dict[int, dict] = {}                       # pid -> the process that has it now

    class Procs:                                       # an opener over that table
        def __call__(self, pid: int) -> "Procs.Handle":
            return Procs.Handle(table[pid])

        class Handle:
            def __init__(self, process: dict):
                self.process, self.is_closed = process, False

            def write(self, niceness: int) -> None:
                assert not self.is_closed, "written after its close"
                if self.process["reaped"]:
                    raise _error(errno.ESRCH)
                self.process["nice"].append(niceness)

            def close(self) -> None:
                self.is_closed = True

    def spawn(pid: int) -> dict:
        table[pid] = {"reaped": False, "nice": []}
        return table[pid]

    ladder = BuildLadder(opener=Procs())
    old, young = spawn(100), spawn(101)
    ladder.enter(0)
    ladder.started(0, 100)
    ladder.enter(1)
    ladder.started(1, 101)
    assert old["nice"] == [10] and young["nice"] == [11]
    young["reaped"] = True                             # its build's proc.wait() returned
    stranger = spawn(101)                              # the pid given to another process
    ladder.leave(0)                                    # the young one's rung: 11 -> 10
    assert stranger["nice"] == [] and young["nice"] == [11]
    ladder.leave(1)
    spawn(102)
    ladder.enter(2)
    ladder.started(2, 102)
    assert stranger["nice"] == [] and table[102]["nice"] == [10]


def test_a_build_entered_but_not_started_holds_its_rung_and_is_not_written():
    w = Writes()
    ladder = BuildLadder(opener=w)
    ladder.enter(0)
    ladder.enter(1)
    ladder.started(1, 101)                             # 0 has no pid yet: 1 stays second
    assert w.calls == [(101, 11)]
    ladder.started(0, 100)
    assert w.calls == [(101, 11), (100, 10)]
    ladder.leave(0)
    assert w.calls[-1] == (101, 10)


def test_a_retry_keeps_its_rank():
    """The Builder's second build of a candidate (as written, after light headers failed)
    enters with the candidate's seq: ahead of younger builds started meanwhile."""
    w = Writes()
    ladder = BuildLadder(opener=w)
    ladder.enter(0)
    ladder.started(0, 100)
    ladder.enter(1)
    ladder.started(1, 101)
    ladder.leave(0)                                    # the light-header build failed
    assert w.calls[-1] == (101, 10)
    assert ladder.enter(0) == 10                       # a fresh seq would give 11
    ladder.started(0, 102)
    assert w.calls[-2:] == [(102, 10), (101, 11)]


def test_failed_writes_never_fail_a_build_and_are_not_repeated():
    for error in (errno.EIO, errno.EACCES, errno.ENOENT, errno.ESRCH):
        w = Writes(fail=error, fail_times=1000)
        ladder = BuildLadder(opener=w)
        with ladder.rung(0) as n0:
            ladder.started(0, 100)
            with ladder.rung(1) as n1:
                ladder.started(1, 101)
        assert (n0, n1) == (10, 11)
        # each (pid, rung) tried once: 100 at 10, 101 at 11; 100 unchanged when 1 left
        assert w.calls == [(100, 10), (101, 11)] and w.done == []
        assert ladder.snapshot() == {} and w.closed == [101, 100]


def test_a_handle_that_cannot_be_opened_keeps_its_rung_and_is_never_written():
    w = Writes(open_fail={100: errno.ENOENT})
    ladder = BuildLadder(opener=w)
    ladder.enter(0)
    ladder.started(0, 100)                             # no autogroups: the open fails
    ladder.enter(1)
    ladder.started(1, 101)
    assert ladder.snapshot() == {0: 10, 1: 11} and w.calls == [(101, 11)]
    ladder.leave(0)
    ladder.leave(1)
    assert w.calls == [(101, 11), (101, 10)] and w.opened == w.closed == [101]


def test_a_build_started_after_it_left_has_its_handle_closed_at_once():
    w = Writes()
    ladder = BuildLadder(opener=w)
    ladder.started(7, 107)                             # never entered
    ladder.enter(8)
    ladder.started(8, 108)
    ladder.enter(8)                                    # entered again without leaving
    assert w.closed == [107, 108] and w.calls == [(108, 10)]
    ladder.leave(8)
    assert w.closed == [107, 108] and w.after_close == []


def test_each_kind_of_failure_is_logged_once_and_an_ended_build_not_at_all():
    """ESRCH (the build's process has been reaped) is no failure worth a word and does not
    use up the log; EIO twice is logged once; EPERM, and an open that fails, once each."""
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(m.record["message"]), level="DEBUG")
    try:
        w = Writes(fail_for={100: errno.ESRCH, 101: errno.EIO, 102: errno.EIO,
                             103: errno.EPERM},
                   open_fail={104: errno.ENOENT, 105: errno.ENOENT})
        ladder = BuildLadder(opener=w)
        for seq, pid in enumerate(range(100, 106)):
            ladder.enter(seq)
            ladder.started(seq, pid)
        for seq in range(6):
            ladder.leave(seq)
    finally:
        logger.remove(sink)
    said = [m for m in messages if m.startswith("build ladder")]
    assert len(said) == 3, said
    assert "/proc/101/autogroup not written" in said[0] and os.strerror(errno.EIO) in said[0]
    assert "/proc/103/autogroup not written" in said[1]
    assert "/proc/104/autogroup not opened" in said[2]
    assert all(f"niceness {BUILD_NICENESS}" in m for m in said)


def test_a_rate_limited_write_is_tried_again():
    """Without CAP_SYS_ADMIN the kernel takes one autogroup write per 100 ms host-wide and
    refuses the others with EAGAIN (BlockingIOError): those are written again later."""
    w = Writes(fail=errno.EAGAIN, fail_times=3)
    ladder = BuildLadder(opener=w, retry_s=0.01)
    ladder.enter(0)
    ladder.started(0, 100)
    assert w.done == []
    deadline = time.monotonic() + 5
    while not w.done and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.done == [(100, 10)] and len(w.calls) == 4
    ladder.leave(0)


def test_the_rung_context_leaves_on_an_exception():
    ladder = BuildLadder(opener=Writes())
    with pytest.raises(OSError):
        with ladder.rung(0):
            raise OSError("Popen failed")
    assert ladder.snapshot() == {} and ladder.enter(1) == 10


def test_concurrent_builds_keep_one_consistent_ladder():
    w = Writes()
    ladder = BuildLadder(opener=w)
    n = 16
    entered = threading.Barrier(n + 1)
    go = threading.Event()

    def build(seq: int) -> None:
        time.sleep(random.random() * 0.01)
        ladder.enter(seq)
        ladder.started(seq, 1000 + seq)
        entered.wait()
        go.wait()
        time.sleep(random.random() * 0.01)
        ladder.leave(seq)

    threads = [threading.Thread(target=build, args=(s,)) for s in range(n)]
    for t in threads:
        t.start()
    entered.wait()
    assert ladder.snapshot() == {s: BuildLadder.niceness(s) for s in range(n)}
    assert w.last() == {1000 + s: BuildLadder.niceness(s) for s in range(n)}
    go.set()
    for t in threads:
        t.join()
    assert ladder.snapshot() == {}

    def churn(base: int) -> None:                      # many builds coming and going
        for i in range(200):
            with ladder.rung(base + i):
                ladder.started(base + i, base + i)
    threads = [threading.Thread(target=churn, args=(10_000 * (k + 1),)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ladder.snapshot() == {}
    with ladder.rung(5) as n5:                         # alone again: the top rung
        ladder.started(5, 5)
        assert n5 == 10 and w.calls[-1] == (5, 10)


@pytest.mark.skipif(not (shutil.which("nice") and shutil.which("sh")), reason="no nice or sh")
def test_below_gpu_starts_the_process_at_build_niceness_and_the_autogroup_at_its_rung():
    """Where autogroups count for nothing (turned off, or a non-root cpu cgroup as in Docker)
    only the process's niceness does, and a build started young (say at 19) would stay below
    builds started later at 11-18 once the older ones end: so ``nice -n`` is always
    BUILD_NICENESS and only the autogroup carries the rung."""
    for rung in (BUILD_NICENESS, 13, 19):
        cmd = below_gpu(["prog", "arg"], rung)
        assert cmd[:2] == [shutil.which("sh"), "-c"]
        assert f"echo {rung} > /proc/self/autogroup" in cmd[2]
        assert cmd[4:7] == [shutil.which("nice"), "-n", str(BUILD_NICENESS)]
        assert cmd[7:] == ["prog", "arg"]
    default = below_gpu(["prog"])
    assert f"echo {BUILD_NICENESS} >" in default[2] and default[6] == str(BUILD_NICENESS)
    probe = below_gpu([sys.executable, "-c", "import os, pathlib; print(os.nice(0)); "
                       "a = pathlib.Path('/proc/self/autogroup'); print(a.read_text() "
                       "if a.exists() else 'none')"], 13)
    out = subprocess.run(probe, text=True, capture_output=True, start_new_session=True,
                         check=True).stdout.splitlines()
    assert int(out[0]) == min(19, os.nice(0) + BUILD_NICENESS)
    # the echo may be refused (EAGAIN, another autogroup write within 100 ms): then nice 0
    assert out[1] == "none" or out[1].endswith(("nice 13", "nice 0")), out


def _write_retrying(handle: Autogroup, niceness: int) -> None:
    for _ in range(20):                                # EAGAIN: another write within 100 ms
        try:
            return handle.write(niceness)
        except BlockingIOError:
            time.sleep(0.11)
    raise AssertionError("autogroup writes refused for 2 s")


def test_an_autogroup_handle_writes_its_process_until_it_is_reaped():
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("no scheduler autogroups in this kernel")
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    handle = Autogroup(proc.pid)
    try:
        _write_retrying(handle, 17)
        assert Path(f"/proc/{proc.pid}/autogroup").read_text().strip().endswith("nice 17")
    finally:
        proc.kill()
        proc.wait()
    with pytest.raises(ProcessLookupError):            # reaped: ESRCH, whoever has the pid now
        _write_retrying(handle, 12)
    handle.close()
    with pytest.raises(ProcessLookupError):
        handle.write(12)
    handle.close()                                     # again: nothing


# --- the Builder on the ladder, with a stand-in for its build process ---------------------


def _rung(cmd: list[str]) -> int:
    """The autogroup rung of a below_gpu command; its process's niceness is BUILD_NICENESS."""
    echoed = int(re.search(r"echo (\d+) > /proc/self/autogroup", cmd[2]).group(1))
    assert cmd[cmd.index("-n") + 1] == str(BUILD_NICENESS), cmd
    return echoed


class StandInBuilds:
    """subprocess as evokernel.build.builder sees it, its Popen a stand-in that records each
    command, keyed by the candidate's source (its work folder's candidate.py): ``hold[source]``
    (an Event) keeps that build running until set; ``waiting[source]`` is set once it runs;
    the sources in ``light_fail`` fail their first (light-header) build; ``reaped``: the pids
    whose wait() has returned."""

    DEVNULL, STDOUT, TimeoutExpired = subprocess.DEVNULL, subprocess.STDOUT, \
        subprocess.TimeoutExpired

    def __init__(self):
        self.runs: list[tuple[str, list[str], int]] = []   # (source, cmd, pid)
        self.hold: dict[str, threading.Event] = {}
        self.waiting: dict[str, threading.Event] = {}
        self.light_fail: set[str] = set()
        self.reaped: set[int] = set()
        self.lock = threading.Lock()
        stand_in = self

        class Popen:
            def __init__(self, cmd, cwd, **kwargs):
                assert kwargs["start_new_session"] is True
                self.work = (Path(cwd) / "candidate.py").read_text()
                with stand_in.lock:
                    self.pid = 5_000_000 + len(stand_in.runs)   # above any pid_max
                    stand_in.runs.append((self.work, list(cmd), self.pid))
                    stand_in.waiting.setdefault(self.work, threading.Event())
                if self.work in stand_in.light_fail and "trim" in cmd:
                    (Path(cwd) / "result.json").write_text(
                        '{"ok": false, "trimmed": true, "build_dirs": [], "flags": []}')

            def wait(self, timeout=None):
                stand_in.waiting[self.work].set()
                hold = stand_in.hold.get(self.work)
                if hold is not None:
                    hold.wait(30)
                stand_in.reaped.add(self.pid)
                return 1

        self.Popen = Popen

    @contextlib.contextmanager
    def released(self):
        """On the way out (a failed assertion too), every held build ends."""
        try:
            yield
        finally:
            for hold in self.hold.values():
                hold.set()

    def rungs_of(self, work: str) -> list[int]:
        return [_rung(cmd) for w, cmd, _ in self.runs if w == work]

    def pids_of(self, work: str) -> list[int]:
        return [pid for w, _, pid in self.runs if w == work]


@pytest.fixture
def stand_in(monkeypatch):
    builds = StandInBuilds()
    monkeypatch.setattr(builder_module, "subprocess",
                        types.SimpleNamespace(Popen=builds.Popen, DEVNULL=builds.DEVNULL,
                                              STDOUT=builds.STDOUT,
                                              TimeoutExpired=builds.TimeoutExpired))
    killed: list[int] = []
    monkeypatch.setattr(builder_module, "kill_session", killed.append)
    builds.killed = killed
    return builds


def _wait_for(event: threading.Event) -> None:
    assert event.wait(10), "the stand-in build never started"


@pytest.mark.skipif(not (shutil.which("nice") and shutil.which("sh")), reason="no nice or sh")
def test_builder_starts_builds_at_their_rung_and_a_retry_keeps_it(tmp_path, stand_in):
    """The oldest submitted build at 10, the next at 11; the oldest's retry (its light-header
    build failed) at 10 again, ahead of the younger one still running; each build's autogroup
    written as the others start and end."""
    w = Writes()
    with Builder(tmp_path, arch="9.0", timeout_s=60, workers=2, audit=False) as b, \
            stand_in.released():
        b.ladder = BuildLadder(opener=w)
        old, young = Candidate("x = 1\n"), Candidate("x = 2\n")
        old_work, young_work = old.source, young.source
        stand_in.light_fail.add(old_work)
        stand_in.hold[young_work] = threading.Event()
        stand_in.hold[old_work] = young_started = stand_in.waiting.setdefault(
            young_work, threading.Event())             # old's first build ends once young runs
        first = b.submit(old)
        _wait_for(stand_in.waiting.setdefault(old_work, threading.Event()))
        second = b.submit(young)
        _wait_for(young_started)
        r_old = first.result(timeout=30)
        assert not r_old.ok and any("built as written" in f for f in r_old.flags)
        assert stand_in.rungs_of(old_work) == [10, 10]   # a fresh seq would give 11
        assert stand_in.rungs_of(young_work) == [11]
        (p1, p3), (p2,) = stand_in.pids_of(old_work), stand_in.pids_of(young_work)
        assert w.calls == [(p1, 10), (p2, 11),        # both started
                           (p2, 10),                  # old's light build ended
                           (p3, 10), (p2, 11),        # old's retry started, ahead again
                           (p2, 10)]                  # old's retry ended
        stand_in.hold[young_work].set()
        assert not second.result(timeout=30).ok
    assert b.ladder.snapshot() == {} and set(stand_in.killed) == {p1, p2, p3}


@pytest.mark.skipif(not (shutil.which("nice") and shutil.which("sh")), reason="no nice or sh")
def test_a_direct_build_ranks_after_builds_submitted_later(tmp_path, stand_in):
    w = Writes()
    with Builder(tmp_path, arch="9.0", timeout_s=60, workers=2, audit=False) as b, \
            stand_in.released():
        b.ladder = BuildLadder(opener=w)
        direct, queued = Candidate("x = 3\n"), Candidate("x = 4\n")
        direct_work, queued_work = direct.source, queued.source
        stand_in.hold[direct_work] = threading.Event()
        results = []
        t = threading.Thread(target=lambda: results.append(b.build(direct)))
        t.start()
        _wait_for(stand_in.waiting.setdefault(direct_work, threading.Event()))
        assert stand_in.rungs_of(direct_work) == [10]     # alone: the top rung
        assert not b.submit(queued).result(timeout=30).ok
        assert stand_in.rungs_of(queued_work) == [10]     # submitted: ahead of the direct
        (pd,), (pq,) = stand_in.pids_of(direct_work), stand_in.pids_of(queued_work)
        assert w.calls == [(pd, 10), (pq, 10), (pd, 11), (pd, 10)]
        stand_in.hold[direct_work].set()
        t.join(30)
        assert len(results) == 1 and not results[0].ok


def test_the_builder_opens_a_build_at_its_start_and_leaves_once_it_is_reaped(tmp_path, stand_in):
    """The autogroup handle is opened before the build's process can have been reaped, and the
    build leaves the ladder (its handle closed, the younger ones moving up) right after its
    process has been waited for, before its jail is finished."""
    w = Writes()
    w.alive = lambda pid: pid not in stand_in.reaped
    at_finish = []

    class Jail:                                        # evokernel.sandbox.workers.BuildJail
        def prepare(self, work):
            pass

        def command(self, cmd, work, env):
            return cmd, env

        def finish(self, work):
            at_finish.append((b.ladder.snapshot(), list(w.closed)))

    with Builder(tmp_path, arch="9.0", timeout_s=60, workers=1, audit=False) as b, \
            stand_in.released():
        b.ladder = BuildLadder(opener=w)
        b.jail = Jail()
        result = b.build(Candidate("x = 5\n"))
    (pid,) = stand_in.pids_of("x = 5\n")
    assert not result.ok and w.opened == [pid] and w.calls == [(pid, 10)]
    assert at_finish == [({}, [pid])]
    assert w.closed == [pid] and w.after_close == []
