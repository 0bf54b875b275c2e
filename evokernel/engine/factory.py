"""The one place an evaluator is made from the config: every caller (the search, `check`,
`suite`, the bench, the experiment scripts) asks here, so another engine (a Dask cluster, a
remote service) plugs in by adding a branch, not by editing five call sites.

Two branches: the local engine (evokernel.engine.evaluator.CudaEvaluator, this host's GPUs, one
worker process each) and, with ``dask=``, the Dask evaluator (evokernel.cluster.evaluator:
builds on a cluster's CPU workers, one GPU worker per GPU, on one host or many)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evokernel.config import EvalConfig
from evokernel.errors import NoGPUError
from evokernel.engine import evaluator as local
from evokernel.engine.evaluator import Evaluator
from evokernel.problem import Problem


def make_evaluator(problem: Problem, config: EvalConfig, *, devices: Sequence[int] | None = None,
                   log_dir: Path | None = None, compile_ms: float | None = None,
                   dask: str | bool | None = None) -> Evaluator:
    """The evaluator ``config`` asks for, set up for ``problem`` (its GPU workers started).

    Args:
        problem: the reference problem.
        config: the evaluation settings.
        devices: GPU indices (default: every visible GPU, one worker each).
        log_dir: where worker logs go (default: <cache>/logs).
        compile_ms: a torch.compile baseline already measured for this problem on this GPU (a
            resumed run's), used instead of measuring or reading the cache again.
        dask: None or False: the local engine; True: a Dask cluster on this host's GPUs
            (``devices``); a scheduler address ("tcp://host:8786"): that cluster's workers.
    Returns: a ready Evaluator; the caller closes it.
    Raises: NoGPUError when no CUDA GPU is visible (here, unless a scheduler address is given);
        ProblemError when the problem cannot be set up on the GPU; ConfigError naming the
        ``dask`` extra when ``dask`` is asked for and not installed; ClusterError when the
        scheduler does not answer.
    """
    options = {k: v for k, v in (("devices", devices), ("log_dir", log_dir),
                                 ("compile_ms", compile_ms)) if v is not None}
    if dask:
        from evokernel.cluster.evaluator import DaskEvaluator
        return DaskEvaluator(problem, config, scheduler=None if dask is True else dask,
                             **options)
    return local.CudaEvaluator(problem, config, **options)


def require_gpu(message: str) -> None:
    """Raises NoGPUError(``message``) when PyTorch sees no CUDA GPU, for callers that check
    before creating anything (torch is imported here, lazily)."""
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(message)
