"""A Dask cluster of separate processes, as on many hosts (``dask scheduler`` and ``dask
worker`` command lines), so that a test can kill the scheduler: one GPU worker (GPU=1, with
CUDA_VISIBLE_DEVICES=0 and no GPU behind it: its slot runs tests.support.fake_gpu_worker) and
one build worker (build=2)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

ROOT = str(Path(__file__).resolve().parents[2])


class ProcessCluster:
    """Started by ``process_cluster``; ``address`` is the scheduler's, ``kill_scheduler()``
    SIGKILLs it."""

    def __init__(self, folder: Path, env: dict[str, str]):
        self.folder, self.env = folder, env
        self.file = folder / "scheduler.json"
        self.procs: list[subprocess.Popen] = []
        self.scheduler = self._spawn("distributed.cli.dask_scheduler", "--port", "0",
                                     "--host", "127.0.0.1")
        deadline = time.monotonic() + 60
        while not self.file.is_file():
            if time.monotonic() > deadline or self.scheduler.poll() is not None:
                raise RuntimeError("the test's dask scheduler did not start")
            time.sleep(0.1)
        time.sleep(0.2)                              # the file is written whole
        self.address = json.loads(self.file.read_text())["address"]
        self._spawn("distributed.cli.dask_worker", "--nthreads", "1", "--resources", "GPU=1",
                    gpu=True)
        self._spawn("distributed.cli.dask_worker", "--nthreads", "2", "--resources", "build=2")

    def _spawn(self, module: str, *args: str, gpu: bool = False) -> subprocess.Popen:
        env = dict(self.env, CUDA_VISIBLE_DEVICES="0" if gpu else "")
        log = open(self.folder / f"{module.rsplit('.', 1)[-1]}-{len(self.procs)}.log", "wb")
        p = subprocess.Popen([sys.executable, "-m", module, *args, "--scheduler-file",
                              str(self.file), "--no-dashboard"], env=env, stdout=log,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def kill_scheduler(self) -> None:
        self.scheduler.kill()
        self.scheduler.wait()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@contextlib.contextmanager
def process_cluster(folder: Path, **env: str) -> Iterator[ProcessCluster]:
    """A ProcessCluster in ``folder`` (its logs there), stopped afterwards; ``env``: extra
    environment of its processes."""
    folder.mkdir(parents=True, exist_ok=True)
    base = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **env)
    cluster = ProcessCluster(folder, base)
    try:
        yield cluster
    finally:
        cluster.stop()
