"""The DEAP (mu + lambda) search over kernels.

Each generation: plan every operator call first (parents by tournament, operator by the
crossover/mutation split), run all the calls concurrently (LLM calls are I/O-bound), evaluate the
offspring as one batch, send failures to the repair operator, then keep the ``population_size``
fastest correct kernels (DEAP ``selBest``) as the next parents. A hall of fame keeps the best
kernels ever seen. With ``SearchConfig.islands`` > 1 each island is such a population; all
islands' calls of a generation are made at once, and every ``migration_interval`` generations
the best kernels move one island along a ring (evokernel.search.variation.migrate_ring).

The run store is written as each candidate finishes; a killed run resumes from its last complete
generation and re-evaluates nothing (``Evolution.run(resume=True)``). What resume needs is saved
with each generation: the surviving population and the RNG state (with islands, the RNG state
and every island's population, as ``{"rng": state, "islands": [[id, ...], ...]}``).

The batch LLM mode (``llm_batch``, evokernel.llm.batch_mode) hooks in after each round of calls
(``_batch_round``): uncached requests are written out and the run stops before the round is
evaluated (``stopped == "llm_batch"``); a resume makes the same calls, answered from the cache.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from deap import base, tools
from loguru import logger

from evokernel.config import RunConfig
from evokernel.errors import ConfigError, LLMError, LLMPending, NoGPUError
from evokernel.engine.evaluator import Evaluator
from evokernel.operators.base import (Attempt, Crossover, Mutation, RepairOperator,
                                      SearchContext)
from evokernel.problem import Problem, load_problem
from evokernel.records import Candidate, EvalResult, Reason
from evokernel.runs.store import RunStore
from evokernel.search.variation import Plan, migrate_ring, plan, run_plans

#: Rejections worth one LLM repair attempt (not hangs, crashes or cheats).
REPAIRABLE = frozenset({
    Reason.BUILD_ERROR, Reason.LOAD_ERROR, Reason.RUNTIME_ERROR, Reason.SHAPE_MISMATCH,
    Reason.DTYPE_MISMATCH, Reason.NON_FINITE, Reason.LOWER_PRECISION,
    Reason.ACCUMULATION_ERROR, Reason.UNSTABLE_DISTRIBUTION, Reason.WRONG_FUNCTION,
    Reason.OUT_OF_MEMORY, Reason.CUDA_FAULT, Reason.NONDETERMINISTIC})


class SpeedupFitness(base.Fitness):
    """DEAP fitness: one objective, speedup over the baseline, maximized. Failures get 0."""

    weights = (1.0,)


class Individual:
    """A DEAP individual: a candidate and its ``(speedup,)`` fitness."""

    __slots__ = ("candidate", "fitness")

    def __init__(self, candidate: Candidate, speedup: float):
        self.candidate = candidate
        self.fitness = SpeedupFitness((speedup,))

    def __repr__(self) -> str:
        return f"Individual({self.candidate.id}, {self.fitness.values[0]:.3f}x)"


@dataclass(frozen=True)
class GenerationStats:
    """What one generation produced. ``best_speedup`` is the best in the population so far.
    ``population`` holds every island's survivors (each id once); ``islands`` each island's."""

    generation: int
    best_id: str | None
    best_speedup: float
    valid: int
    total: int
    population: tuple[str, ...]
    tokens: int = 0
    cost_usd: float = 0.0
    islands: tuple[tuple[str, ...], ...] = ()


@dataclass
class RunResult:
    """A finished (or budget-stopped) search."""

    run_dir: Path
    generations: list[GenerationStats]
    hall_of_fame: list[tuple[Candidate, EvalResult]]
    stopped: str = "completed"                 # or "budget", or "llm_batch" (requests out)
    best_path: Path | None = None

    @property
    def best(self) -> tuple[Candidate, EvalResult] | None:
        return self.hall_of_fame[0] if self.hall_of_fame else None


@dataclass
class Evolution:
    """A kernel search for one problem.

    Args:
        problem: a Problem or a built-in name / file path.
        config: the RunConfig (defaults: population 4, 8 operator calls per generation,
            3 generations, no LLM).
        mutations / crossovers / repair: operators (see evokernel.operators). Default: with a
            model configured, IdeaMutation + TuneMutation, LLMCrossover, Repair; without one,
            TuneMutation only.
        evaluator: default CudaEvaluator on every visible GPU.
        llm: default an LLMClient from config.llm when a model is set.
        on_generation: called after every generation with its GenerationStats.
        llm_batch: an evokernel.llm.batch_mode.BatchMode (``--llm-batch``): see the module doc.
    """

    problem: Problem | str
    config: RunConfig = field(default_factory=RunConfig)
    mutations: Sequence[Mutation] | None = None
    crossovers: Sequence[Crossover] | None = None
    repair: RepairOperator | None = None
    evaluator: Evaluator | None = None
    llm: Any = None
    on_generation: Callable[[GenerationStats], None] | None = None
    llm_batch: Any = None
    _history: list[GenerationStats] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.problem, Problem):
            self.problem = load_problem(self.problem)
        uses_llm = self.llm is not None or self.config.llm.model is not None
        if self.mutations is None:
            from evokernel.operators import IdeaMutation, TuneMutation
            self.mutations = [IdeaMutation(), TuneMutation()] if uses_llm else [TuneMutation()]
        if self.crossovers is None:
            if uses_llm:
                from evokernel.operators import LLMCrossover
                self.crossovers = [LLMCrossover()]
            else:
                self.crossovers = []
        if self.repair is None and uses_llm:
            from evokernel.operators import Repair
            self.repair = Repair()
        if not self.mutations and not self.crossovers:
            raise ConfigError("Evolution needs at least one mutation or crossover operator")

    # ---------------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> RunResult:
        """Run (or resume) the search; returns when all generations ran or the budget is spent.

        Raises:
            ConfigError: bad config, an existing run dir without ``resume``, or no seed kernel
                and no LLM to write one.
            NoGPUError: no GPU for the default evaluator.
        """
        problem: Problem = self.problem  # type: ignore[assignment]
        cfg = self.config
        run_dir = Path(cfg.run_dir or f"runs/{problem.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        sends = self.llm_batch is None or self.llm_batch.submit   # batch export: nothing sent
        if self.llm is None and cfg.llm.model is not None and not resume and sends:
            from evokernel.llm.client import LLMClient
            missing = LLMClient(cfg.llm).missing_credentials()
            if missing:
                raise ConfigError(f"{cfg.llm.model}: set {', '.join(missing)} (litellm reads the "
                                  "provider's key from the environment), or pass --api-base for "
                                  "a local server")
        if self.evaluator is None:
            _require_gpu()                        # before any folder is made
        created = not run_dir.exists()
        if resume:
            store = RunStore(run_dir)
            cfg = store.config()
        else:
            store = RunStore.create(run_dir, cfg, problem)
        self._store = store
        self._search = cfg.search        # a resumed run goes on with the config it started with
        self._fitness_key = (lambda r: r.compile_speedup) if \
            cfg.evaluation.baseline == "compile" else (lambda r: r.speedup)
        if self.llm is None and cfg.llm.model is not None:
            from evokernel.llm.client import LLMClient
            self.llm = LLMClient(cfg.llm, cache_path=run_dir / "llm_cache.sqlite",
                                 on_usage=store.record_llm_call, spent=store.llm_usage())
        elif self.llm is not None and getattr(self.llm, "on_usage", False) is None:
            self.llm.on_usage = store.record_llm_call   # a client passed in: record its calls
        if self.llm_batch is not None and self.llm is not None:
            self.llm_batch.attach(self.llm)
        owns_evaluator = self.evaluator is None
        if self.evaluator is None:
            from evokernel.engine.factory import make_evaluator
            try:
                self.evaluator = make_evaluator(  # a resumed run keeps its compile baseline
                    problem, cfg.evaluation,
                    compile_ms=store.compile_baseline_ms() if resume else None)
            except BaseException:
                _discard_if_empty(store, run_dir, created)
                raise
        try:
            store.set_meta("device", self.evaluator.info)
            self._history = []              # this call's generations (_loop appends)
            return self._loop(problem, cfg, store, run_dir)
        except LLMPending as e:        # the batch mode wrote a round's requests out
            return self._stopped_for_batch(run_dir, e)
        except BaseException:
            _discard_if_empty(store, run_dir, created)
            raise
        finally:
            if owns_evaluator:
                self.evaluator.close()

    def _loop(self, problem: Problem, cfg: RunConfig, store: RunStore,
              run_dir: Path) -> RunResult:
        sc = cfg.search
        self._candidates = store.candidates()
        self._results = store.results()
        rng = random.Random(sc.seed)
        hof = tools.HallOfFame(maxsize=10, similar=lambda a, b: a.candidate.id == b.candidate.id)
        history: list[GenerationStats] = self._history  # the batch mode's stop returns them
        done = store.generations()
        if done:
            last = done[-1]
            state, island_ids = _saved_state(last["rng_state"], last["population"])
            islands = [[self._individual(self._candidates[i]) for i in ids]
                       for ids in island_ids]
            rng.setstate(state)
            start = last["generation"] + 1
            hof.update([self._individual(c) for c in self._candidates.values()
                        if c.id in self._results])
            logger.info("resuming {} after generation {}", run_dir, last["generation"])
        else:
            initial = [self._individual(c) for c in self._evaluate(self._initial(problem))]
            islands = [list(initial) for _ in range(sc.islands)]
            hof.update(initial)
            history.append(self._end_generation(0, islands, initial, rng))
            start = 1
        stopped = "completed"
        for gen in range(start, sc.generations + 1):
            if self.llm is not None and self.llm.budget_exceeded():
                stopped = "budget"
                logger.warning("LLM budget spent: stopping before generation {}", gen)
                break
            plans = [p for k, pop in enumerate(islands)
                     for p in plan(pop, rng, sc.offspring_per_generation,
                                   mutations=self.mutations or (),
                                   crossovers=self.crossovers or (),
                                   crossover_prob=sc.crossover_prob, island=k)]
            offspring: list[list[Individual]] = [[] for _ in islands]
            before = dict(self.llm.usage) if self.llm is not None else {}
            new = self._vary(plans, gen, offspring)
            self._check_llm(before, gen)
            for _ in range(sc.repair_attempts if self.repair else 0):
                # Each round repairs the previous round's children that failed fixably.
                plans = [Plan(self.repair, (i.candidate,), rng.getrandbits(64),
                              self._results[i.candidate.id], island=k)
                         for k, batch in enumerate(new) for i in batch
                         if self._results[i.candidate.id].reason in REPAIRABLE]
                if not plans:
                    break
                new = self._vary(plans, gen, offspring)
            islands = [self._select(pop + kids, sc.population_size)
                       for pop, kids in zip(islands, offspring)]
            if sc.islands > 1 and gen % sc.migration_interval == 0:
                islands = migrate_ring(islands, sc.migrants, sc.population_size,
                                       lambda i: self._results[i.candidate.id].accepted)
            everyone = [i for kids in offspring for i in kids]
            hof.update(everyone)
            history.append(self._end_generation(gen, islands, everyone, rng))
        best_path = store.export_best()
        fame = [(i.candidate, self._results[i.candidate.id]) for i in hof
                if self._results[i.candidate.id].accepted]
        return RunResult(run_dir=run_dir, generations=history, hall_of_fame=fame,
                         stopped=stopped, best_path=best_path)

    # -- pieces -------------------------------------------------------------------------------
    def _individual(self, cand: Candidate) -> Individual:
        return Individual(cand, self._fitness_key(self._results[cand.id]))

    def _initial(self, problem: Problem) -> list[Candidate]:
        if problem.seed_source is not None:
            return [Candidate(source=problem.seed_source, idea="seed kernel (round-0 port)",
                              operator="seed", generation=0)]
        if self.llm is None:
            raise ConfigError(f"{problem.path}: no seed kernel (expected "
                              f"{problem.path.parent / 'seeds' / problem.path.name}) and no LLM "
                              "to write one: pass --seed-kernel KERNEL.py or --model provider/name")
        from evokernel.operators import SeedPort
        port = self._batch_round(
            lambda: SeedPort()(problem, self._context(0, random.Random(self._search.seed))), 0)
        if not port:
            raise ConfigError(f"{problem.path}: the LLM wrote no first kernel")
        return port

    def _evaluate(self, cands: list[Candidate]) -> list[Candidate]:
        """Store and evaluate the candidates not evaluated yet; return them all, in order."""
        unique = list({c.id: c for c in cands}.values())
        for c in unique:
            self._store.add_candidate(c)
            self._candidates.setdefault(c.id, c)
        todo = [c for c in unique if c.id not in self._results]
        if todo:
            assert self.evaluator is not None
            for r in self.evaluator.evaluate(todo, on_result=self._store.add_result):
                self._results[r.candidate_id] = r
        return unique

    def _context(self, gen: int, rng: random.Random) -> SearchContext:
        older = {cid: c for cid, c in self._candidates.items() if c.generation < gen}
        results = {cid: r for cid, r in self._results.items() if cid in older}
        attempts = [Attempt(idea=c.idea, operator=c.operator,
                            speedup=self._fitness_key(results[cid]),
                            reason=results[cid].reason.value)
                    for cid, c in older.items() if cid in results and c.operator != "seed"]
        sc = self._search
        return SearchContext(problem=self.problem, generation=gen, rng=rng,  # type: ignore[arg-type]
                             llm=self.llm, results=results, history=attempts,
                             seen_ids=frozenset(older),
                             device=dict(self.evaluator.info) if self.evaluator else {},
                             ideas_per_call=sc.ideas_per_call,
                             implementations_per_idea=sc.implementations_per_idea)

    def _vary(self, plans: list[Plan], gen: int,
              offspring: list[list[Individual]]) -> list[list[Individual]]:
        """Make the planned calls at once, evaluate all their children as one batch, and add
        each child to its plan's island in ``offspring``. Returns the new children by island."""
        seen = {cid for cid, c in self._candidates.items() if c.generation < gen}
        batches = self._batch_round(lambda: run_plans(
            plans, lambda p: self._context(gen, random.Random(p.seed)), set(seen)), gen)
        self._evaluate([c for batch in batches for c in batch])
        new: list[list[Individual]] = [[] for _ in offspring]
        for p, batch in zip(plans, batches):
            new[p.island] += [self._individual(c) for c in batch]
        for kids, more in zip(offspring, new):
            kids += more
        return new

    # -- the batch LLM mode (--llm-batch) ---------------------------------------------------
    def _batch_round(self, calls: Callable[[], Any], gen: int) -> Any:
        """``calls()`` (a round of operator calls) with the batch mode's requests handled: none
        pending, its result; pending and submitted, the round made again from the cache;
        pending and written out, LLMPending (raised by BatchMode.flush), before anything of the
        round is stored or evaluated."""
        while True:
            out = calls()
            if self.llm_batch is None or not self.llm_batch.flush(self._store, gen, self.llm):
                return out

    def _stopped_for_batch(self, run_dir: Path, pending: LLMPending) -> RunResult:
        """The RunResult of a run stopped by the batch mode: the generations this call
        completed, the best accepted kernels so far."""
        logger.info("stopping for the LLM batch: {}", pending)
        accepted = [c for cid, c in self._candidates.items()
                    if cid in self._results and self._results[cid].accepted]
        accepted.sort(key=lambda c: -self._fitness_key(self._results[c.id]))
        return RunResult(run_dir=run_dir, generations=list(self._history),
                         hall_of_fame=[(c, self._results[c.id]) for c in accepted[:10]],
                         stopped="llm_batch", best_path=self._store.export_best())

    def _check_llm(self, before: dict[str, Any], gen: int) -> None:
        """Stop the run when every LLM call of this generation failed (a wrong key, a dead
        endpoint): going on would quietly turn an LLM search into a tune-only one.

        Raises: LLMError naming the last error; the store keeps everything for --resume.
        """
        if self.llm is None:
            return
        after = self.llm.usage
        answered = (after.get("calls", 0) + after.get("cache_hits", 0)
                    - before.get("calls", 0) - before.get("cache_hits", 0))
        failed = after.get("errors", 0) - before.get("errors", 0)
        if failed and not answered:
            raise LLMError(f"generation {gen}: all {failed} LLM calls failed; last error: "
                           f"{getattr(self.llm, 'last_error', None) or 'unknown'}. Fix the model "
                           "or key, then continue with `evokernel run --resume RUN_DIR`")

    def _select(self, individuals: list[Individual], mu: int) -> list[Individual]:
        unique = list({i.candidate.id: i for i in individuals}.values())
        valid = [i for i in unique if self._results[i.candidate.id].accepted]
        return tools.selBest(valid or unique, mu)

    def _end_generation(self, gen: int, islands: list[list[Individual]],
                        offspring: list[Individual], rng: random.Random) -> GenerationStats:
        population = list({i.candidate.id: i for pop in islands for i in pop}.values())
        best = max(population, key=lambda i: i.fitness.values[0])
        valid = sum(self._results[i.candidate.id].accepted for i in offspring)
        usage = self.llm.usage if self.llm is not None else {}
        stats = GenerationStats(
            generation=gen, best_id=best.candidate.id, best_speedup=best.fitness.values[0],
            valid=valid, total=len(offspring),
            population=tuple(i.candidate.id for i in population),
            tokens=int(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)),
            cost_usd=float(usage.get("cost_usd", 0.0)),
            islands=tuple(tuple(i.candidate.id for i in pop) for pop in islands))
        # One population: the plain RNG state (the original format). Islands: every island too.
        state: Any = rng.getstate() if len(islands) == 1 else \
            {"rng": rng.getstate(), "islands": [list(ids) for ids in stats.islands]}
        self._store.end_generation(gen, list(stats.population), stats.best_id,
                                   stats.best_speedup, valid, len(offspring), state)
        if self.on_generation is not None:
            self.on_generation(stats)
        return stats


