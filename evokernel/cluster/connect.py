"""The Dask cluster an evaluation runs on: a local one for this host's GPUs, or an address.

    require_distributed()        dask.distributed, or ConfigError naming the ``dask`` extra
    local_cluster(devices, ...)  a SpecCluster on this host: one worker per GPU, one for builds
    connect(address, ...)        a Client of a running scheduler, or ClusterError naming it

Workers are told apart by Dask resources (``GPU_RESOURCE``, ``BUILD_RESOURCE``), so the same
tasks run on one host or many: a GPU worker advertises ``GPU=1`` and runs one task at a time; a
build worker advertises ``build=N`` with N threads. On many hosts, start them as

    dask scheduler                                              # on the driver's host
    dask cuda worker tcp://SCHED:8786 --nthreads 1 --resources GPU=1          # per GPU host
    dask worker tcp://SCHED:8786 --nthreads 8 --resources build=8             # per CPU host

(README, "Many GPUs and hosts"). On one host ``local_cluster`` does what dask-cuda's
LocalCUDACluster would, one worker per GPU with CUDA_VISIBLE_DEVICES set, through the library's
own SpecCluster, so that the build worker can sit in the same cluster; the Dask workers never
open a CUDA context themselves (the engine's worker process they start does).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from evokernel.errors import ClusterError, ConfigError

GPU_RESOURCE = "GPU"
BUILD_RESOURCE = "build"
EXTRA = "pip install 'evokernel[dask]'"
#: Scheduler settings of a local cluster. allowed-failures 0: a candidate whose Dask worker
#: died is failed (worker_crash), not retried on the next worker, which it would kill as well.
LOCAL_CONFIG = {"distributed.scheduler.allowed-failures": 0,
                "distributed.worker.daemon": False}


def require_distributed() -> Any:
    """The ``distributed`` module.

    Raises: ConfigError naming the ``dask`` extra when dask.distributed is not installed."""
    try:
        import distributed
    except ImportError as e:
        raise ConfigError(f"the Dask evaluator needs dask.distributed, which is not installed "
                          f"here ({e}); install evokernel's 'dask' extra: {EXTRA}") from e
    return distributed


def local_cluster(devices: Sequence[int | str], build_workers: int | None = None, *,
                  env: dict[str, str] | None = None) -> Any:
    """A Dask SpecCluster on this host: one single-thread worker per GPU (``GPU=1``,
    CUDA_VISIBLE_DEVICES its device) and one build worker (``build=build_workers`` threads),
    each under a Nanny that replaces it when it dies. The scheduler listens on 127.0.0.1.

    Args:
        devices: GPU indices (or UUIDs), one worker each; may be empty (builds only).
        build_workers: builds at once (>= 1; None: the local engine's default,
            evokernel.build.host.default_build_workers).
        env: extra environment of every worker (tests use it for PYTHONPATH).
    Returns: the cluster (``cluster.close()`` stops it).
    Raises: ConfigError without the dask extra; ValueError for build_workers < 1.
    """
    distributed = require_distributed()
    import dask

    from evokernel.build.host import default_build_workers
    build_workers = default_build_workers() if build_workers is None else build_workers
    if build_workers < 1:
        raise ValueError(f"build_workers must be >= 1, got {build_workers}")
    base = {"memory_limit": 0, "silence_logs": logging.ERROR, "host": "127.0.0.1",
            "dashboard_address": ":0"}
    workers: dict[str, Any] = {
        f"gpu-{d}": {"cls": distributed.Nanny, "options": dict(
            base, nthreads=1, resources={GPU_RESOURCE: 1},
            env=dict(env or {}, CUDA_VISIBLE_DEVICES=str(d)))} for d in devices}
    workers["build"] = {"cls": distributed.Nanny, "options": dict(
        base, nthreads=build_workers, resources={BUILD_RESOURCE: build_workers},
        env=dict(env or {}, CUDA_VISIBLE_DEVICES=""))}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"host": "127.0.0.1", "dashboard": False}}
    with dask.config.set(LOCAL_CONFIG):
        return distributed.SpecCluster(workers=workers, scheduler=scheduler,
                                       silence_logs=logging.ERROR)


def connect(address: str | Any, *, timeout_s: float = 30.0) -> Any:
    """A ``distributed.Client`` of the scheduler at ``address`` (a "tcp://host:port" string or
    a cluster object).

    Raises: ClusterError naming the address when no scheduler answers within ``timeout_s``;
        ConfigError without the dask extra."""
    distributed = require_distributed()
    where = getattr(address, "scheduler_address", address)
    try:
        return distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"Dask scheduler {where}: no answer within {timeout_s:.0f} s ({e}); "
                           "start one (`dask scheduler`) and its workers, or leave "
                           "--dask-scheduler out to use this host's GPUs") from e


def gpu_workers(client: Any) -> list[str]:
    """The addresses of the workers that advertise ``GPU_RESOURCE``, sorted."""
    info = client.scheduler_info(n_workers=-1) if _takes_n_workers(client) \
        else client.scheduler_info()
    return sorted(a for a, w in info["workers"].items()
                  if w.get("resources", {}).get(GPU_RESOURCE, 0) >= 1)


def _takes_n_workers(client: Any) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters

