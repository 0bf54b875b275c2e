"""Replay a recorded search on this machine's GPU: every kernel the recorded run made (from its
model's replies, as the run stored them) is built, gated and timed again here, generation by
generation, into a new run directory. No LLM is asked anything: a replay re-measures the
recorded search, it does not search again (a new search on another GPU would select other
parents, ask other questions and miss the reply cache).

    replay(recorded, run_dir, evaluator=None)   -> ReplayResult (rows: recorded vs here)

The new run directory is an ordinary run (``evokernel show`` and ``report`` read it): the
recorded candidates with this machine's verdicts, the recorded generations with their recorded
populations, the recorded run's reply cache copied beside it, and meta ``replay_of`` naming the
recorded run, its device and who answered its requests (``show`` says it is a replay).
"""
from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from evokernel.engine.factory import require_gpu
from evokernel.errors import ConfigError
from evokernel.problem import load_problem
from evokernel.records import Candidate, EvalResult
from evokernel.runs.store import RunStore
from evokernel.search.archive import Archive
from evokernel.search.toolbox import Individual, logbook_record

NO_GPU = ("it builds, gates and times every recorded kernel again on this machine's GPU, and "
          "PyTorch sees none here; nothing was created (`evokernel show RUN_DIR` reads the "
          "recorded run without one)")


@dataclass(frozen=True)
class ReplayRow:
    """One recorded kernel: its recorded verdict (None: never evaluated there) and this one."""

    candidate: Candidate
    recorded: EvalResult | None
    replayed: EvalResult


@dataclass(frozen=True)
class ReplayResult:
    """A replay: its run directory, the recorded run's, and one row per replayed kernel in the
    recorded order. ``best``: the fastest kernel accepted here, or None."""

    run_dir: Path
    recorded_dir: Path
    rows: tuple[ReplayRow, ...]

    @property
    def best(self) -> ReplayRow | None:
        ok = [r for r in self.rows if r.replayed.accepted]
        return max(ok, key=lambda r: r.replayed.speedup) if ok else None

    def table(self) -> str:
        """The rows as text: generation, id, operator, recorded and replayed verdicts with
        their speedups over eager, and the idea's first line."""
        head = f"{'gen':>3}  {'id':8}  {'operator':9}  {'recorded':>18}  {'here':>18}  idea"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            idea = (r.candidate.idea.splitlines() or ["-"])[0][:60]
            lines.append(f"{r.candidate.generation:>3}  {r.candidate.id[:8]}  "
                         f"{r.candidate.operator[:9]:9}  {_verdict(r.recorded):>18}  "
                         f"{_verdict(r.replayed):>18}  {idea}")
        return "\n".join(lines)


def _verdict(r: EvalResult | None) -> str:
    if r is None:
        return "-"
    return f"{r.speedup:.3f}x" if r.accepted else r.reason.value[:18]


def replay(recorded: str | Path, run_dir: str | Path, *, evaluator: Any = None,
           on_generation: Callable[[int, list[ReplayRow]], None] | None = None) -> ReplayResult:
    """Re-evaluate every kernel of the run directory ``recorded`` into the new ``run_dir``.

    Args:
        evaluator: an evokernel.engine.evaluator.Evaluator; None: a CudaEvaluator for the
            recorded problem and evaluation config (this machine's own eager and torch.compile
            baselines are measured).
        on_generation: called with each generation and its rows as it is done.
    Returns: the ReplayResult.
    Raises: ConfigError when ``recorded`` is no run or holds no completed generation, or
        ``run_dir`` already holds a run; NoGPUError without a GPU for the default evaluator.
    """
    recorded, run_dir = Path(recorded), Path(run_dir)
    src = RunStore(recorded, read_only=True)
    try:
        cfg, meta, generations = src.config(), src.meta(), src.generations()
        candidates, results = src.candidates(), src.results()
        usage = src.llm_usage()
    finally:
        src.close()
    if not generations:
        raise ConfigError(f"{recorded}: no completed generation to replay")
    seed = recorded / "seed.py"
    problem = dataclasses.replace(
        load_problem(recorded / "problem.py", seed=seed if seed.is_file() else None),
        name=meta.get("problem", {}).get("name", "problem"))
    cfg = dataclasses.replace(cfg, run_dir=str(run_dir))
    if evaluator is None:
        require_gpu(f"replay: {NO_GPU}")
    store = RunStore.create(run_dir, cfg, problem)
    owns = evaluator is None
    try:
        if evaluator is None:
            from evokernel.engine.factory import make_evaluator
            evaluator = make_evaluator(problem, cfg.evaluation)
        store.set_meta("replay_of", {
            "run_dir": str(recorded), "device": meta.get("device"),
            "answered_by": usage.get("answered_by", []),
            "scripted_by": usage.get("scripted_by", [])})
        return _replay(store, evaluator, recorded, generations, candidates, results,
                       on_generation)
    finally:
        store.close()
        if owns and evaluator is not None:
            evaluator.close()


def _replay(store: RunStore, evaluator: Any, recorded: Path,
            generations: list[dict[str, Any]], candidates: dict[str, Candidate],
            results: dict[str, EvalResult],
            on_generation: Callable[[int, list[ReplayRow]], None] | None) -> ReplayResult:
    cache = recorded / "llm_cache.sqlite"
    if cache.is_file():
        shutil.copy2(cache, store.run_dir / "llm_cache.sqlite")
    store.set_meta("device", evaluator.info)
    rows: list[ReplayRow] = []
    here: dict[str, EvalResult] = {}
    for g in generations:
        gen = g["generation"]
        batch = [c for c in candidates.values() if c.generation == gen and c.id in results]
        for c in batch:
            store.add_candidate(c)
        for r in evaluator.evaluate(batch, on_result=store.add_result):
            here[r.candidate_id] = r
        mine = [ReplayRow(c, results.get(c.id), here[c.id]) for c in batch]
        rows += mine
        population = [cid for cid in g["population"] if cid in here]
        scored = [Individual(candidates[cid], here[cid].speedup) for cid in population]
        best = max(scored, key=lambda i: i.fitness.values[0], default=None)
        accepted = sum(r.replayed.accepted for r in mine)
        store.end_generation(
            gen, population, best.candidate.id if best else None,
            best.fitness.values[0] if best else 0.0, accepted, len(batch), g.get("rng_state"),
            logbook=logbook_record(gen, scored, nevals=len(batch), accepted=accepted,
                                   cells=_cells(candidates, here), tokens=0) if scored else None)
        if on_generation is not None:
            on_generation(gen, mine)
    store.export_best()
    return ReplayResult(run_dir=store.run_dir, recorded_dir=recorded, rows=tuple(rows))


def _cells(candidates: dict[str, Candidate], verdicts: dict[str, EvalResult]) -> int:
    """The archive cells (evokernel.search.archive) the kernels replayed so far fill."""
    done = {cid: c for cid, c in candidates.items() if cid in verdicts}
    return len(Archive.rebuild(done, verdicts, lambda r: r.speedup))
