"""``DaskEvaluator``: the Evaluator protocol (evokernel.engine.evaluator.Evaluator) over a Dask
cluster, made by evokernel.engine.factory.make_evaluator (``dask=...``).

    candidate ──> static check (driver) ──> build task (a build worker, contained)
              ──> GPU task (a GPU worker's slot: the engine's WorkerHandle) ──> EvalResult

The driver keeps the run store and every LLM call; it hands out at most one GPU task per GPU
worker at a time, so that a Dask worker that dies takes only the candidate it was running with
it (that candidate gets ``worker_crash`` naming the worker; its Nanny starts a new one; the
others are evaluated). Builds run as soon as they are submitted, on the build workers' threads,
and each built candidate goes to the next free GPU, so builds overlap gating and timing, as in
the local engine. The scheduler gone raises ClusterError naming its address; the verdicts that
came back are already stored (``on_result``), so ``--resume`` evaluates only the rest.
"""
from __future__ import annotations

import dataclasses
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from evokernel.cluster import connect as clusters
from evokernel.config import EvalConfig
from evokernel.engine.evaluator import OnEvent, OnResult, setup_message, static_check
from evokernel.errors import ClusterError, NoGPUError
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason


def _local_devices() -> list[int]:
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError("the Dask evaluator on this host needs a CUDA GPU and PyTorch sees "
                         "none; pass --dask-scheduler ADDRESS to use another host's GPUs")
    return list(range(torch.cuda.device_count()))


