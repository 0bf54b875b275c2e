"""What runs on the Dask workers (imported there, and by the driver only once dask.distributed
is known to be installed: evokernel.cluster.connect.require_distributed).

    build_candidate(candidate, settings)   on a build worker: the engine's Builder, contained
    gpu_arch()                             on a GPU worker: the arch to build for
    setup_gpu(setup, options)              on a GPU worker: its slot set up for a problem
    evaluate_on_gpu(setup, candidate, options)   on a GPU worker: one candidate's verdict
    close_gpu()                            on a GPU worker: its engine worker stopped
    WorkerSetup                            the worker plugin: no keys in a worker's environment

A GPU worker holds one ``GpuSlot``: per problem it was asked about (the last MAX_PROBLEMS), the
local engine's own ``WorkerHandle`` (spawn, timeout, kill, respawn) and ``SharedGpuGuard``. Candidate code
runs only in the handle's contained worker process (evokernel.engine.worker, in the jail of
evokernel.sandbox.workers), so a hang, a crash or an illegal address kills and replaces that
process and fails that candidate with timeout, worker_crash or cuda_fault, as on one host. The
Dask worker process runs no candidate code; if it dies all the same, its Nanny replaces it and
the driver fails the candidate it held (evokernel.cluster.evaluator).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

from evokernel.build.builder import BuildResult, Builder
from evokernel.config import EvalConfig, RunConfig
from evokernel.engine.gpu_share import NvmlProcesses, SharedGpuGuard
from evokernel.engine.handle import WorkerHandle
from evokernel.records import Candidate, EvalResult
from evokernel.sandbox import is_secret, protect_environ, worker_env

#: Problems whose engine workers a GPU worker keeps set up at once (EvalConfig-independent:
#: each holds the problem's tensors in GPU memory, ~13 GiB for the softmax problem).
MAX_PROBLEMS = 4
_lock = threading.Lock()
_builders: dict[str, Builder] = {}


def _eval_config(config: dict[str, Any]) -> EvalConfig:
    return RunConfig.from_dict({"evaluation": config}).evaluation


def _containment(config: EvalConfig) -> Any:
    from evokernel.sandbox.support import containment_for
    return containment_for(config)


def build_candidate(candidate: dict[str, Any], settings: dict[str, Any]) -> BuildResult:
    """Build one candidate (a Candidate dict) on this worker, as the local engine does.

    Args:
        settings: {"arch": "9.0", "config": EvalConfig dict}; the build cache is the config's
            (on many hosts it must be one shared folder: README, "Many GPUs and hosts").
    Returns: the BuildResult (never raises for a bad candidate).
    Raises: SandboxError as the local engine would (``require_sandbox`` and no containment).
    """
    key = json.dumps(settings, sort_keys=True)
    with _lock:
        builder = _builders.get(key)
        if builder is None:
            config = _eval_config(settings["config"])
            builder = _builders[key] = Builder(
                config.cache_path, arch=settings["arch"], timeout_s=config.build_timeout_s,
                workers=1, trim_headers=config.trim_headers, sandbox=_containment(config))
    return builder.build(Candidate.from_dict(candidate))


def setup_key(setup: dict[str, Any]) -> str:
    """What makes two set-up messages the same problem (their torch.compile baseline aside:
    the first worker's is handed on to later ones)."""
    problem = {k: v for k, v in setup["problem"].items() if k != "compile_ms"}
    body = json.dumps({**setup, "problem": problem}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _device() -> str:
    """This worker's GPU: the first entry of its CUDA_VISIBLE_DEVICES (its Nanny set it)."""
    return (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"


def _device_uuid(device: str) -> str:
    """The GPU's UUID from NVML (no CUDA context in this process); "" when unknown."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = (pynvml.nvmlDeviceGetHandleByUUID(device) if device.startswith("GPU-")
             else pynvml.nvmlDeviceGetHandleByIndex(int(device)))
        uuid = pynvml.nvmlDeviceGetUUID(h)
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    except Exception:  # noqa: BLE001 -- no NVML, or not a GPU index: the guard goes without
        return ""


def gpu_arch() -> str:
    """On a GPU worker: the arch to build for, "9.0" style: its GPU's from NVML (no CUDA
    context here), else evokernel.build.builder.device_arch (TORCH_CUDA_ARCH_LIST).
    Raises: ConfigError when neither knows."""
    try:
        import pynvml
        pynvml.nvmlInit()
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(
            pynvml.nvmlDeviceGetHandleByIndex(int(_device())))
        return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 -- no NVML or no GPU here
        from evokernel.build.builder import device_arch
        return device_arch()


class GpuSlot:
    """A GPU worker's engine workers, one per problem, for the last ``MAX_PROBLEMS`` problems
    it was asked about (see the module docstring): several drivers (or evaluators of one
    driver, as the bench's) share a worker as they would share a GPU with the local engine,
    each problem keeping its own set-up; the least recently used is stopped beyond that."""

    def __init__(self) -> None:
        self.problems: OrderedDict[str, tuple[WorkerHandle, SharedGpuGuard, dict[str, Any]]] = \
            OrderedDict()
        self.lock = threading.Lock()

    def ensure(self, setup: dict[str, Any], options: dict[str, Any]
               ) -> tuple[WorkerHandle, SharedGpuGuard, dict[str, Any]]:
        """The engine worker of ``setup``'s problem, set up now unless it already is.
        Returns: (handle, guard, info). Raises: ProblemError when the problem cannot be set
        up (the worker's error in it)."""
        key = setup_key(setup)
        if key in self.problems:              # its handle respawns a dead worker itself
            self.problems.move_to_end(key)
            return self.problems[key]
        self.drop(key)
        while len(self.problems) >= int(options.get("max_problems", MAX_PROBLEMS)):
            self.drop(next(iter(self.problems)))
        config = _eval_config(setup["config"]["evaluation"])
        device = _device()
        containment = _containment(config)
        jail = None
        if containment is not None and containment.mode != "none":
            from evokernel.sandbox.workers import GpuWorkerJail
            jail = GpuWorkerJail(containment, config.cache_path)
        log_dir = Path(options.get("log_dir") or config.cache_path / "logs")
        name = setup["problem"]["name"]
        SharedGpuGuard(NvmlProcesses(_device_uuid(device)), None, policy=config.gpu_sharing,
                       wait_s=config.gpu_wait_s).wait_until_free()
        handle = WorkerHandle(setup, env=worker_env(dict(os.environ, **options.get("env", {}))),
                              device_index=device,  # type: ignore[arg-type]
                              log_path=log_dir / f"worker-{name}-dask-gpu{device}.log",
                              setup_timeout_s=max(900.0, config.eval_timeout_s),
                              entry=options.get("entry", "evokernel.engine.worker"),
                              sandbox=jail)
        info = dict(handle.start())
        guard = SharedGpuGuard(NvmlProcesses(info.get("uuid", "")), info.get("reference_ms"),
                               policy=config.gpu_sharing, wait_s=config.gpu_wait_s)
        self.problems[key] = (handle, guard, info)
        return self.problems[key]

    def evaluate(self, setup: dict[str, Any], candidate: dict[str, Any],
                 options: dict[str, Any]) -> EvalResult:
        """One candidate's verdict in its problem's engine worker (set up first if need be)."""
        handle, guard, _ = self.ensure(setup, options)
        cand = Candidate.from_dict(candidate)
        timeout_s = _eval_config(setup["config"]["evaluation"]).eval_timeout_s
        return guard.run(lambda: handle.evaluate(cand, timeout_s))

    def drop(self, key: str) -> None:
        """Stop the engine worker of one problem (its setup_key), if there is one."""
        held = self.problems.pop(key, None)
        if held is not None:
            held[0].close()

    def close(self, key: str | None = None) -> None:
        """Stop one problem's engine worker (``key``), or all of them."""
        for k in [key] if key is not None else list(self.problems):
            self.drop(k)


_slot = GpuSlot()


def setup_gpu(setup: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Set this GPU worker's slot up for a problem (a setup_message). Returns: the engine
    worker's info dict (device, reference_ms, floors, ...), with "dask_worker": this worker's
    address. Raises: ProblemError when the problem cannot be set up on this GPU."""
    with _slot.lock:
        info = dict(_slot.ensure(setup, options)[2])
    return dict(info, dask_worker=_address())


def evaluate_on_gpu(setup: dict[str, Any], candidate: dict[str, Any],
                    options: dict[str, Any]) -> EvalResult:
    """Gate and time one (built) candidate on this worker's GPU. Never raises for a bad
    candidate. Raises: ProblemError when a new engine worker cannot set the problem up."""
    with _slot.lock:
        return _slot.evaluate(setup, candidate, options)


def close_gpu(setup: dict[str, Any] | None = None) -> bool:
    """Stop this worker's engine worker of ``setup``'s problem (the driver is done with it),
    or all of them (None). Returns True."""
    with _slot.lock:
        _slot.close(None if setup is None else setup_key(setup))
    return True


def _address() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().address)
    except ValueError:
        return "?"


class WorkerSetup(WorkerPlugin):
    """Registered by every driver on every worker, now and as they join: drops credentials
    from the Dask worker's own environment (workers started by a LocalCluster inherit the
    driver's) and makes the process non-dumpable, so that nothing a candidate's process could
    reach holds a key. It has no teardown: registering it again (each evaluator does) tears
    the old one down, and that must not stop another evaluator's engine workers; those exit
    when their Dask worker does (their pipe closes), or are stopped by their evaluator."""

    name = "evokernel-worker-setup"

    def setup(self, worker: Any) -> None:
        for k in [k for k, v in os.environ.items() if is_secret(k, v)]:
            del os.environ[k]
        protect_environ()
