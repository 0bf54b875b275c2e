"""Which containment steps this machine allows (``probe``), said once at the start of a run.

``probe`` tries the strongest jail first, with a trial process that reports what it can do
(its user, the network, writing outside its folder, seeing other processes, importing
evokernel and finding torch and the cache), and steps down when the trial fails or can do too
much: "namespaces" (with a user switch when evokernel is root and ``sandbox_user`` exists, else
a user namespace), then "user" (setpriv alone), then "none" (evokernel.sandbox.jail). Each step
that could not be had is a plain sentence in ``Containment.missing``. ``containment_for`` logs the
outcome once per process and raises SandboxError when ``require_sandbox`` is set and something
is missing.
"""
from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from loguru import logger

from evokernel.errors import SandboxError
from evokernel.sandbox.jail import PRIVATE_DIRS, Bind, Jail
from evokernel.sandbox.mounts import under

if TYPE_CHECKING:
    from evokernel.config import EvalConfig

#: What the trial process checks, printed as one JSON line (see ``probe``).
_TRIAL = r"""
import importlib.util, json, os, socket, sys
scratch, cache, blocked = sys.argv[1], sys.argv[2], sys.argv[3:]
out = {"uid": os.getuid(), "pids": len([p for p in os.listdir("/proc") if p.isdigit()])}
try:
    socket.create_connection(("127.0.0.1", 9), timeout=2).close()
    out["network"] = "connected"
except OSError as e:
    out["network"] = "refused" if isinstance(e, ConnectionRefusedError) else "unreachable"
out["written"] = [p for p in blocked + [scratch] if p]
for p in list(out["written"]):
    try:
        with open(os.path.join(p, ".evokernel-sandbox-trial"), "x") as f:
            f.write("trial")
    except OSError:
        out["written"].remove(p)
import evokernel.sandbox
out["torch"] = importlib.util.find_spec("torch") is not None
out["cache"] = os.access(cache, os.R_OK | os.X_OK)
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Containment:
    """How candidate code is contained on this machine (what ``probe`` found).

    mode: "namespaces", "user" or "none" (evokernel.sandbox.jail).
    uid, gid, user: the unprivileged account workers run as (None when they keep evokernel's).
    missing: one plain sentence per containment step that is not in place; empty when
        everything is.
    """

    mode: str
    uid: int | None
    gid: int | None
    user: str
    missing: tuple[str, ...] = ()
    unshare: str = "unshare"
    setpriv: str = "setpriv"

    @property
    def contained(self) -> bool:
        return not self.missing

    def jail(self, binds: Sequence[Bind] = (), *, cwd: str = "/") -> Jail:
        """A jail of this strength showing ``binds`` and, read-only, the Python, evokernel,
        CUDA and tool folders that lie inside hidden or private folders (``toolchain_paths``;
        never one of those folders as a whole)."""
        hidden = tuple(d for d in home_dirs() if not under(d, PRIVATE_DIRS))
        covered = (*hidden, *PRIVATE_DIRS)
        needed = [p for p in toolchain_paths() if under(p, covered) and p not in covered]
        exposed = tuple(Bind(p, p) for p in _outermost(needed))
        inner = os.getuid() or 65534, os.getgid() or 65534
        return Jail(mode=self.mode, uid=self.uid, gid=self.gid, inner_uid=inner[0],
                    inner_gid=inner[1], binds=(*exposed, *binds), hidden=hidden,
                    cwd=cwd, unshare=self.unshare, setpriv=self.setpriv)

    def describe(self) -> str:
        """One paragraph for the log: what is contained, and what is not."""
        who = (f"as {self.user} (uid {self.uid})" if self.uid is not None
               else "in a user namespace without capabilities")
        what = {"namespaces": f"Candidate code runs {who}, with no network, no view of other "
                              "processes, and read-only files except its own folder",
                "user": f"Candidate code runs {who}, in the machine's network and file system",
                "none": "Candidate code runs as evokernel's own user, with its environment "
                        "scrubbed of keys"}[self.mode]
        if not self.missing:
            return what + "."
        return (f"{what}. NOT contained: " + "; ".join(self.missing)
                + ". (--require-sandbox makes this an error.)")


def home_dirs() -> list[str]:
    """The folders hidden from workers: this user's home (``$HOME`` and the password file's)."""
    homes = {os.path.expanduser("~")}
    try:
        homes.add(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    system = {"/", "/usr", "/etc", "/bin", "/lib", "/opt", "/var", "/nonexistent"}
    return sorted(os.path.realpath(h) for h in homes
                  if h and os.path.isdir(h) and os.path.realpath(h) not in system)


def toolchain_paths(env: dict[str, str] | None = None) -> list[str]:
    """Folders a worker must read: Python (prefixes, ``sys.path`` but its first entry, the
    script's folder or the working directory, ``PYTHONPATH``), the folders of the evokernel,
    evokernel.operators and evokernel.problems packages (not the project around them, which
    may hold other files), ``PATH`` (ninja, the host compiler), CUDA_HOME and the compilers
    named by CXX and CC. Existing absolute paths, as given and resolved."""
    import importlib.util
    env = dict(os.environ if env is None else env)
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(sys.executable),
             os.path.dirname(os.path.realpath(sys.executable)), *sys.path[1:],
             *env.get("PYTHONPATH", "").split(os.pathsep), *env.get("PATH", "").split(os.pathsep),
             env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), "/usr/local/cuda"]
    paths += [env[k] for k in ("CXX", "CC") if env.get(k, "").startswith("/")]
    for name in ("evokernel", "evokernel.operators", "evokernel.problems"):
        spec = importlib.util.find_spec(name)
        paths += list(spec.submodule_search_locations or []) if spec else []
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        paths.append(str(Path(nvcc).resolve().parents[1]))
    found = {os.path.realpath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}
    found |= {os.path.abspath(p) for p in paths if p and os.path.isabs(p) and os.path.exists(p)}
    return sorted(found)


def _outermost(paths: Sequence[str]) -> list[str]:
    """``paths`` without those inside another one of them."""
    keep: list[str] = []
    for p in sorted(set(paths), key=len):
        if not under(p, keep):
            keep.append(p)
    return keep


#: Linux's overflow user and group id, "nobody" (/proc/sys/kernel/overflowuid): used for the
#: default sandbox_user where the password file has no "nobody" (minimal images).
NOBODY_ID = 65534


def _account(user: str) -> tuple[int, int, str] | None:
    """(uid, gid, name) of ``user`` (a name or a number; a number need not be in the password
    file, nor "nobody", which is then NOBODY_ID), or None when there is no such user."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        return entry.pw_uid, entry.pw_gid, entry.pw_name
    except KeyError:
        if user == "nobody":
            return NOBODY_ID, NOBODY_ID, user
        return (int(user), int(user), user) if user.isdigit() else None


def _trial(c: Containment, cache_dir: Path) -> tuple[bool, str]:
    """Run the trial process in ``c``'s jail. Returns (it behaved as contained, why not)."""
    with tempfile.TemporaryDirectory(prefix="evokernel-sandbox-trial-") as scratch:
        if c.uid is not None and c.gid is not None:
            os.chown(scratch, c.uid, c.gid)
        jail = c.jail([Bind(str(cache_dir), str(cache_dir)), Bind(scratch, scratch, True)],
                      cwd=scratch)
        argv = jail.command([sys.executable, "-c", _TRIAL, scratch, str(cache_dir),
                             str(cache_dir)])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                  cwd=scratch, env=_trial_env(), stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            return False, str(e)
        finally:
            (cache_dir / ".evokernel-sandbox-trial").unlink(missing_ok=True)
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False, proc.stderr.strip()[-300:] or f"exit status {proc.returncode}, no answer"
    bad = [what for what, fails in (
        (f"ran as uid {got['uid']}", c.uid is not None and got["uid"] != c.uid),
        ("reached the network", c.mode == "namespaces" and got["network"] != "unreachable"),
        (f"saw {got['pids']} processes", c.mode == "namespaces" and got["pids"] > 3),
        (f"wrote {[p for p in got['written'] if p != scratch]}", got["written"] != [scratch]),
        ("found no torch", not got["torch"]),
        (f"could not read the build cache {cache_dir} (mode {cache_dir.stat().st_mode & 0o7777:o}"
         "; `chmod a+rX` it, or set EVOKERNEL_CACHE)", not got["cache"]))
        if fails]
    return not bad, "; ".join(bad)


def _trial_env() -> dict[str, str]:
    from evokernel.sandbox.environ import worker_env
    return dict(worker_env(), PYTHONDONTWRITEBYTECODE="1", HOME="/tmp")


@functools.lru_cache(maxsize=8)
def probe(user: str = "nobody", cache_dir: str | None = None) -> Containment:
    """The strongest containment this machine allows for workers running as ``user`` (used only
    when evokernel is root) and reading ``cache_dir``; cached per process.
    Returns: Containment (``missing`` says what is not contained)."""
    from evokernel.config import default_cache_dir
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    if not sys.platform.startswith("linux"):
        return Containment("none", None, None, "", ("not Linux: no namespaces, no user switch",))
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    account = _account(user) if os.geteuid() == 0 else None
    missing: list[str] = []
    if os.geteuid() == 0 and account is None:
        missing.append(f"no unprivileged user: sandbox_user {user!r} does not exist here "
                       "(create one, e.g. `useradd --system --no-create-home evokernel-sandbox`"
                       ", or name another)")
    if not unshare or not setpriv:
        missing.append("util-linux `unshare` and `setpriv` are not installed: no namespaces")
        return Containment("none", None, None, "", tuple(missing))
    uid, gid, name = account or (None, None, pwd.getpwuid(os.getuid()).pw_name)
    first = Containment("namespaces", uid, gid, name, tuple(missing), unshare, setpriv)
    ok, why = _trial(first, cache)
    if ok:
        return first
    missing.append(f"no namespaces (a trial worker in them failed: {why}): the network stays "
                   "open and files are protected only by their permissions")
    if uid is not None:
        second = replace(first, mode="user", missing=tuple(missing))
        ok, why2 = _trial(second, cache)
        if ok:
            return second
        missing.append(f"no user switch (a trial worker as {name} failed: {why2})")
    return Containment("none", None, None, "", tuple(missing))


@functools.lru_cache(maxsize=8)
def _announce(text: str, warn: bool) -> None:
    (logger.warning if warn else logger.info)("sandbox: {}", text)


def containment_for(config: "EvalConfig") -> Containment | None:
    """The containment a run's workers get: probed, said once per process, None when the
    config turns the sandbox off.
    Raises: SandboxError when ``config.require_sandbox`` and a step is missing."""
    if not config.sandbox:
        _announce("turned off by the configuration (EvalConfig.sandbox=False): candidate code "
                  "runs as evokernel's own user, with network and file access", True)
        return None
    found = probe(config.sandbox_user, str(config.cache_path))
    if config.require_sandbox and not found.contained:
        raise SandboxError("--require-sandbox: candidate code cannot be fully contained on "
                           "this machine: " + "; ".join(found.missing))
    _announce(found.describe(), not found.contained)
    return found