def _rng_state(state: Any) -> tuple[Any, ...]:
    """random.Random state from its JSON form (lists back to tuples)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _require_gpu() -> None:
    """Raises NoGPUError when the default evaluator (CudaEvaluator) would find no GPU."""
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError("Evolution's default evaluator (CudaEvaluator) needs a CUDA GPU, and "
                         "PyTorch sees none here; nothing was created. Pass evaluator=... to run "
                         "without one (evokernel.demo.fake_evaluator.FakeEvaluator is a "
                         "demonstration: its numbers are not measurements)")


def _discard_if_empty(store: RunStore, run_dir: Path, created: bool) -> None:
    """Remove a run directory this run created when it failed before any candidate had a
    verdict (no GPU, a problem that cannot be set up), so that the same command can be retried;
    a run with results is kept for --resume."""
    if not created or store.read_only:
        return
    try:
        empty = not store.results()
    except Exception:
        return
    if empty:
        import shutil
        store.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        logger.info("{}: removed (the run failed before evaluating anything)", run_dir)


def _saved_state(state: Any, population: list[str]) -> tuple[tuple[Any, ...], list[list[str]]]:
    """The RNG state and the islands' populations (ids) saved with a generation: a plain RNG
    state with one population, or ``{"rng": state, "islands": [[id, ...], ...]}``."""
    if isinstance(state, dict):
        return _rng_state(state["rng"]), [list(ids) for ids in state["islands"]]
    return _rng_state(state), [list(population)]
