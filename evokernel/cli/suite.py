"""Running a problem set on the GPU for ``evokernel suite``: ``check`` one candidate per problem,
or ``run`` a search per problem, and turn each outcome into an evokernel.report.suite row.

Problems come from folders (KernelBench's ``level1/...`` layout or ``problems/``), files or
built-in names. A problem's candidate is, in order: the file named in a JSON mapping
``{"problem": "path.py"}``, the file ``<name>.py`` in a candidates folder, or the problem's own
seed kernel (``seeds/<name>.py`` beside it). A problem without a candidate, or whose evaluation
could not be set up, gets a row that counts as not correct: fast_p is over all problems.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from evokernel.config import EvalConfig, RunConfig
from evokernel.errors import EvokernelError, NoGPUError
from evokernel.problem import Problem, load_problem, load_problems
from evokernel.records import Candidate
from evokernel.report.suite import SuiteRow, missing_row, row_from_result


def suite_problems(specs: Sequence[str]) -> list[Problem]:
    """Every problem named by ``specs`` (folders, files or built-in names), in order, once.

    Raises:
        ProblemError: a malformed or missing problem (every malformed file named).
    """
    problems: dict[Path, Problem] = {}
    for spec in specs:
        batch = load_problems(spec) if Path(spec).is_dir() else [load_problem(spec)]
        for p in batch:
            problems.setdefault(p.path, p)
    return list(problems.values())


def candidate_files(problems: Sequence[Problem], kernels: str | None) -> dict[str, Path | None]:
    """Each problem's candidate file (None: it has none, not even a seed kernel).

    Args:
        kernels: None (seed kernels), a folder of ``<problem name>.py`` files, or a JSON file
            mapping problem names to kernel paths (relative paths are from the JSON's folder).
    Raises:
        EvokernelError: ``kernels`` names nothing usable.
    """
    mapping: dict[str, Path] = {}
    if kernels is not None:
        k = Path(kernels)
        if k.is_file() and k.suffix == ".json":
            try:
                mapping = {name: (k.parent / path) for name, path in json.loads(
                    k.read_text()).items()}
            except (ValueError, AttributeError) as e:
                raise EvokernelError(f"{k}: not a JSON object of problem -> kernel file") from e
        elif not k.is_dir():
            raise EvokernelError(f"{k}: not a folder of candidates or a JSON mapping")
    out: dict[str, Path | None] = {}
    for p in problems:
        if kernels is None:
            seed = p.path.parent / "seeds" / p.path.name
            out[p.name] = seed if p.seed_source is not None and seed.is_file() else None
        elif mapping:
            out[p.name] = mapping.get(p.name)
        else:
            f = Path(kernels) / f"{p.name}.py"
            out[p.name] = f if f.is_file() else None
    return out


def check_all(problems: Sequence[Problem], files: dict[str, Path | None], config: EvalConfig,
              make_evaluator: Callable[[Problem, EvalConfig], Any] | None = None
              ) -> list[SuiteRow]:
    """Gate and time each problem's candidate, one problem at a time (each gets fresh GPU
    workers with its own truths and baselines).

    Raises:
        NoGPUError: no CUDA GPU (from the evaluator).
    """
    if make_evaluator is None:
        from evokernel.engine.evaluator import CudaEvaluator
        make_evaluator = CudaEvaluator
    rows = []
    for p in problems:
        f = files.get(p.name)
        if f is None or not f.is_file():
            rows.append(missing_row(p.name, "no candidate" if f is None else f"no file {f}"))
            continue
        logger.info("suite: checking {} with {}", p.name, f)
        try:
            evaluator = make_evaluator(p, config)
        except NoGPUError:
            raise
        except EvokernelError as e:     # e.g. the problem fails to set up on the GPU
            rows.append(missing_row(p.name, f"error: {e}"))
            continue
        try:
            cand = Candidate(source=f.read_text(), idea=f"file {f}", operator="check")
            (res,) = evaluator.evaluate([cand])
            rows.append(row_from_result(p.name, str(f), res, evaluator.info))
        finally:
            evaluator.close()
    return rows


def search_all(problems: Sequence[Problem], config: RunConfig, run_root: Path,
               run: Callable[[Problem, RunConfig], Any] | None = None) -> list[SuiteRow]:
    """Run one search per problem (run directories ``run_root/<name>``; an existing one is
    resumed) and score each problem's best kernel.

    Raises:
        NoGPUError: no CUDA GPU (from the evaluator).
    """
    if run is None:
        from evokernel.search.evolution import Evolution

        def run(problem: Problem, cfg: RunConfig) -> Any:
            resume = (Path(cfg.run_dir or "") / "run.sqlite").exists()
            return Evolution(problem, cfg).run(resume=resume)
    rows = []
    for p in problems:
        cfg = dataclasses.replace(config, problem=str(p.path), run_dir=str(run_root / p.name))
        logger.info("suite: searching {} in {}", p.name, cfg.run_dir)
        try:
            result = run(p, cfg)
        except NoGPUError:
            raise
        except EvokernelError as e:
            rows.append(missing_row(p.name, f"error: {e}"))
            continue
        if result.best is None:
            rows.append(missing_row(p.name, "no kernel accepted"))
            continue
        from evokernel.runs.store import RunStore
        store = RunStore(cfg.run_dir, read_only=True)   # type: ignore[arg-type]
        try:
            device = store.meta().get("device", {})
        finally:
            store.close()
        _, res = result.best
        rows.append(row_from_result(p.name, str(result.best_path or cfg.run_dir), res, device))
    return rows
