"""The evaluation engine: candidates in, EvalResults out, in the order given.

    candidate ──> static check (CPU) ──> build (CPU pool, cached) ──> GPU worker: gate, time

Builds run in parallel worker processes (each successful build's machine code is audited for
below-FP32 instructions, evokernel.build.sass: the findings join the result's detail, flags and
``precision_audit`` as evidence, while the gate's numbers decide); as each finishes, its
candidate is queued for the GPU worker of a free GPU, so the next builds overlap with gating and
timing. Evaluation never raises for a bad candidate: every failure is an EvalResult with a named
reason.
"""
from __future__ import annotations

import ast
import dataclasses
import queue
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from loguru import logger

from evokernel.build.sass import with_audit
from evokernel.config import EvalConfig, RunConfig
from evokernel.engine.gpu_share import NvmlProcesses, SharedGpuGuard
from evokernel.errors import NoGPUError, WorkerClosed
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason

OnResult = Callable[[EvalResult], None]
#: ``on_event(kind, candidate_id)``, called from build and GPU threads as a candidate moves on:
#: "build_started", then "built" or "build_failed"; then "gating" (a GPU worker took it),
#: "gated" (its verdict is in) and, when accepted, "timed". A worker gates and times in one
#: call, so "gated" and "timed" arrive together. For progress displays (evokernel.cli.progress).
OnEvent = Callable[[str, str], None]


class Evaluator(Protocol):
    """What the search needs from an evaluator (tests use a fake one)."""

    info: dict[str, Any]

    def evaluate(self, candidates: Sequence[Candidate],
                 on_result: OnResult | None = None) -> list[EvalResult]: ...

    def close(self) -> None: ...


def static_check(cand: Candidate) -> EvalResult | None:
    """Reject, without running anything, a source that is not a module defining ModelNew.

    A reply whose edits did not apply is rejected with their reason (Candidate.no_code_note).
    Returns None when the candidate may go on to be built.
    """
    note = cand.no_code_note
    if note is not None:
        return EvalResult.failure(cand.id, Reason.NO_CODE, note)
    try:
        tree = ast.parse(cand.source)
    except SyntaxError as e:
        code_like = "ModelNew" in cand.source and ("import" in cand.source)
        reason = Reason.BUILD_ERROR if code_like else Reason.NO_CODE
        return EvalResult.failure(cand.id, reason, f"line {e.lineno}: syntax error: {e.msg}")
    names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}
    if "ModelNew" not in names:
        return EvalResult.failure(cand.id, Reason.NO_CODE,
                                  "no ModelNew defined at module level (an LLM reply without "
                                  "usable code is kept in the store as its text)")
    return None


def setup_message(problem: Problem, config: EvalConfig, arch: str,
                  compile_ms: float | None = None) -> dict[str, Any]:
    """The set-up message every GPU worker of ``problem`` is sent (evokernel.engine.worker):
    the problem's source and path, its distributions, a torch.compile baseline to reuse (ms;
    None: measure one), the evaluation config, and the GPU arch ("9.0" style). JSON-able; the
    local and the Dask evaluator send the same one."""
    return {"kind": "setup", "arch": arch,
            "problem": {"name": problem.name, "path": str(problem.path),
                        "source": problem.source,
                        "distributions": list(problem.distributions or ()),
                        "compile_ms": compile_ms},
            "config": RunConfig(evaluation=config).to_dict()}


