"""A process in a jail: another user, no network, no other processes in view, the file system
read-only but for its own folder, the home hidden, /tmp private; pipes, exit statuses and
strays behave as a worker needs."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel.sandbox.jail import JAIL_FAILED, Bind, Jail
from evokernel.sandbox.support import Containment
from tests.support.jails import contained, needs_util_linux

PROBE = r"""
import json, os, socket, sys
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
       "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    out["net"] = "connected"
except OSError as e:
    out["net"] = e.errno
def write(path):
    try:
        with open(path, "x") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return e.errno
out["writes"] = {p: write(p) for p in sys.argv[2:]}
out["home"] = sorted(os.listdir(os.path.expanduser("~root")))
out["tmp"] = sorted(os.listdir("/tmp"))
print(json.dumps(out))
"""


def test_jail_checks_its_arguments():
    with pytest.raises(ValueError, match="mode"):
        Jail(mode="chroot")
    with pytest.raises(ValueError, match="not root"):
        Jail(uid=0, gid=0)
    with pytest.raises(ValueError, match="absolute"):
        Jail(binds=(Bind("cache", "/cache"),))
    with pytest.raises(ValueError, match="needs a uid"):
        Jail(mode="user")
    with pytest.raises(ValueError, match="not a jail"):
        Jail.from_json('{"mode": "namespaces", "colour": 1}')


def test_jail_command_lines():
    j = Jail(uid=1234, gid=99, binds=(Bind("/a", "/b", True),), cwd="/b",
             unshare="/usr/bin/unshare", setpriv="/usr/bin/setpriv")
    assert Jail.from_json(j.to_json()) == j
    cmd = j.command(["python", "-m", "w"])
    assert cmd[:2] == ["/usr/bin/unshare", "--net"] and "--user" not in cmd
    assert cmd[cmd.index("-m") + 1] == "evokernel.sandbox.enter" and cmd[-4:] == ["--", "python",
                                                                                  "-m", "w"]
    assert j.drop_command()[:3] == ["/usr/bin/setpriv", "--reuid=1234", "--regid=99"]
    userns = Jail(inner_uid=1000, inner_gid=1000)
    assert userns.command(["x"])[1:3] == ["--user", "--map-root-user"]
    assert "--map-user=1000" in userns.drop_command()
    assert Jail(mode="user", uid=5, gid=5).command(["x"])[-2:] == ["--", "x"]
    assert Jail(mode="none").command(["x", "y"]) == ["x", "y"]


@pytest.fixture
def listener():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    s.setblocking(False)
    yield s
    s.close()


def _run(jail, argv, **kw):
    return subprocess.run(jail.command(argv), capture_output=True, text=True, timeout=120, **kw)


@needs_util_linux
def test_a_jailed_process_is_contained(tmp_path, listener):
    cache, work, outside = tmp_path / "cache", tmp_path / "cache" / "work", tmp_path / "outside"
    for d in (cache, work, outside):
        d.mkdir(parents=True, exist_ok=True)
    os.chown(work, 65534, 65534)
    (Path("/tmp") / f"evokernel-jail-test-{os.getpid()}").write_text("the parent's /tmp")
    try:
        c = contained(cache)
        jail = c.jail([Bind(str(cache), str(cache)), Bind(str(work), str(work), True)],
                      cwd=str(work))
        port = listener.getsockname()[1]
        targets = [str(work / "ok"), str(cache / "no"), str(outside / "no"),
                   os.path.expanduser("~/evokernel-jail-test-no"), "/etc/evokernel-jail-test-no"]
        proc = _run(jail, [sys.executable, "-c", PROBE, str(port), *targets],
                    env=dict(os.environ, HOME="/tmp"))
    finally:
        (Path("/tmp") / f"evokernel-jail-test-{os.getpid()}").unlink()
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert (got["uid"], got["gid"], got["groups"]) == (65534, 65534, [])
    assert got["cwd"] == str(work) and got["pids"] == [1, 2]
    assert got["net"] == 101                                    # ENETUNREACH: no route at all
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert got["writes"][str(work / "ok")] == "written" and (work / "ok").is_file()
    assert all(v in (30, 2, 13) for k, v in got["writes"].items() if k != str(work / "ok"))
    assert not (cache / "no").exists() and not (outside / "no").exists()
    home = os.path.expanduser("~root")
    assert set(got["home"]) <= {p.relative_to(home).parts[0] for p in
                                (Path(b.target) for b in jail.binds) if str(p).startswith(home)}
    assert f"evokernel-jail-test-{os.getpid()}" not in got["tmp"]


@needs_util_linux
def test_pipes_statuses_and_strays(tmp_path):
    """Descriptors passed to the worker still work; a worker killed by a signal reads as that
    signal (128 + N from the init); what it left running dies with it."""
    tmp_path.chmod(0o755)                       # pytest makes it 0700; the cache must be readable
    c = contained(tmp_path)
    jail = c.jail(cwd="/")
    r, w = os.pipe()
    naptime = f"{300 + os.getpid() % 1000 / 1000:.3f}"    # no other process sleeps this long
    code = ("import os, subprocess, sys\n"
            f"p = subprocess.Popen(['sleep', '{naptime}'], start_new_session=True)\n"
            "os.write(int(sys.argv[1]), str(p.pid).encode())\n"
            "os.kill(os.getpid(), 11)\n")
    proc = subprocess.Popen(jail.command([sys.executable, "-c", code, str(w)]), pass_fds=(w,),
                            stderr=subprocess.PIPE)
    os.close(w)
    assert os.read(r, 100).isdigit()                            # the pipe reached the worker
    assert proc.wait(timeout=60) == 128 + signal.SIGSEGV
    assert os.read(r, 100) == b""                               # and closed when it ended
    stray = [p for p in Path("/proc").glob("[0-9]*/cmdline")
             if _read(p).startswith(f"sleep\x00{naptime}\x00")]
    assert stray == [], "the worker's sleeping child outlived the jail"


def _read(p):
    try:
        return p.read_text()
    except OSError:
        return ""


@needs_util_linux
def test_a_jail_that_cannot_be_built_says_why():
    jail = Containment("namespaces", 65534, 65534, "nobody").jail(
        [Bind("/nonexistent-evokernel-source", "/tmp/x")])
    proc = _run(jail, [sys.executable, "-c", "print('ran')"])
    assert proc.returncode == JAIL_FAILED and "ran" not in proc.stdout
    assert "could not build the jail" in proc.stderr and "nonexistent-evokernel" in proc.stderr


UNDO = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def tried(rc):
    return "done" if rc == 0 else os.strerror(ctypes.get_errno())
out = {"remount / rw": tried(libc.mount(None, b"/", None, ctypes.c_ulong(32 | 4096), None)),
       "unmount the home's cover": tried(libc.umount2(sys.argv[1].encode(), 2)),
       "unmount /tmp": tried(libc.umount2(b"/tmp", 2))}
try:
    open(os.path.join(sys.argv[2], "escaped"), "x").close()
    out["write"] = "done"
except OSError as e:
    out["write"] = e.strerror
print(out)
"""


@needs_util_linux
@pytest.mark.parametrize("user", ["nobody", "evokernel-no-such-user"])
def test_a_jailed_process_cannot_undo_its_jail(tmp_path, user):
    """Not even from a user namespace of its own (``unshare -rm``), where it holds every
    capability: the mounts it inherited are locked (user_namespaces(7)). With a sandbox user
    and without one (a nested user namespace)."""
    from evokernel.sandbox.support import probe
    tmp_path.chmod(0o755)
    c = probe(user, str(tmp_path))
    assert c.mode == "namespaces", c.describe()
    home = os.path.expanduser("~")
    target = Path(__file__).resolve().parent
    for argv in ([sys.executable, "-c", UNDO, home, str(target)],
                 [c.unshare, "-rm", sys.executable, "-c", UNDO, home, str(target)]):
        proc = _run(c.jail(cwd="/"), argv)
        assert proc.returncode == 0, proc.stderr
        assert "done" not in proc.stdout, proc.stdout
    assert not (target / "escaped").exists()
