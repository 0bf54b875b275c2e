"""Builds candidates' CUDA code: in parallel, cached, time-limited, in throwaway processes.

``Builder`` runs each candidate's import in a subprocess of its own session
(``evokernel.build.entry``) and on timeout kills the whole session (ninja, nvcc, cicc, ptxas).
Inside that subprocess every ``load_inline(...)`` call goes through the build cache of
evokernel.build.cache (arch-flag rewriting, cache keys, per-key build folders, trimmed
headers); ``load_candidate`` there runs a candidate in the GPU worker with the same patch, so it
loads the cache. Those names are re-exported here (``__all__``), so
``from evokernel.build.builder import load_candidate, MARKER, ...`` keeps working.

A candidate of the NVRTC form (evokernel.build.forms) is not imported: the same subprocess, in
its ``nvrtc`` mode, compiles its ``compile_kernels`` sources to cubins with NVRTC
(evokernel.build.nvrtc_build), without torch, in about a second; the result and the cache are
the same as for a load_inline build.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from loguru import logger

from evokernel.errors import ConfigError
from evokernel.build.forms import form_name
from evokernel.build.host import (BUILD_NICENESS, BuildLadder, below_gpu, default_build_workers,
                                  kill_session)
from evokernel.build.inflight import BuildSessions, BuildStopped
from evokernel.jsonfile import write_json_atomic
from evokernel.build.cache import (ARCH_PATTERN, MARKER, arch_digits, cache_key, exclusive_lock,
                                   extension_key, load_candidate, patched_load_inline,
                                   rewrite_arch_flags, toolchain, toolkit_header_fallbacks)
from evokernel.build.ptxas import resources_from_json
from evokernel.build.publish import complete_build, publish, publish_finished
from evokernel.build.sass import sass_audit
from evokernel.records import Candidate, KernelResources, PrecisionFinding, Reason
from evokernel.sandbox import worker_env

if TYPE_CHECKING:
    from evokernel.sandbox.support import Containment

# The in-process cache (evokernel.build.cache) and worker_env (evokernel.sandbox) are
# re-exported, so ``from evokernel.build.builder import load_candidate, worker_env`` keeps working.
__all__ = ["LOG_TAIL_CHARS", "BuildResult", "BuildStopped", "Builder", "device_arch",
           "kill_session", "sass_audit",
           "MARKER", "cache_key", "extension_key", "load_candidate", "patched_load_inline",
           "rewrite_arch_flags", "toolchain", "toolkit_header_fallbacks", "worker_env"]

LOG_TAIL_CHARS = 4000
DIRECT_SEQ = 1 << 40        # a direct build() call's rank starts here: after every submitted one


def device_arch() -> str:
    """The GPU arch to build for, as "major.minor" (e.g. "9.0" on an H200).

    From the visible GPU when there is one, else the last entry of ``TORCH_CUDA_ARCH_LIST``.
    Raises: ConfigError if neither is available or the variable's last entry is not "X.Y".
    """
    import torch
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"{major}.{minor}"
    env = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if env:
        last = re.split(r"[;,\s]+", env)[-1].replace("+PTX", "")
        if ARCH_PATTERN.match(last):
            return last
        raise ConfigError(f"TORCH_CUDA_ARCH_LIST={env!r}: last entry {last!r} is not 'X.Y'")
    raise ConfigError("no CUDA GPU is visible and TORCH_CUDA_ARCH_LIST is not set, so the GPU "
                      "arch to build for is unknown; set TORCH_CUDA_ARCH_LIST=9.0 (H200)")


@dataclass(frozen=True)
class BuildResult:
    """The outcome of building one candidate.

    ok: every ``load_inline`` call compiled and loaded (errors the module raises afterwards,
        e.g. CUDA calls on a machine without a GPU, do not count; they are in ``log``); for an
        NVRTC candidate, every ``compile_kernels`` call the build could read compiled.
    reason: Reason.BUILD_ERROR or Reason.BUILD_TIMEOUT when not ok, else None.
    build_s: wall seconds, subprocess start-up included. cache_hit: nothing had to be compiled.
    log: the tail (last LOG_TAIL_CHARS characters) of compiler output and tracebacks.
    build_dirs: the extension folders under ``<cache_dir>/builds``.
    flags: notes such as "arch: -arch=sm_70 -> sm_90", "no_load_inline",
        "import_error_after_build: ...", "deferred_build: ...".
    resources: the ``ptxas -v`` report of the candidate's kernels (evokernel.build.ptxas);
        () for a failed build, or an extension built before the report was kept.
    precision_audit: the below-FP32 instructions in the built extensions' SASS
        (evokernel.build.sass); the audit's state is in ``flags`` (``sass_below_fp32:...``,
        ``sass_audit_unavailable: ...``, ``sass_audit: no SASS ...``).
    """

    candidate_id: str
    ok: bool
    reason: Reason | None
    build_s: float
    cache_hit: bool
    log: str = ""
    build_dirs: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    resources: tuple[KernelResources, ...] = ()
    precision_audit: tuple[PrecisionFinding, ...] = ()


def _tail(text: str) -> str:
    """The last LOG_TAIL_CHARS characters, with compiler command lines cut to 200 characters."""
    lines = (ln if len(ln) <= 300 else ln[:200] + " ..." for ln in text.splitlines())
    return "\n".join(lines)[-LOG_TAIL_CHARS:]


class Builder:
    """Builds candidates in parallel subprocesses, with a cache and a timeout per build.

    Args:
        cache_dir: root of the cache (``builds/`` per extension, ``candidates/`` per candidate).
        arch: GPU arch to build for, "9.0" style (see ``device_arch``).
        timeout_s: wall-clock limit of one build, subprocess start-up included.
        workers: builds at once (threads, each waiting on one subprocess running ninja with
            MAX_JOBS=2); None: evokernel.build.host.default_build_workers().
        trim_headers: build ``cuda_sources`` and main.cpp with light stand-ins for ``#include
            <torch/extension.h>`` (evokernel.build.headers); a light build that fails is
            built again from the original source, and its flags say so.
        sandbox: how build workers are contained (evokernel.sandbox.support.probe; the
            evaluator passes ``containment_for(config)``); None: not contained. Either way a
            worker builds in its candidate's folder and the finished builds are moved into
            the cache after it ends (evokernel.build.publish).
        audit: disassemble each successful build's extensions and list their below-FP32
            instructions (evokernel.build.sass; BuildResult.precision_audit). Runs in this
            process, after the build worker has ended, on the published cache folders.
    Running builds are ranked (``ladder``, a BuildLadder: their autogroups, their processes all
    at BUILD_NICENESS): submitted ones first, then direct ``build`` calls.
    Each build's environment is ``worker_env()`` with ``CUDA_VISIBLE_DEVICES=""``: builds never
    touch the GPU, so they cannot disturb timings on it.
    Builds run in sessions of their own, out of reach of a terminal's Ctrl-C: ``stop`` (also a
    ``with`` block left by an exception, and evokernel.build.inflight.stop_all) kills them.
    Raises: ValueError for a malformed arch, timeout_s <= 0 or workers < 1.
    """

    def __init__(self, cache_dir: Path, *, arch: str, timeout_s: float,
                 sandbox: "Containment | None" = None,
                 workers: int | None = None, trim_headers: bool = True, audit: bool = True):
        arch_digits(arch)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        workers = workers if workers is not None else default_build_workers()
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.cache_dir = Path(cache_dir).resolve()
        self.arch, self.timeout_s, self.workers = arch, float(timeout_s), workers
        self.trim_headers = trim_headers
        self.audit = audit
        self.jail = None
        if sandbox is not None and sandbox.mode != "none":
            from evokernel.sandbox.workers import BuildJail
            self.jail = BuildJail(sandbox, self.cache_dir)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="build")
        self.ladder = BuildLadder()
        self._seq = itertools.count()
        self._rank = threading.local()               # .seq: the build this thread runs
        self.sessions = BuildSessions()              # the builds in flight, for stop()

    def __enter__(self) -> "Builder":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        """``close``; left by an exception (Ctrl-C, SIGTERM), ``stop``: no one waits for the
        results, so waiting for the builds only kept the user waiting."""
        if exc_type is not None:
            self.stop()
        else:
            self.close()

    def close(self) -> None:
        """Wait for running builds and stop the thread pool."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.sessions.close()

    def stop(self) -> int:
        """Stop at once: queued builds cancelled, each build in flight killed (its whole
        session), later ones refused (they raise BuildStopped, as do those killed); waits for
        the builds' processes to be reaped (at most 5 s), not for the threads. Finished builds
        stay in the cache and a killed one was never published, so the next run builds it
        again. Returns: how many builds were in flight."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        return self.sessions.stop()

    def submit(self, candidate: Candidate) -> Future[BuildResult]:
        """Queue one build, ranked by submission. Returns: a future of its BuildResult."""
        return self._pool.submit(self._build_as, next(self._seq), candidate)

    def _build_as(self, seq: int, candidate: Candidate) -> BuildResult:
        """``build``, ranked ``seq`` on the ladder (a retry keeps it, see ``_run``)."""
        self._rank.seq = seq
        try:
            return self.build(candidate)
        finally:
            self._rank.seq = None

    def build_many(self, candidates: Sequence[Candidate]) -> list[BuildResult]:
        """Build all candidates, ``workers`` at a time (duplicates once).
        Returns: results in input order. Raises: BuildStopped, as ``build``."""
        futures = {c.id: self.submit(c) for c in dict((c.id, c) for c in candidates).values()}
        return [futures[c.id].result() for c in candidates]

    def _work_dir(self, candidate: Candidate) -> Path:
        key = cache_key({"source": candidate.source, "arch": self.arch, **toolchain()})
        return self.cache_dir / "candidates" / key

    def build(self, candidate: Candidate) -> BuildResult:
        """Build one candidate (blocking). Never raises for a bad candidate.

        A candidate built before (same source, arch and toolchain, every build folder complete
        in the cache) returns at once with ``cache_hit=True`` and no subprocess. Builds of one
        candidate never overlap, across threads and processes sharing the cache: each holds
        ``candidates/<key>.lock``, and so does its build process, so a build whose driver died
        (killed mid-run) still holds it until it ends.
        Returns: BuildResult. Raises: BuildStopped once ``stop`` was called (before or while it
        built).
        """
        if getattr(self._rank, "seq", None) is None:  # a direct call: after the submitted ones
            return self._build_as(DIRECT_SEQ + next(self._seq), candidate)
        t0 = time.perf_counter()
        try:                                         # no subprocess for a syntax error
            compile(candidate.source, "candidate.py", "exec")
        except (SyntaxError, ValueError) as e:
            log = "".join(traceback.format_exception_only(type(e), e))
            return BuildResult(candidate.id, False, Reason.BUILD_ERROR,
                               time.perf_counter() - t0, False, _tail(log))
        work = self._work_dir(candidate)
        with exclusive_lock(work.with_name(work.name + ".lock")) as lock_fd:
            hit = self._cached(candidate, work, t0)
            return hit if hit is not None else self._build_locked(candidate, work, t0, lock_fd)

    def _cached(self, candidate: Candidate, work: Path, t0: float) -> BuildResult | None:
        """The result of an earlier successful build of ``work`` whose extensions are all
        complete in the cache, or None. A ``result.json`` whose builds are elsewhere (one its
        build process wrote after its driver died, so never published) is no hit."""
        try:
            r = json.loads((work / "result.json").read_text())
            dirs = [Path(d) for d in r["build_dirs"]]
            ok = r["ok"] is True
        except (OSError, ValueError, KeyError, TypeError):
            return None
        builds = self.cache_dir / "builds"
        if not ok or not all(d.parent == builds and complete_build(d) for d in dirs):
            return None
        findings, notes = self.audit_build(work, r["build_dirs"])
        return BuildResult(candidate.id, True, None, time.perf_counter() - t0, True,
                           "", tuple(r["build_dirs"]), tuple(r["flags"]) + notes,
                           resources_from_json(r.get("resources")), findings)

    def _build_locked(self, candidate: Candidate, work: Path, t0: float,
                      lock_fd: int) -> BuildResult:
        """Build ``candidate`` in ``work`` afresh and publish it (``build``, with the lock)."""
        done = work / "result.json"
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        (work / "candidate.py").write_text(candidate.source, encoding="utf-8")
        mode = "nvrtc" if form_name(candidate.source) == "nvrtc" else \
            "trim" if self.trim_headers else "full"
        timed_out, rc = self._run(work, mode, keep_fds=(lock_fd,))
        log = (work / "build.log").read_text(errors="replace")
        retry = []
        if not timed_out and self.trim_headers and _trimmed_and_failed(done):
            logger.info(f"candidate {candidate.id}: the build with light headers failed; "
                        "building the source as written")
            done.unlink(missing_ok=True)
            (work / "candidate.py").write_text(candidate.source, encoding="utf-8")
            timed_out, rc = self._run(work, "full", time.perf_counter() - t0, (lock_fd,))
            log = (work / "build.log").read_text(errors="replace")
            retry = ["headers: built as written (the light-header build failed)"]
        build_s = time.perf_counter() - t0
        if timed_out:
            dirs = re.findall(r"^evokernel: building \S+ in (\S+)", log, re.MULTILINE)
            log += f"\nevokernel: build timed out after {self.timeout_s:g} s; its processes killed"
            logger.warning(f"candidate {candidate.id}: build timed out after {build_s:.1f} s")
            return BuildResult(candidate.id, False, Reason.BUILD_TIMEOUT, build_s, False,
                               _tail(log), tuple(dirs))
        r = publish(work, self.cache_dir)
        if r is None:
            done.unlink(missing_ok=True)
            r = {"ok": False, "build_dirs": [], "flags": [], "cache_hit": False}
            log += f"\nevokernel: build process exited with status {rc} and no result"
        if not r["ok"]:
            done.unlink(missing_ok=True)             # never a cache hit for a failure
        logger.debug(f"candidate {candidate.id}: ok={r['ok']} in {build_s:.1f} s")
        findings, notes = self.audit_build(work, r["build_dirs"]) if r["ok"] else ((), ())
        return BuildResult(candidate.id, r["ok"], None if r["ok"] else Reason.BUILD_ERROR,
                           build_s, bool(r["ok"] and r["cache_hit"]), _tail(log),
                           tuple(r["build_dirs"]), tuple(r["flags"]) + tuple(retry) + notes,
                           resources_from_json(r.get("resources")) if r["ok"] else (),
                           findings)

    def audit_build(self, work: Path, build_dirs: Sequence[str]
                 ) -> tuple[tuple[PrecisionFinding, ...], tuple[str, ...]]:
        """sass_audit of a successful build, kept in ``work/sass_audit.json`` so that a cache
        hit does not disassemble again (an audit that could not run is not kept)."""
        if not self.audit:
            return (), ()
        kept = work / "sass_audit.json"
        try:
            data = json.loads(kept.read_text())
            return (tuple(PrecisionFinding(**f) for f in data["findings"]),
                    tuple(data["flags"]))
        except (OSError, ValueError, TypeError, KeyError):
            pass
        findings, notes = sass_audit(build_dirs)
        if not any(n.startswith("sass_audit_unavailable") for n in notes):
            with contextlib.suppress(OSError):
                write_json_atomic(kept, {"findings": [dataclasses.asdict(f) for f in findings],
                                         "flags": list(notes)})
        return findings, notes

    def command(self, work: Path, mode: str, rung: int = BUILD_NICENESS
                ) -> tuple[list[str], dict[str, str]]:
        """The command line and environment of one build in ``work`` (see ``_run``): in its
        jail where there is one, below the GPU workers, its autogroup at ``rung`` (below_gpu)."""
        env = worker_env()
        env.update(MAX_JOBS="2", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="",
                   TORCH_CUDA_ARCH_LIST=self.arch,
                   TORCH_EXTENSIONS_DIR=str(self.cache_dir / "torch_extensions"))
        cmd = [sys.executable, "-m", "evokernel.build.entry", str(work), str(self.cache_dir),
               self.arch, mode]
        if self.jail is not None:                    # evokernel.sandbox.workers
            self.jail.prepare(work)
            cmd, env = self.jail.command(cmd, work, env)
        return below_gpu(cmd, rung), env

    def _run(self, work: Path, mode: str, spent_s: float = 0.0,
             keep_fds: Sequence[int] = ()) -> tuple[bool, int | None]:
        """Run the build entry point in a session of its own (``mode``: "trim", "full" or
        "nvrtc", see evokernel.build.entry), with ``timeout_s - spent_s`` left and the
        descriptors ``keep_fds`` inherited (the candidate's lock), at its rung of the ladder;
        kill the session when it ends or times out. Returns: (timed_out, exit status).
        Raises: BuildStopped once ``stop`` was called (a build that had finished is published
        first, evokernel.build.publish.publish_finished)."""
        seq = self._rank.seq                         # set by build(), kept by a retry
        with self.ladder.rung(seq) as rung:
            cmd, env = self.command(work, mode, rung)
            with open(work / "build.log", "wb") as log:
                proc = self.sessions.start(lambda: subprocess.Popen(
                    cmd, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, pass_fds=tuple(keep_fds)))
                try:
                    self.ladder.started(seq, proc.pid)   # not reaped yet: autogroup opened
                    outcome = False, proc.wait(timeout=max(1.0, self.timeout_s - spent_s))
                except subprocess.TimeoutExpired:
                    outcome = True, None
                finally:
                    kill_session(proc.pid)           # also strays of a finished build
                    proc.wait()
                    self.sessions.ended(proc.pid)
                    self.ladder.leave(seq)           # the younger ones move up now
                    if self.jail is not None:
                        self.jail.finish(work)
        if self.sessions.stopped:                    # killed, or it ended as it was stopped
            publish_finished(work, self.cache_dir)
            raise BuildStopped(f"the build in {work} was stopped")
        return outcome


def _trimmed_and_failed(result_file: Path) -> bool:
    """A build's result.json says it failed with light headers (evokernel.build.headers): any
    such failure is built again from the source as written, which decides."""
    try:
        r = json.loads(result_file.read_text())
    except (OSError, ValueError):
        return False
    return not r.get("ok") and bool(r.get("trimmed"))