class CudaEvaluator:
    """Build, gate and time candidates on this machine's GPUs, in contained build and GPU
    workers (as ``config.sandbox`` says: evokernel.sandbox).

    Args:
        problem: the reference problem.
        config: the evaluation config.
        devices: GPU indices to use (default: every visible GPU, one worker each).
        log_dir: where worker logs go (default: <cache>/logs).
        compile_ms: a torch.compile baseline (ms) to use instead of measuring one: a resumed
            run's (RunStore.compile_baseline_ms), so that all of its candidates are compared with
            one measurement, as a respawned worker's are.
        entry: the GPU worker module (tests substitute a fake one, as for WorkerHandle).
    Raises:
        NoGPUError: no CUDA GPU is visible.
        SandboxError: ``config.require_sandbox`` and a containment step is not possible here.
        ProblemError: the problem could not be set up on the GPU.
    """

    def __init__(self, problem: Problem, config: EvalConfig, *,
                 devices: Sequence[int] | None = None, log_dir: Path | None = None,
                 compile_ms: float | None = None, entry: str = "evokernel.engine.worker"):
        import torch

        from evokernel.build.builder import Builder, device_arch, worker_env
        from evokernel.engine.handle import WorkerHandle
        from evokernel.sandbox.support import containment_for
        from evokernel.sandbox.workers import GpuWorkerJail

        if not torch.cuda.is_available():
            raise NoGPUError(
                "evaluation needs a CUDA GPU and PyTorch sees none. Gating and timing kernels "
                "run only on a GPU; on this machine `evokernel --help`, problem loading, and the "
                "CPU test suite (`make test`) still work.")
        self.problem, self.config = problem, config
        self.arch = device_arch()
        self.containment = containment_for(config)      # said once; SandboxError if required
        jailed = self.containment is not None and self.containment.mode != "none"
        self.builder = Builder(config.cache_path, arch=self.arch,
                               timeout_s=config.build_timeout_s, workers=config.build_workers,
                               trim_headers=config.trim_headers, sandbox=self.containment)
        devices = list(devices) if devices is not None else list(range(torch.cuda.device_count()))
        setup = setup_message(problem, config, self.arch, compile_ms)
        log_dir = log_dir or config.cache_path / "logs"
        self.workers = [WorkerHandle(setup, env=worker_env(), device_index=d,
                                     log_path=log_dir / f"worker-{problem.name}-gpu{d}.log",
                                     setup_timeout_s=max(900.0, config.eval_timeout_s),
                                     entry=entry,
                                     sandbox=GpuWorkerJail(self.containment, config.cache_path)
                                     if jailed else None)
                        for d in devices]
        self._pool = ThreadPoolExecutor(max_workers=self.builder.workers,
                                        thread_name_prefix="evokernel-build")
        # Start the workers (reference truths, baselines, floor) while nothing else runs, once
        # no other process uses their GPUs (or the wait is over: then the set-up is marked).
        shared_at_setup, waited_s, seen = {}, 0.0, set()
        for d in devices:
            uuid = str(getattr(torch.cuda.get_device_properties(d), "uuid", "") or "")
            processes = NvmlProcesses(uuid)
            seen.update(processes.others())
            waited, others = SharedGpuGuard(processes, None, policy=config.gpu_sharing,
                                            wait_s=config.gpu_wait_s).wait_until_free()
            waited_s += waited
            if others:
                shared_at_setup[d] = list(others)
        infos = list(ThreadPoolExecutor(len(self.workers)).map(lambda w: w.start(), self.workers))
        self.guards = [SharedGpuGuard(NvmlProcesses(i.get("uuid", "")), i.get("reference_ms"),
                                      policy=config.gpu_sharing, wait_s=config.gpu_wait_s)
                       for i in infos]
        self.info: dict[str, Any] = dict(infos[0])
        self.info["gpus"] = len(self.workers)
        if waited_s >= 0.5:
            self.info.update(gpu_wait_at_setup_s=round(waited_s, 1),
                             gpu_other_pids_at_setup=sorted(seen))
        if shared_at_setup:
            self.info["gpu_shared_at_setup"] = shared_at_setup
            logger.warning("the baselines were measured while other processes used the GPU: {}",
                           shared_at_setup)
        logger.info("GPU workers ready on {} x {}", len(self.workers), self.info.get("device"))

    def evaluate(self, candidates: Sequence[Candidate], on_result: OnResult | None = None,
                 on_event: OnEvent | None = None) -> list[EvalResult]:
        """Evaluate ``candidates``; results come back in the same order.

        ``on_result`` is called (from a worker thread) as each result is ready, so the run store
        is written as each candidate finishes. ``on_event`` (optional, see OnEvent) reports
        each candidate's progress; an exception it raises is logged and ignored.
        """
        results: dict[str, EvalResult] = {}
        lock = threading.Lock()
        emit = _emitter(on_event)

        def done(r: EvalResult) -> None:
            with lock:
                results[r.candidate_id] = r
            if on_result is not None:
                on_result(r)

        gpu_queue: queue.Queue[tuple[Candidate, Any] | None] = queue.Queue()
        gpu_threads = [threading.Thread(target=self._gpu_loop, args=(w, g, gpu_queue, emit, done),
                                        daemon=True, name=f"evokernel-gpu{i}")
                       for i, (w, g) in enumerate(zip(self.workers, self.guards))]
        for t in gpu_threads:
            t.start()
        self._build_all(list({c.id: c for c in candidates}.values()), gpu_queue, emit, done)
        for _ in gpu_threads:
            gpu_queue.put(None)
        for t in gpu_threads:
            t.join()
        return [results[c.id] for c in candidates]

    def _gpu_loop(self, worker: Any, guard: SharedGpuGuard, gpu_queue: queue.Queue,
                  emit: OnEvent, done: OnResult) -> None:
        """One GPU worker's thread: gate and time the built candidates of ``gpu_queue`` until
        None; a shutdown (WorkerClosed) leaves the candidate pending, without a verdict."""
        while (item := gpu_queue.get()) is not None:
            cand, build = item
            emit("gating", cand.id)
            try:
                r = guard.run(lambda: worker.evaluate(cand, self.config.eval_timeout_s))
            except WorkerClosed:
                return
            emit("gated", cand.id)
            if r.accepted:
                emit("timed", cand.id)
            done(dataclasses.replace(r, build_s=build.build_s,
                                     flags=tuple(build.flags) + tuple(r.flags),
                                     resources=r.resources or build.resources,
                                     precision_audit=build.precision_audit,
                                     detail=with_audit(r.detail, build.precision_audit)))

    def _build_all(self, unique: Sequence[Candidate], gpu_queue: queue.Queue,
                   emit: OnEvent, done: OnResult) -> None:
        """Statically check and build ``unique`` in parallel; a built candidate goes to
        ``gpu_queue`` as its build ends, a rejected or failed one straight to ``done``."""
        def build_one(cand: Candidate) -> Any:
            emit("build_started", cand.id)
            return self.builder.build(cand)
        futures = {}
        for cand in unique:
            rejected = static_check(cand)
            if rejected is not None:
                done(rejected)
            else:
                futures[self._pool.submit(build_one, cand)] = cand
        for fut in as_completed(futures):
            cand = futures[fut]
            try:
                build = fut.result()
            except Exception as e:  # a bug in the builder must not lose the candidate
                logger.exception("builder failed on {}", cand.id)
                emit("build_failed", cand.id)
                done(EvalResult.failure(cand.id, Reason.BUILD_ERROR, f"builder error: {e}"))
                continue
            emit("built" if build.ok else "build_failed", cand.id)
            if not build.ok:
                done(EvalResult.failure(cand.id, build.reason or Reason.BUILD_ERROR,
                                        "build failed" if build.reason is not Reason.BUILD_TIMEOUT
                                        else f"build exceeded {self.config.build_timeout_s:.0f} s",
                                        build_s=build.build_s, log=build.log,
                                        flags=tuple(build.flags)))
            else:
                gpu_queue.put((cand, build))

    def profile(self, candidate: Candidate) -> tuple[Any, ...]:
        """Nsight Compute metrics of one call of an accepted (so already built) candidate, on
        the first worker's GPU while no candidate is being timed (evokernel.engine.ncu), for
        ``dataclasses.replace(result, profile=...)``.
        Returns: tuple of KernelProfile. Raises: ProfileUnavailable (see there)."""
        from evokernel.engine.ncu import profile_candidate
        env = dict(self.workers[0].env)
        return profile_candidate(self.problem.source, candidate.source,
                                 self.config.cache_path / "profiles" / candidate.id,
                                 self.config.cache_path, self.arch, env=env)

    def close(self) -> None:
        """Stop the GPU workers and any build still in flight (Builder.stop: its whole session
        killed; a run interrupted mid-build waited for it, the builds running in sessions of
        their own); candidates without a verdict stay pending. Never waits for the threads."""
        for w in self.workers:
            w.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.builder.stop()


def _emitter(on_event: OnEvent | None) -> OnEvent:
    """``on_event`` made safe to call: a display must never cost a result, so what it raises
    is logged and dropped."""
    def emit(kind: str, cid: str) -> None:
        if on_event is None:
            return
        try:
            on_event(kind, cid)
        except Exception:
            logger.exception("on_event({!r}) failed for {}", kind, cid)
    return emit
