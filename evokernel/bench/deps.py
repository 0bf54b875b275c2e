"""What a bench run needs from the machine (:class:`BenchDeps`; tests pass fakes), and the
helpers the phases share: work folders, the budget clock, opening and closing evaluators."""
from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from loguru import logger

from evokernel.bench.plan import BenchPlan, CostModel
from evokernel.build.host import usable_cores
from evokernel.config import EvalConfig, TimingConfig
from evokernel.errors import ConfigError
from evokernel.records import Candidate

_MARKER = ".evokernel_bench_cache"       # a folder the bench may delete holds this file
T = TypeVar("T")
EvaluatorFactory = Callable[[Any, EvalConfig], Any]


@dataclass
class BenchDeps:
    """What run_bench needs from the machine; tests pass fakes.

    make_evaluator(problem, config): an Evaluator (CudaEvaluator on a GPU); must have
        ``evaluate(candidates)``, ``close()`` and ``info``.
    prebuild(candidates, config): build into config's cache; returns objects with ``ok``,
        ``build_s`` and ``cache_hit`` (evokernel.build.builder.BuildResult).
    do_bench(spec): the do_bench process's dict ({"problems": {name: {...}}} or {"error"}).
    prepare_cache(path): make an empty cache folder usable (device peaks copied or measured).
    run_faults(log_path): run the fault test; returns {"returncode", "tail"}.
    load_problem(name, form="load_inline"): a Problem, its seed kernel of that candidate form
        (evokernel.problem.load_problem). now: a monotonic clock in seconds. cores: CPU cores.
    """

    make_evaluator: EvaluatorFactory
    prebuild: Callable[[Sequence[Candidate], EvalConfig], list[Any]]
    do_bench: Callable[[dict[str, Any]], dict[str, Any]]
    prepare_cache: Callable[[Path], None] = lambda path: None
    run_faults: Callable[[Path], dict[str, Any]] = lambda log: {"returncode": None, "tail": ""}
    load_problem: Callable[[str], Any] = field(default=None)  # type: ignore[assignment]
    now: Callable[[], float] = time.perf_counter
    cores: int = field(default_factory=usable_cores)
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        if self.load_problem is None:
            from evokernel.problem import load_problem
            self.load_problem = load_problem


def fresh_dir(path: Path) -> Path:
    """Empty ``path`` (a folder the bench made: it holds the marker file) and return it.

    Raises: ConfigError if ``path`` exists, is not empty and has no marker, so a mistyped
        --work-dir never deletes someone's files.
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir() or (any(path.iterdir()) and not (path / _MARKER).is_file()):
            raise ConfigError(f"{path}: exists and was not made by `evokernel bench` (no "
                              f"{_MARKER}); refusing to delete it. Pick another --work-dir.")
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / _MARKER).write_text("a build cache made by evokernel bench; it deletes it at will\n")
    return path


def checked_cache_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if not (path / _MARKER).exists() and not any(path.iterdir()):
        (path / _MARKER).write_text("a build cache made by evokernel bench\n")
    return path


class WallClock:
    def __init__(self, now: Callable[[], float], budget_s: float):
        self.now, self.budget_s, self.t0 = now, budget_s, now()

    def elapsed(self) -> float:
        return self.now() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def open_evaluators(specs: Sequence[tuple[Any, EvalConfig]], deps: BenchDeps,
                     concurrency: int) -> tuple[list[Any], float]:
    """Create evaluators, ``concurrency`` at a time. Returns (evaluators or exceptions, wall s).
    Nothing is left running if the caller closes what it got."""
    t0 = deps.now()
    if not specs:
        return [], 0.0

    def make(spec: tuple[Any, EvalConfig]) -> Any:
        try:
            return deps.make_evaluator(*spec)
        except Exception as e:  # noqa: BLE001 - reported per evaluator
            logger.error("evaluator for {} failed to start: {}", getattr(spec[0], "name", "?"), e)
            return e

    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(specs)))) as pool:
        out = list(pool.map(make, specs))
    return out, deps.now() - t0


def close_all(evaluators: Sequence[Any]) -> None:
    """Close every evaluator (not exceptions), at once: each waits for its workers to exit."""
    live = [ev for ev in evaluators if not isinstance(ev, BaseException)]

    def close(ev: Any) -> None:
        try:
            ev.close()
        except Exception as e:  # noqa: BLE001 - closing must go on for the others
            logger.warning("closing an evaluator: {}", e)

    if live:
        with ThreadPoolExecutor(max_workers=len(live)) as pool:
            list(pool.map(close, live))


def try_evaluate(call: Callable[[], T], where: str) -> tuple[T | None, str]:
    """(call(), "") for an ``evaluate()`` call, or (None, "evaluate() raised ...") when it raises
    (e.g. a worker that cannot respawn), logged as "``where`` evaluate() raised"."""
    try:
        return call(), ""
    except Exception as e:  # noqa: BLE001 - the caller reports it and goes on
        logger.exception("{} evaluate() raised", where)
        return None, f"evaluate() raised {type(e).__name__}: {e}"


def bench_eval_config(plan: BenchPlan, cache: Path, *, build_workers: int | None = None) -> EvalConfig:
    return EvalConfig(cache_dir=str(cache), measure_compile=plan.compile_baseline,
                      timing=TimingConfig(hide_host_ms=plan.hide_host_ms),
                      build_workers=build_workers if build_workers is not None
                      else plan.build_workers)

