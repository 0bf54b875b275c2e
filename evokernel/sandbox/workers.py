"""The jail of each kind of worker, and how its output gets out.

A build worker (``BuildJail``) sees the build cache read-only and writes only its candidate's
folder ``<cache>/candidates/<key>``; its extensions are built in ``<folder>/builds/<key>`` and
``evokernel.build.publish`` (run by the trusted parent after the worker ended) moves each
complete one into ``<cache>/builds``, so no worker can change a build already in the cache.

A GPU worker (``GpuWorkerJail``) sees the build cache read-only and writes only a scratch
folder of its own, made at each spawn and removed when it ends. It is told to use
``<scratch>/cache`` as its cache: ``builds`` there links to the real (read-only) builds, and the
folders it writes at set-up, before any candidate runs (the device peaks and the torch.compile
baselines: evokernel.timing.floor.peaks_path, evokernel.timing.baselines.baseline_path), are
copies. ``harvest``, called when the worker reports ready and before it is sent a candidate,
copies what set-up measured into the real cache; nothing a candidate writes later gets out.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Sequence

from loguru import logger

from evokernel.sandbox.jail import Bind
from evokernel.sandbox.support import Containment

#: Cache folders a GPU worker writes during set-up (see the module docstring).
SETUP_DIRS = ("peaks", "baselines")
_HARVEST_NAME = re.compile(r"^[\w.\-]{1,200}\.json$")
_HARVEST_MAX_BYTES = 1 << 20


def give(path: Path, uid: int, gid: int) -> None:
    """Hand ``path`` and everything under it to ``uid``/``gid`` (symbolic links themselves,
    never what they point to)."""
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def reclaim(path: Path) -> None:
    """Take ``path`` and everything under it back for this process's user, and clear the
    set-user-ID, set-group-ID and world-writable bits a worker may have set."""
    uid, gid = os.getuid(), os.getgid()
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            _take(Path(root) / name, uid, gid)
    _take(Path(path), uid, gid)


def _take(p: Path, uid: int, gid: int) -> None:
    st = p.lstat()
    if stat.S_ISLNK(st.st_mode):
        os.chown(p, uid, gid, follow_symlinks=False)
        return
    os.chown(p, uid, gid)
    mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID | stat.S_IWOTH)
    os.chmod(p, mode)


def _worker_env(env: dict[str, str], home: str, user: str) -> dict[str, str]:
    env = {k: v for k, v in env.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    env.update(HOME=home, PYTHONDONTWRITEBYTECODE="1", TORCH_EXTENSIONS_DIR=f"{home}/.torch_ext")
    if user:
        env.update(USER=user, LOGNAME=user)
    return env


class BuildJail:
    """The jail of one build worker process (see the module docstring).

    Args: containment: what evokernel.sandbox.support.probe found; cache_dir: the build cache.
    """

    def __init__(self, containment: Containment, cache_dir: Path):
        self.containment = containment
        self.cache_dir = Path(cache_dir)

    def prepare(self, work: Path) -> None:
        """Give the candidate's folder to the worker's user before it starts."""
        c = self.containment
        if c.uid is not None and c.gid is not None:
            give(work, c.uid, c.gid)

    def finish(self, work: Path) -> None:
        """Take the folder back once the worker and everything it started have ended."""
        if self.containment.uid is not None:
            reclaim(work)

    def command(self, argv: Sequence[str], work: Path, env: dict[str, str]
                ) -> tuple[list[str], dict[str, str]]:
        """(command line, environment) that run ``argv`` for the build in ``work``."""
        jail = self.containment.jail([Bind(str(self.cache_dir), str(self.cache_dir)),
                                      Bind(str(work), str(work), writable=True)], cwd=str(work))
        home = "/tmp" if jail.mode == "namespaces" else str(work)
        return jail.command(argv), _worker_env(env, home, self.containment.user)


class GpuWorkerJail:
    """The jail of a GPU worker, one scratch folder per spawn (see the module docstring).

    Args: containment: what evokernel.sandbox.support.probe found; cache_dir: the build cache
    (also where the set-up measurements are kept); setup_dirs: cache folders set-up may write.
    """

    def __init__(self, containment: Containment, cache_dir: Path,
                 setup_dirs: Sequence[str] = SETUP_DIRS):
        self.containment = containment
        self.cache_dir = Path(cache_dir).resolve()
        self.setup_dirs = tuple(setup_dirs)
        self.scratch: Path | None = None

    def start(self, argv: Sequence[str], env: dict[str, str], setup: dict[str, Any]
              ) -> tuple[list[str], dict[str, str], dict[str, Any], str]:
        """Make a fresh scratch folder for a spawn. Returns (command line, environment, setup
        message pointing the worker at the scratch cache, working directory)."""
        self.cleanup()
        self.scratch = Path(tempfile.mkdtemp(prefix="evokernel-gpu-worker-"))
        cache = self.scratch / "cache"
        cache.mkdir()
        (self.cache_dir / "builds").mkdir(parents=True, exist_ok=True)
        (cache / "builds").symlink_to(self.cache_dir / "builds")
        for d in self.setup_dirs:
            if (self.cache_dir / d).is_dir():
                shutil.copytree(self.cache_dir / d, cache / d, symlinks=True)
            else:
                (cache / d).mkdir()
        (self.scratch / "home").mkdir()
        c = self.containment
        if c.uid is not None and c.gid is not None:
            give(self.scratch, c.uid, c.gid)
        msg = copy.deepcopy(setup)
        if isinstance(msg.get("config"), dict):
            msg["config"].setdefault("evaluation", {})["cache_dir"] = str(cache)
        jail = c.jail([Bind(str(self.cache_dir), str(self.cache_dir)),
                       Bind(str(self.scratch), str(self.scratch), writable=True)],
                      cwd=str(self.scratch))
        env = _worker_env(env, str(self.scratch / "home"), c.user)
        return jail.command(argv), env, msg, str(self.scratch)

    def harvest(self) -> list[Path]:
        """Copy what the worker's set-up wrote (new or changed JSON files, at most 1 MiB each)
        into the real cache. Call it only before the worker runs any candidate.
        Returns: the cache files written."""
        if self.scratch is None:
            return []
        written = []
        for d in self.setup_dirs:
            src_dir, dst_dir = self.scratch / "cache" / d, self.cache_dir / d
            if not src_dir.is_dir() or src_dir.is_symlink():
                continue
            for src in sorted(src_dir.iterdir()):
                data = _setup_file(src)
                dst = dst_dir / src.name
                if data is None or (dst.is_file() and dst.read_bytes() == data):
                    continue
                dst_dir.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=dst_dir, delete=False) as f:
                    f.write(data)
                os.replace(f.name, dst)
                written.append(dst)
        if written:
            logger.debug("GPU worker set-up measured {}", [str(p) for p in written])
        return written

    def cleanup(self) -> None:
        """Remove the scratch folder of the last spawn (call it once the worker is dead)."""
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _setup_file(path: Path) -> bytes | None:
    """The bytes of a set-up measurement file, or None when it is not a plain JSON object file
    of a sane name and size."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > _HARVEST_MAX_BYTES \
                or not _HARVEST_NAME.match(path.name):
            return None
        data = path.read_bytes()
        return data if isinstance(json.loads(data), dict) else None
    except (OSError, ValueError):
        return None
