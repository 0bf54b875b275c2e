"""Moving a build worker's finished extensions into the build cache: the trusted side.

A build worker may write only its candidate's folder ``<cache>/candidates/<key>``
(evokernel.sandbox.workers): its ``result.json`` and, for each extension it had to compile,
``<folder>/builds/<key>`` (evokernel.build.cache). Once the worker and everything it started
have ended, ``publish`` reads ``result.json`` as untrusted input (its fields checked, its build
folders named only as the cache's or the folder's own ``builds/<64 hex digits>``), moves each
complete build folder (a marker naming its own key; only plain files and folders inside) into
``<cache>/builds/<key>`` unless a complete one is already there, and rewrites ``result.json``
with the cache's paths. A build already in the cache is never replaced, so a candidate cannot
change the binary another candidate (or a seed kernel) loads.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Any

from evokernel.build.cache import MARKER, exclusive_lock
from evokernel.jsonfile import write_json_atomic

KEY = re.compile(r"^[0-9a-f]{64}$")
_MAX_FLAGS, _MAX_FLAG_CHARS = 50, 500


def read_result(path: Path) -> dict[str, Any] | None:
    """A build's ``result.json`` with its fields checked (ok, cache_hit, trimmed: booleans;
    build_dirs, flags: lists of strings, flags cut to 50 of 500 characters; resources: a list of
    dicts, else []), or None when it is missing or malformed."""
    try:
        r = json.loads(Path(path).read_text(encoding="utf-8"))
        out = {k: r[k] for k in ("ok", "cache_hit", "build_dirs", "flags")}
        out["trimmed"] = r.get("trimmed", False)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(out[k], bool) for k in ("ok", "cache_hit", "trimmed")):
        return None
    if not all(isinstance(out[k], list) and all(isinstance(v, str) for v in out[k])
               for k in ("build_dirs", "flags")):
        return None
    out["flags"] = [f[:_MAX_FLAG_CHARS] for f in out["flags"][:_MAX_FLAGS]]
    # The ptxas report (evokernel.build.ptxas): only shown to the LLM, so a forged one misleads
    # a prompt and nothing else; kept when it has the report's shape, at most 200 kernels.
    resources = r.get("resources", [])
    out["resources"] = (resources[:200] if isinstance(resources, list)
                        and all(isinstance(x, dict) for x in resources) else [])
    return out


def publish(work: Path, cache_dir: Path) -> dict[str, Any] | None:
    """Publish the builds of the finished build worker of ``work`` (see the module docstring).

    ``work`` and ``cache_dir`` are compared with the paths in result.json as written (the
    Builder passes resolved ones).
    Returns: its result with build folders in the cache (a build that fails a check turns it
    into a failure, with a "publish: ..." flag); None when result.json is missing or malformed.
    Raises: OSError when the cache cannot be written.
    """
    r = read_result(Path(work) / "result.json")
    if r is None:
        return None
    staged, builds = Path(work) / "builds", Path(cache_dir) / "builds"
    dirs: list[str] = []
    for d in r["build_dirs"]:
        p = Path(d)
        if not KEY.match(p.name) or p.parent not in (staged, builds):
            return dict(r, ok=False, build_dirs=[], flags=r["flags"] + [
                f"publish: the build named a folder outside its own and the cache's: {d[:300]}"])
        if p.parent == staged and r["ok"]:
            why = _check(p)
            if why:
                return dict(r, ok=False, build_dirs=[], flags=r["flags"] + [f"publish: {why}"])
            p = _move(p, builds / p.name)
        dirs.append(str(p))
    r["build_dirs"] = dirs
    write_json_atomic(Path(work) / "result.json", r, indent=1)
    return r


def publish_finished(work: Path, cache_dir: Path) -> dict[str, Any] | None:
    """``publish`` the build of ``work`` if its worker finished it well (its result.json says
    ok), as its Builder was stopped (evokernel.build.inflight): a finished build stays in the
    cache, and one that was killed has no result.json, so nothing of it is published.
    Returns: what ``publish`` returns, None when nothing was published. Never raises."""
    r = read_result(Path(work) / "result.json")
    if r is None or not r["ok"]:
        return None
    try:
        return publish(work, cache_dir)
    except OSError:
        return None


def _own_marker(folder: Path) -> bool:
    """``folder``'s marker (MARKER) is readable JSON naming ``folder``'s own key."""
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(marker, dict) and marker.get("key") == folder.name


def complete_build(folder: Path) -> bool:
    """A finished build folder: its marker (MARKER) names its own key and the binary that was
    loaded is there (a ``*.so`` extension, or an NVRTC ``*.cubin``). A partial build, a deleted
    binary or a marker copied from another folder is not complete, and is built again."""
    return _own_marker(folder) and (any(folder.glob("*.so")) or any(folder.glob("*.cubin")))


def _check(folder: Path) -> str | None:
    """Why a staged build folder may not enter the cache, or None."""
    if folder.parent.is_symlink() or not stat.S_ISDIR(folder.lstat().st_mode):
        return f"{folder} is not a folder of its own"
    if not _own_marker(folder) or (folder / MARKER).is_symlink():
        return f"{folder} has no marker of its own key: the build did not finish"
    for root, subdirs, files in os.walk(folder):
        for name in subdirs + files:
            mode = (Path(root) / name).lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return f"{Path(root) / name} is not a plain file or folder"
    return None


def _move(src: Path, dst: Path) -> Path:
    """Move the checked build folder ``src`` to ``dst`` unless a complete build is there
    (``complete_build``: one whose binary was deleted is replaced)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(dst.parent / f"{dst.name}.lock"):
        if complete_build(dst):
            shutil.rmtree(src)
            return dst
        if os.path.lexists(dst):                  # a partial build from before staging
            shutil.rmtree(dst) if dst.is_dir() and not dst.is_symlink() else dst.unlink()
        shutil.move(str(src), str(dst))
    return dst
