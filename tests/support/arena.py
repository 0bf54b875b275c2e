"""The scene of the sandbox tests: a run store, a home and a build cache in a visible,
root-writable folder (not /tmp, which a jail covers anyway), a listener on 127.0.0.1, a fresh
canary key, and the key holder (tests.support.key_holder) started with that key in its
environment."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Iterator

from tests.support.runstores import build_crossover_run

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def arena() -> Iterator[dict[str, Any]]:
    base = Path(tempfile.mkdtemp(prefix=".sandbox-test-", dir=ROOT))
    base.chmod(0o755)
    run_dir, home, cache = base / "run", base / "home", base / "cache"
    build_crossover_run(run_dir)
    home.mkdir()
    (home / ".netrc").write_text("machine example.org password hunter2\n")
    cache.mkdir()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    try:
        yield {"run_dir": str(run_dir), "home": str(home), "cache_dir": str(cache),
               "port": listener.getsockname()[1], "canary": f"sk-canary-{uuid.uuid4().hex}",
               "listener": listener, "base": base}
    finally:
        listener.close()
        shutil.rmtree(base, ignore_errors=True)


def snapshot(*dirs: str) -> dict[str, str]:
    """path -> SHA-256 of every file under ``dirs``."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in dirs for p in sorted(Path(d).rglob("*")) if p.is_file()}


def connections(listener: socket.socket) -> int:
    """How many connections the (non-blocking) listener has waiting."""
    got = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return got
        conn.close()
        got += 1


def hold_key(scene: dict[str, Any], stage: str, contained: bool,
             timeout_s: float = 240) -> dict[str, Any]:
    """Run the key holder for ``stage`` ("build", "eval" or "gpu") with the canary as its
    OPENAI_API_KEY and the scene's home as its HOME; its ``key-holder`` JSON line, parsed.

    A key holder still running after ``timeout_s`` (below the GPU stage's pytest-timeout of
    300 s, so this message wins) is killed with every process of its session, and the test
    fails with what it and its workers had written (twice on the H200 the contained GPU case
    ran past the stage's limit and left nothing to read; the third time, 2026-12-04, the
    idle times of its vmstat pointed at the shared-GPU guard's waits: see key_holder._gpu)."""
    spec = {k: scene[k] for k in ("run_dir", "home", "cache_dir", "port", "canary")}
    spec.update(stage=stage, contained=contained, root=str(ROOT))
    env = dict(os.environ, OPENAI_API_KEY=scene["canary"], HOME=scene["home"],
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.key_holder", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the key holder ({stage}, contained={contained}) did not finish "
                             f"in {timeout_s:g} s\n--- its stdout\n{out[-3000:]}\n--- its stderr\n"
                             f"{err[-3000:]}\n{_worker_logs(Path(scene['cache_dir']))}") from None
    lines = [ln for ln in out.splitlines() if ln.startswith("key-holder ")]
    assert proc.returncode == 0 and lines, out[-3000:] + err[-3000:]
    return json.loads(lines[-1][len("key-holder "):])


def _worker_logs(cache: Path, tail: int = 2000) -> str:
    """The last ``tail`` characters of every log under the build cache (the workers')."""
    logs = sorted(p for p in cache.rglob("*.log") if p.is_file()) if cache.is_dir() else []
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-tail:]}" for p in logs) \
        or f"(no log under {cache})"
