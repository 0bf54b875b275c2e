"""A problem set on a Dask cluster (issue 16): every candidate of every problem built up front
on the build workers, and each GPU worker taking whole problems from one queue, as
evokernel.engine.problem_set does on one host.

    evaluate_problem_set_on_dask(jobs, config, scheduler)   ProblemOutcomes, in the jobs' order

Each problem runs through a ``DaskEvaluator`` pinned to one GPU worker (its set-up there only;
its tasks go elsewhere only if that worker is gone), so a problem's set-up is paid once, on the
GPU that times it. The up-front builds and the evaluators' builds share their Dask keys
(evaluator.submit_build), so nothing is built twice at once. Unlike the local path, the next
problem's worker process is not started ahead (not built yet).
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Sequence

from loguru import logger

from evokernel.cluster import connect as clusters
from evokernel.cluster.evaluator import DaskEvaluator, build_settings, submit_build
from evokernel.config import EvalConfig
from evokernel.engine.evaluator import static_check
from evokernel.engine.problem_jobs import OnProblemResult, ProblemJob, ProblemOutcome
from evokernel.errors import EvokernelError


def evaluate_problem_set_on_dask(jobs: Sequence[ProblemJob], config: EvalConfig,
                                 scheduler: Any, *, entry: str = "evokernel.engine.worker",
                                 worker_env: dict[str, str] | None = None,
                                 on_result: OnProblemResult | None = None,
                                 timeout_s: float = 60.0) -> list[ProblemOutcome]:
    """Build every job's candidates up front, then gate and time each job's candidates on one
    GPU worker of the cluster at ``scheduler`` (an address or a cluster object).

    Args: as evokernel.engine.problem_set.evaluate_problem_set; ``entry`` and ``worker_env``
        as DaskEvaluator's (tests pass a fake engine worker).
    Returns: one ProblemOutcome per job, in order (``device``: the GPU worker's address; a
        problem that cannot be set up has ``error`` and no results).
    Raises: ConfigError without the dask extra; ClusterError when the scheduler is gone or
        no GPU worker is there.
    """
    from evokernel.cluster import tasks
    client = clusters.connect(scheduler, timeout_s=timeout_s)
    address = str(client.scheduler.address)
    try:
        client.register_plugin(tasks.WorkerSetup())
        gpus = clusters.gpu_workers(client)
        if not gpus:
            from evokernel.errors import ClusterError
            raise ClusterError(f"Dask scheduler {address}: no worker with "
                               f"{clusters.GPU_RESOURCE}=1")
        arch = client.submit(tasks.gpu_arch, resources={clusters.GPU_RESOURCE: 1},
                             pure=False).result()
        settings = build_settings(arch, config)
        unique = {c.id: c for j in jobs for c in j.candidates if static_check(c) is None}
        held = [submit_build(client, c, settings) for c in unique.values()]   # up front
        logger.info("problem set on Dask: {} builds submitted, {} problems on {} GPU workers",
                    len(held), len(jobs), len(gpus))
        outcomes: list[ProblemOutcome | None] = [None] * len(jobs)
        todo: queue.Queue[int] = queue.Queue()
        for i in range(len(jobs)):
            todo.put(i)

        def gpu_loop(worker: str) -> None:
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                outcomes[i] = _one_problem(jobs[i], config, address, worker, entry,
                                           worker_env, on_result)

        threads = [threading.Thread(target=gpu_loop, args=(w,), daemon=True) for w in gpus]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        del held
        return [o for o in outcomes if o is not None]
    finally:
        client.close()


def _one_problem(job: ProblemJob, config: EvalConfig, address: str, worker: str, entry: str,
                 worker_env: dict[str, str] | None,
                 on_result: OnProblemResult | None) -> ProblemOutcome:
    """One problem on one GPU worker; a problem that cannot be set up is its row's error."""
    name, t0 = job.problem.name, time.perf_counter()
    try:
        ev = DaskEvaluator(job.problem, config, scheduler=address, entry=entry,
                           worker_env=worker_env, gpu_workers=[worker])
    except EvokernelError as e:
        return ProblemOutcome(name, [], {}, worker, error=str(e))
    try:
        results = ev.evaluate(list(job.candidates), on_result=None if on_result is None
                              else (lambda r: on_result(name, r)))
    finally:
        ev.close()
    return ProblemOutcome(name, results, dict(ev.info), worker,
                          wall_s=time.perf_counter() - t0)