class DaskEvaluator:
    """Build on a Dask cluster's build workers, gate and time on its GPU workers.

    Args:
        problem: the reference problem.
        config: the evaluation config (the same one the local engine takes).
        scheduler: None: a local cluster on this host (``devices``, ``build_workers``); a
            "tcp://host:port" address or a cluster object: use that cluster (its workers
            advertise the resources of evokernel.cluster.connect).
        devices: with a local cluster, the GPU indices, one worker each (default: all).
        log_dir: where the engine workers' logs go, on their hosts (default <cache>/logs).
        compile_ms: a torch.compile baseline (ms) to reuse (a resumed run's).
        build_workers: with a local cluster, builds at once (default: 3 per 4 cores).
        entry: the engine worker module the GPU slots start (tests pass a fake one).
        worker_env: extra environment of the engine workers (tests: PYTHONPATH).
        connect_timeout_s: how long to wait for the scheduler and a GPU worker.
        gpu_workers: only these GPU workers' addresses (a problem set gives each problem one:
            evokernel.cluster.problem_set); their tasks go elsewhere only if they are gone.
    Raises:
        ConfigError: dask.distributed is not installed (it names the ``dask`` extra).
        ClusterError: no scheduler at the address, or no GPU worker joined in time.
        NoGPUError: a local cluster and no CUDA GPU here.
        ProblemError: the problem cannot be set up on a GPU worker.
    """

    def __init__(self, problem: Problem, config: EvalConfig, *, scheduler: Any = None,
                 devices: Sequence[int | str] | None = None, log_dir: Path | None = None,
                 compile_ms: float | None = None, build_workers: int | None = None,
                 entry: str = "evokernel.engine.worker",
                 worker_env: dict[str, str] | None = None, connect_timeout_s: float = 60.0,
                 gpu_workers: Sequence[str] | None = None):
        clusters.require_distributed()
        from evokernel.cluster import tasks
        self.problem, self.config, self._tasks = problem, config, tasks
        self._cluster = None
        self.pinned = list(gpu_workers) if gpu_workers else None
        if scheduler is None:
            devices = list(devices) if devices is not None else _local_devices()
            self._cluster = clusters.local_cluster(
                devices, build_workers or config.build_workers, env=worker_env)
            scheduler = self._cluster
        try:
            self._start(scheduler, devices, log_dir, compile_ms, entry, worker_env,
                        connect_timeout_s)
        except BaseException:
            self.close()
            raise

    def _start(self, scheduler: Any, devices: Sequence[Any] | None, log_dir: Path | None,
               compile_ms: float | None, entry: str, worker_env: dict[str, str] | None,
               timeout_s: float) -> None:
        self.client = clusters.connect(scheduler, timeout_s=timeout_s)
        self.address = str(self.client.scheduler.address)
        self.client.register_plugin(self._tasks.WorkerSetup())
        wanted = len(devices) if devices is not None and self._cluster is not None else 1
        gpus = self._wait_for_gpus(wanted, timeout_s)
        if self.pinned is not None:
            gpus = [a for a in gpus if a in self.pinned]
            if not gpus:
                raise ClusterError(f"Dask scheduler {self.address}: none of the GPU workers "
                                   f"{self.pinned} is there")
        self.gpus = gpus
        self.options = {"entry": entry, "env": dict(worker_env or {}),
                        "log_dir": str(log_dir) if log_dir else None}
        arch = self._submit_gpu(self._tasks.gpu_arch).result()
        self.setup = setup_message(self.problem, self.config, arch, compile_ms)
        futures = [self.client.submit(self._tasks.setup_gpu, self.setup, self.options,
                                      workers=[a], allow_other_workers=False, pure=False,
                                      resources={clusters.GPU_RESOURCE: 1},
                                      key=f"setup-{self.problem.name}-{uuid.uuid4().hex[:8]}")
                   for a in gpus]
        infos = self.client.gather(futures)
        self.slots = len(gpus)
        self.build_settings = build_settings(arch, self.config)
        if self.setup["problem"]["compile_ms"] is None:   # replaced workers reuse the first's
            self.setup["problem"]["compile_ms"] = infos[0].get("compile_ms")
        self.info: dict[str, Any] = {k: v for k, v in infos[0].items() if k != "dask_worker"}
        self.info.update(gpus=len(gpus), engine="dask", dask_scheduler=self.address)
        logger.info("Dask GPU workers ready: {} x {} (scheduler {})", len(gpus),
                    self.info.get("device"), self.address)

    def _wait_for_gpus(self, n: int, timeout_s: float) -> list[str]:
        import time
        deadline = time.monotonic() + timeout_s
        while True:
            gpus = clusters.gpu_workers(self.client)
            if len(gpus) >= n:
                return gpus
            if time.monotonic() > deadline:
                raise ClusterError(f"Dask scheduler {self.address}: {len(gpus)} worker(s) "
                                   f"with {clusters.GPU_RESOURCE}=1 after {timeout_s:.0f} s, "
                                   f"{n} needed; start one per GPU (`dask cuda worker "
                                   f"{self.address} --nthreads 1 --resources GPU=1`)")
            time.sleep(0.2)

    def _submit_gpu(self, func: Callable[..., Any], *args: Any) -> Any:
        where = {} if getattr(self, "pinned", None) is None else \
            {"workers": self.pinned, "allow_other_workers": True}
        return self.client.submit(func, *args, resources={clusters.GPU_RESOURCE: 1},
                                  pure=False, key=f"{func.__name__}-{uuid.uuid4().hex}", **where)

    # -- evaluation ----------------------------------------------------------------------
    def evaluate(self, candidates: Sequence[Candidate], on_result: OnResult | None = None,
                 on_event: OnEvent | None = None) -> list[EvalResult]:
        """Evaluate ``candidates``; results come back in the same order (each id once).

        ``on_result`` is called in the driver as each verdict arrives; ``on_event`` as in the
        local engine (evokernel.engine.evaluator.OnEvent). Never raises for a bad candidate.
        Raises: ClusterError naming the scheduler when it is gone (the verdicts that arrived
            were passed to ``on_result``)."""
        from distributed import as_completed
        results: dict[str, EvalResult] = {}

        def emit(kind: str, cid: str) -> None:
            if on_event is not None:
                try:
                    on_event(kind, cid)
                except Exception:  # a display must never cost a result
                    logger.exception("on_event({!r}) failed for {}", kind, cid)

        def done(r: EvalResult) -> None:
            results[r.candidate_id] = r
            if on_result is not None:
                on_result(r)

        flow = as_completed(loop=self.client.loop)
        meta: dict[str, tuple[str, Candidate, Any]] = {}
        for cand in {c.id: c for c in candidates}.values():
            rejected = static_check(cand)
            if rejected is not None:
                done(rejected)
                continue
            fut = submit_build(self.client, cand, self.build_settings)
            meta[fut.key] = ("build", cand, None)
            flow.add(fut)
            emit("build_started", cand.id)
        ready: deque[tuple[Candidate, Any]] = deque()
        busy = 0
        for fut in flow:
            kind, cand, build = meta.pop(fut.key)
            if kind == "build":
                self._built(fut, cand, ready, done, emit)
            else:
                busy -= 1
                r = self._verdict(fut, cand)
                emit("gated", cand.id)
                if r.accepted:
                    emit("timed", cand.id)
                done(dataclasses.replace(r, build_s=build.build_s,
                                         flags=tuple(build.flags) + tuple(r.flags),
                                         resources=r.resources or build.resources))
            while ready and busy < self.slots:
                cand, build = ready.popleft()
                gpu = self._submit_gpu(self._tasks.evaluate_on_gpu, self.setup,
                                       cand.to_dict(), self.options)
                meta[gpu.key] = ("gpu", cand, build)
                flow.add(gpu)
                busy += 1
                emit("gating", cand.id)
        return [results[c.id] for c in candidates]

    def _built(self, fut: Any, cand: Candidate, ready: deque, done: OnResult,
               emit: Callable[[str, str], None]) -> None:
        """A build task's outcome: queued for a GPU, or the candidate's failure."""
        try:
            build = fut.result()
        except Exception as e:  # noqa: BLE001 -- a lost build worker must not lose it
            self._raise_if_gone(e)
            emit("build_failed", cand.id)
            done(EvalResult.failure(cand.id, Reason.BUILD_ERROR,
                                    f"builder error on the Dask cluster: {_describe(e)}"))
            return
        emit("built" if build.ok else "build_failed", cand.id)
        if build.ok:
            ready.append((cand, build))
            return
        done(EvalResult.failure(cand.id, build.reason or Reason.BUILD_ERROR,
                                "build failed" if build.reason is not Reason.BUILD_TIMEOUT
                                else f"build exceeded {self.config.build_timeout_s:.0f} s",
                                build_s=build.build_s, log=build.log, flags=tuple(build.flags)))

    def _verdict(self, fut: Any, cand: Candidate) -> EvalResult:
        """A GPU task's EvalResult; a Dask worker that died under it: worker_crash."""
        from distributed import KilledWorker
        try:
            return fut.result()
        except KilledWorker as e:
            worker = getattr(e, "last_worker", None)
            where = getattr(worker, "address", None) or str(worker or "?")
            return EvalResult.failure(
                cand.id, Reason.WORKER_CRASH,
                f"the Dask GPU worker {where} died while evaluating this candidate (beyond its "
                "engine worker, which catches hangs, crashes and CUDA faults); its Nanny "
                "starts a new worker and the other candidates go on")
        except Exception as e:  # noqa: BLE001
            self._raise_if_gone(e)
            raise

    def _raise_if_gone(self, error: BaseException) -> None:
        """ClusterError when ``error`` means the scheduler is gone."""
        from concurrent.futures import CancelledError
        status = str(getattr(self.client, "status", ""))
        if isinstance(error, (CancelledError, OSError)) or status not in ("running", ""):
            raise ClusterError(
                f"Dask scheduler {self.address}: the connection was lost ({_describe(error)}); "
                "the verdicts that arrived are stored; start a scheduler and resume the run "
                "(`evokernel run --resume RUN_DIR`)") from error

    def close(self) -> None:
        """Stop the GPU slots' engine workers, disconnect, and stop a cluster it started."""
        client = getattr(self, "client", None)
        setup = getattr(self, "setup", None)
        if client is not None and setup is not None and str(client.status) == "running":
            try:
                gpus = [a for a in clusters.gpu_workers(client)
                        if self.pinned is None or a in self.pinned]
                client.gather([client.submit(self._tasks.close_gpu, setup, workers=[a],
                                             pure=False,
                                             allow_other_workers=False,
                                             resources={clusters.GPU_RESOURCE: 1},
                                             key=f"close-{uuid.uuid4().hex}") for a in gpus])
            except Exception as e:  # noqa: BLE001 -- closing must not hide the real error
                logger.warning("Dask evaluator: the GPU slots did not close cleanly: {}", e)
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def build_settings(arch: str, config: EvalConfig) -> dict[str, Any]:
    """What a build task is told besides its candidate: the arch ("9.0") and the evaluation
    config as a dict (its cache folder, timeouts, containment)."""
    from evokernel.config import RunConfig
    return {"arch": arch, "config": RunConfig(evaluation=config).to_dict()["evaluation"]}


def submit_build(client: Any, cand: Candidate, settings: dict[str, Any]) -> Any:
    """The Dask future of building ``cand`` on a build worker. Its key is fixed by the
    candidate and the settings, so that the same build asked for twice while it runs (a problem
    set's up-front build, then its evaluator's) is one task, never two builds in one folder."""
    import hashlib
    import json
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    from evokernel.cluster import tasks
    return client.submit(tasks.build_candidate, cand.to_dict(), settings,
                         resources={clusters.BUILD_RESOURCE: 1},
                         key=f"build-{cand.id}-{digest}")


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
