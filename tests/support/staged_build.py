"""A finished build left in a build worker's folder, as the build process leaves it before the
driver publishes it (evokernel.build.publish): for tests of what is published and when."""
from __future__ import annotations

import json
from pathlib import Path

from evokernel.build.cache import MARKER


def stage_build(work: Path, key: str, ok: bool = True) -> Path:
    """Stage extension ``key`` (its marker and a stand-in ``ext.so``) under ``work/builds`` and
    the ``result.json`` naming it (``ok``: whether the build says it succeeded).
    Returns: the extension's folder."""
    out = work / "builds" / key
    out.mkdir(parents=True)
    (out / MARKER).write_text(json.dumps({"key": key}))
    (out / "ext.so").write_bytes(b"built")
    (work / "result.json").write_text(json.dumps(
        {"ok": ok, "cache_hit": False, "build_dirs": [str(out)], "flags": []}))
    return out
