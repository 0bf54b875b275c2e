"""A worker script (``python -c SCRIPT IN_FD OUT_FD``, as evokernel.engine.handle starts the GPU
worker) with its two pipes, for the tests that talk to evokernel.engine.worker's loop
directly."""
from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_script(script: str, **popen: object) -> tuple[subprocess.Popen, Connection, Connection]:
    """Start ``script`` with the worker's pipe arguments, a bare environment and the repository
    on PYTHONPATH (``popen``: more Popen arguments, e.g. stdout).
    Returns: (the process, the connection to send on, the connection to receive on)."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", script, str(to_r), str(from_w)], cwd=ROOT,
                            pass_fds=(to_r, from_w),
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}, **popen)
    os.close(to_r)
    os.close(from_w)
    return proc, Connection(to_w, readable=False), Connection(from_r, writable=False)
