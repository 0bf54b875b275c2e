"""What the probe finds, what a run is told at its start, and what --require-sandbox refuses;
which folders a jail shows; the config's sandbox settings."""
import os

import pytest
from loguru import logger

from evokernel.config import EvalConfig
from evokernel.errors import ConfigError, SandboxError
from evokernel.sandbox import support
from evokernel.sandbox.jail import Bind
from evokernel.sandbox.mounts import mount_points, under
from evokernel.sandbox.support import Containment, containment_for, probe
from tests.support.jails import needs_util_linux


@pytest.fixture
def logged():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    support._announce.cache_clear()
    yield lines
    logger.remove(sink)


def test_config_sandbox_settings():
    assert EvalConfig().sandbox and EvalConfig().sandbox_user == "nobody"
    assert EvalConfig(sandbox_user=65534).sandbox_user == "65534"
    for user in ("root", "0", "", "  ", 0, None, True):
        with pytest.raises(ConfigError, match="sandbox_user"):
            EvalConfig(sandbox_user=user)
    with pytest.raises(ConfigError, match="require_sandbox"):
        EvalConfig(sandbox=False, require_sandbox=True)


def test_the_cli_flag():
    from evokernel.cli.main import build_parser
    for cmd in (["run", "softmax"], ["check", "softmax", "k.py"]):
        assert build_parser().parse_args(cmd + ["--require-sandbox"]).require_sandbox
        assert not build_parser().parse_args(cmd).require_sandbox


@needs_util_linux
@pytest.mark.skipif(os.geteuid() != 0, reason="the user switch is for a root evokernel")
def test_as_root_workers_become_nobody_without_network(tmp_path, logged):
    cfg = EvalConfig(cache_dir=str(tmp_path), require_sandbox=True)
    tmp_path.chmod(0o755)
    c = containment_for(cfg)
    assert c.mode == "namespaces" and c.uid == 65534 and c.contained
    containment_for(cfg)
    said = [m for m in logged if m.startswith("sandbox:")]
    assert len(said) == 1 and "as nobody (uid 65534), with no network" in said[0]


@needs_util_linux
@pytest.mark.skipif(os.geteuid() != 0, reason="the user switch is for a root evokernel")
def test_a_missing_user_is_said_once_or_refused(tmp_path, logged):
    tmp_path.chmod(0o755)
    cfg = EvalConfig(cache_dir=str(tmp_path), sandbox_user="evokernel-no-such-user")
    c = containment_for(cfg)
    assert not c.contained and c.uid is None and c.mode == "namespaces"   # a user namespace
    containment_for(cfg)
    said = [m for m in logged if "NOT contained" in m]
    assert len(said) == 1 and "'evokernel-no-such-user' does not exist" in said[0]
    with pytest.raises(SandboxError, match="evokernel-no-such-user"):
        containment_for(EvalConfig(cache_dir=str(tmp_path), require_sandbox=True,
                                   sandbox_user="evokernel-no-such-user"))


def test_without_namespaces_the_run_is_told_and_require_refuses(tmp_path, monkeypatch, logged):
    """A machine whose unshare fails (a container without the rights): the probe steps down
    to the user switch, then to nothing, and says why."""
    monkeypatch.setattr(support, "_trial", lambda c, cache: (False, f"{c.mode} refused"))
    monkeypatch.setattr(support.shutil, "which", lambda name, **kw: f"/usr/bin/{name}")
    support.probe.cache_clear()
    try:
        c = probe("nobody", str(tmp_path))
        assert c.mode == "none" and not c.contained
        text = " ".join(c.missing)
        assert "no namespaces (a trial worker in them failed: namespaces refused)" in text
        if os.geteuid() == 0:
            assert "no user switch" in text and "user refused" in text
        with pytest.raises(SandboxError, match="no namespaces"):
            containment_for(EvalConfig(cache_dir=str(tmp_path), require_sandbox=True))
        containment_for(EvalConfig(cache_dir=str(tmp_path)))
        assert any("NOT contained" in m and "no namespaces" in m for m in logged)
    finally:
        support.probe.cache_clear()


def test_accounts(monkeypatch):
    def unknown(_):
        raise KeyError("no such user")
    monkeypatch.setattr(support.pwd, "getpwnam", unknown)
    monkeypatch.setattr(support.pwd, "getpwuid", unknown)
    assert support._account("nobody") == (65534, 65534, "nobody")     # a minimal image
    assert support._account("4242") == (4242, 4242, "4242")
    assert support._account("evokernel-sandbox") is None


def test_no_util_linux(tmp_path, monkeypatch):
    monkeypatch.setattr(support.shutil, "which", lambda name, **kw: None)
    support.probe.cache_clear()
    try:
        c = probe("nobody", str(tmp_path))
    finally:
        support.probe.cache_clear()
    assert c.mode == "none" and any("`unshare` and `setpriv` are not installed" in m
                                    for m in c.missing)


def test_turned_off_is_said(logged):
    assert containment_for(EvalConfig(sandbox=False)) is None
    assert any("turned off" in m for m in logged)


def test_a_jail_shows_the_toolchain_inside_covered_folders_only(monkeypatch):
    monkeypatch.setattr(support, "home_dirs", lambda: ["/home/u"])
    monkeypatch.setattr(support, "toolchain_paths", lambda: [
        "/usr/lib/python3", "/home/u", "/home/u/.venv", "/home/u/.venv/lib", "/tmp",
        "/tmp/site", "/tmpx/site"])
    jail = Containment("namespaces", 65534, 65534, "nobody").jail(
        [Bind("/home/u/cache", "/home/u/cache", True)], cwd="/home/u/cache")
    assert jail.hidden == ("/home/u",)
    assert [b.source for b in jail.binds] == ["/tmp/site", "/home/u/.venv", "/home/u/cache"]
    assert jail.binds[-1].writable and not any(b.writable for b in jail.binds[:-1])


def test_toolchain_paths_cover_python_evokernel_and_cuda(monkeypatch):
    import sys
    import evokernel
    pkg = os.path.dirname(os.path.realpath(evokernel.__file__))
    monkeypatch.setattr(sys, "path", [os.path.dirname(pkg)] + [     # the first: the script's
        p for p in sys.path if "python3" in p and not p.startswith(os.path.dirname(pkg))])
    paths = support.toolchain_paths({"PATH": "/usr/bin", "PYTHONPATH": "/nonexistent:rel",
                                     "CXX": "/usr/bin/c++"})
    assert os.path.realpath(sys.base_prefix) in paths and pkg in paths
    assert os.path.dirname(pkg) not in paths                  # not the project around it
    assert "/usr/bin" in paths and "/usr/bin/c++" in paths
    assert "/nonexistent" not in paths and "rel" not in paths


def test_mountinfo_parsing(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "30 27 0:27 / /mnt/with\\040space rw - tmpfs tmpfs rw\n"
        "22 27 0:21 / /proc rw - proc proc rw\n"
        "31 22 0:28 / /proc/sys/fs/binfmt_misc rw - binfmt_misc b rw\n"
        "32 27 0:29 / /mnt/with\\040space rw - tmpfs tmpfs rw\n")
    assert mount_points(str(info)) == ["/", "/proc", "/mnt/with space",      # parents first
                                       "/proc/sys/fs/binfmt_misc"]
    assert under("/tmp/x", ["/tmp"]) and under("/tmp", ["/tmp/"]) and not under("/tmpx", ["/tmp"])
