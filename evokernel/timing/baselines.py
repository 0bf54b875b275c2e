"""The ``torch.compile`` baseline (docs/architecture.md, stage 7), measured once per problem, device, torch
and CUDA version, and evaluation settings, then cached on disk.

The eager reference, the default fitness baseline, is timed again with every candidate, interleaved
with it (evokernel.engine.worker), so drift hits both alike. ``torch.compile`` takes seconds to minutes
to compile a reference, so its time is measured once, interleaved with eager, and kept in
``<cache>/baselines/<sha256>.json``. The key covers what can change the time: the problem file's
text, the GPU's name, torch's, CUDA's and Triton's versions, the timing settings and method
(:data:`METHOD_VERSION`), and whether the gate perturbs the reference's constant parameters (the
timed reference is the perturbed one). Not in it: the driver version, inductor's settings and
environment variables, and the host. Only a measurement whose medians reached the timing
settings' CI target is cached. Files are written to a temp file and then renamed, so workers on
several GPUs never read half a file. Delete ``<cache>/baselines/`` to measure again.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import math
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from evokernel.config import EvalConfig
from evokernel.jsonfile import write_json_atomic

#: Bumped whenever evokernel.timing.interleaved's method changes what a time means (session 4: the spin that
#: hides host time became the default), so older cached baselines are not reused.
METHOD_VERSION = 2


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def baseline_key(problem_source: str, device_name: str, torch_version: str,
                 cuda_version: str | None, config: EvalConfig) -> dict[str, Any]:
    """What a cached baseline depends on, as a JSON-able dict (the problem as its sha256)."""
    return {"method": METHOD_VERSION,
            "problem_sha256": hashlib.sha256(problem_source.encode()).hexdigest(),
            "device": device_name, "torch": torch_version, "cuda": cuda_version,
            "triton": _version("triton"),
            "timing": dataclasses.asdict(config.timing),
            "perturb_constant_parameters": config.gate.perturb_constant_parameters}


def baseline_path(cache_dir: Path, key: dict[str, Any]) -> Path:
    """``cache_dir/baselines/<sha256 of the key>.json``."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / "baselines" / f"{digest}.json"


def cached_compile_ms(cache_dir: Path, key: dict[str, Any],
                      measure: Callable[[], tuple[float, float, bool] | None]) -> float | None:
    """The cached ``torch.compile`` median (ms) for ``key``, else ``measure()``'s, then cached.

    measure: returns (eager_ms, compile_ms, converged), or None when torch.compile cannot handle
        the problem. Only a converged measurement (both medians within the CI target) is cached,
        so the next run measures again otherwise.
    A file that is unreadable, for another key, or holds no finite positive time is measured
    again, with a warning naming it.
    Returns: compile_ms, or None. Raises: what ``measure`` raises.
    """
    path = baseline_path(cache_dir, key)
    try:
        got = json.loads(path.read_text())
        ms = got["compile_ms"]
        if got["key"] != key:
            logger.warning("{}: cached for another key; measuring again", path)
        elif isinstance(ms, (int, float)) and not isinstance(ms, bool) and math.isfinite(ms) \
                and ms > 0:
            return float(ms)
        else:
            logger.warning("{}: compile_ms {!r} is no time; measuring again", path, ms)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("{}: unreadable ({}); measuring again", path, e)
    measured = measure()
    if measured is None:
        return None
    eager_ms, compile_ms, converged = measured
    if not converged:
        logger.info("torch.compile baseline not cached: its timing stopped before the CI target")
        return compile_ms
    try:
        write_json_atomic(path, {"key": key, "eager_ms": eager_ms, "compile_ms": compile_ms,
                                 "measured": datetime.datetime.now(datetime.timezone.utc)
                                 .isoformat(timespec="seconds")}, sort_keys=True)
    except OSError as e:              # an unwritable cache costs a re-measure next run, no more
        logger.warning("{}: could not cache the torch.compile baseline: {}", path, e)
    return compile_ms


def measure_compile_baseline(model: Any, sets: Sequence[Sequence[Any]], config: EvalConfig,
                             device: Any, flush: Any) -> tuple[float, float, bool] | None:
    """(eager_ms, compile_ms, converged): medians of ``model`` and ``torch.compile(model)``
    (default mode), timed interleaved under strict FP32 (TF32 off) and no_grad over the timing
    input ``sets``; converged: both medians' CIs reached ``config.timing.target_rel_ci``.
    Returns None, with the traceback printed to the worker's log, when torch.compile fails."""
    import torch

    from evokernel.precision import strict_fp32
    from evokernel.timing.interleaved import time_interleaved
    try:
        compiled = torch.compile(model)
        with strict_fp32(), torch.no_grad():
            stats = time_interleaved(
                {"eager": lambda i: model(*sets[i % len(sets)]),
                 "compile": lambda i: compiled(*sets[i % len(sets)])},
                config.timing, device=device, flush=flush)
        converged = all(s.rel_ci <= config.timing.target_rel_ci for s in stats.values())
        return stats["eager"].median_ms, stats["compile"].median_ms, converged
    except Exception:  # noqa: BLE001 - a problem torch.compile cannot handle: no compile baseline
        print("torch.compile baseline failed:\n" + traceback.format_exc(), flush=True)
        return None
