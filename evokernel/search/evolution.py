"""The DEAP (mu + lambda) search over kernels.

Each generation: plan every operator call first (evokernel.search.variation: the varOr split,
parents by DEAP's ``selTournament`` and different across calls, an idea category and a call index
per call), make the calls in two phases (all ideas first, near-duplicates across the generation
dropped, then all implementations and other calls: LLM calls are I/O-bound and run at once),
evaluate the offspring as one batch through ``toolbox.map(toolbox.evaluate, ...)``, send
failures to the repair operator, then keep ``population_size`` kernels with ``toolbox.select``
(by default the fittest of each archive cell first, evokernel.search.archive). A hall of fame
keeps the best kernels ever seen; a DEAP ``Logbook`` records each generation's statistics (kept
in the run store, shown by ``evokernel show``). With ``SearchConfig.islands`` > 1 each island is
such a population; all islands' calls of a generation are made at once, and every
``migration_interval`` generations DEAP's ``migRing`` moves the best kernels one island along.

``Evolution.toolbox`` is a ``deap.base.Toolbox`` (evokernel.search.toolbox lists its aliases):
register your own ``mutate``, ``mate``, ``select``, ``evaluate`` or ``map`` on it before ``run``.
``SearchConfig.strategy`` picks the default operators and ``select`` (evokernel.search.strategies).

The run store is written as each candidate finishes; a killed run resumes from its last complete
generation and re-evaluates nothing (``Evolution.run(resume=True)``). What resume needs is saved
with each generation: the surviving population and the state of the run's RNG, which DEAP's
operators draw from as the global ``random`` (with islands, the RNG state and every island's
population, as ``{"rng": state, "islands": [[id, ...], ...]}``). The archive, the lineages and
the Logbook are rebuilt from the store.
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
from evokernel.errors import ConfigError
from evokernel.engine.evaluator import Evaluator
from evokernel.engine.deferred import deferred_evaluator
from evokernel.engine.factory import require_gpu
from evokernel.operators.base import Crossover, Mutation, RepairOperator, SearchContext
from evokernel.problem import Problem, load_problem
from evokernel.records import Candidate, EvalResult
from evokernel.runs.store import RunStore
from evokernel.search.archive import Archive, sel_niches
from evokernel.search.contexts import GenerationContexts
from evokernel.search import strategies
from evokernel.search.runstate import (REPAIRABLE, GenerationStats, RunResult, batch_round,
                                       check_llm_run, connect_llm, discard_if_empty,
                                       generation_begun, generation_stats, prompt_device,
                                       raise_if_every_llm_call_failed, saved_state)
from evokernel.search.toolbox import (Individual, KernelEvaluation, OperatorChoice,
                                      SpeedupFitness, batch_map, logbook_record, new_logbook,
                                      seeded_global_random)
from evokernel.search.variation import (Plan, migrate_ring, number_calls, plan_island,
                                        run_calls)

__all__ = ["Evolution", "GenerationStats", "Individual", "REPAIRABLE", "RunResult",
           "SpeedupFitness"]

NO_DEFAULT_GPU = ("Evolution's default evaluator (CudaEvaluator) needs a CUDA GPU, and PyTorch "
                  "sees none here; nothing was created. Pass evaluator=... to run without one "
                  "(evokernel.demo.fake_evaluator.FakeEvaluator is a demonstration: its numbers "
                  "are not measurements)")


@dataclass
class Evolution:
    """A kernel search for one problem.

    Args:
        problem: a Problem or a built-in name / file path.
        config: the RunConfig (defaults: population 4, 8 operator calls per generation,
            3 generations, no LLM).
        mutations / crossovers / repair: operators (see evokernel.operators), the toolbox's
            ``mutate`` and ``mate``. Default: ``config.search.strategy``'s (search.strategies):
            with a model IdeaMutation + TuneMutation, LLMCrossover, Repair, without one
            TuneMutation only; a baseline's IdeaMutation and Repair, no crossover.
        evaluator: default CudaEvaluator on every visible GPU.
        dask: with the default evaluator, evaluate on Dask instead (engine.factory's ``dask``:
            True for this host's GPUs, or a scheduler address). Not saved in the run's config,
            so a resumed run may use another cluster.
        llm: default an LLMClient from config.llm when a model is set.
        on_generation: called after every generation with its GenerationStats.
    Attributes:
        toolbox: the DEAP toolbox (evokernel.search.toolbox): ``evaluate``, ``map``, ``mutate``,
            ``mate``, ``select``, ``select_parents``; register your own before ``run``.
    Raises:
        ConfigError: neither a mutation nor a crossover; a baseline strategy with neither an
            LLM nor mutations, or in a shape it does not allow (strategies.check).
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
    dask: str | bool | None = None
    toolbox: base.Toolbox = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.problem, Problem):
            self.problem = load_problem(self.problem, form=self.config.search.candidate_form)
        uses_llm = self.llm is not None or self.config.llm.model is not None
        # The operators passed in, else the strategy's (evokernel.search.strategies).
        self.mutations, self.crossovers, self.repair = strategies.operators(
            self.config.search, uses_llm, self.mutations, self.crossovers, self.repair)
        if not self.mutations and not self.crossovers:
            raise ConfigError("Evolution needs at least one mutation or crossover operator")
        self.toolbox = self._default_toolbox()

    def _default_toolbox(self) -> base.Toolbox:
        tb = base.Toolbox()
        self._evaluation = KernelEvaluation()
        tb.register("evaluate", self._evaluation)
        tb.register("map", batch_map)
        if self.mutations:
            tb.register("mutate", OperatorChoice(self.mutations))
        if self.crossovers:
            tb.register("mate", OperatorChoice(self.crossovers))
        survive = strategies.survival(self.config.search.strategy)   # None: evokernel's own
        if survive is None:
            tb.register("select", sel_niches, niche=self._niche)
        else:
            tb.register("select", survive)
        tb.register("select_parents", tools.selTournament, tournsize=2)
        return tb

    # ---------------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> RunResult:
        """Run (or resume) the search; returns when all generations ran, the LLM budget is spent
        (a generation begun is finished), or (batch mode) requests were written (``stopped``).

        Raises:
            ConfigError: bad config, an existing run dir without ``resume``, a resumed run
                of another strategy, or no seed kernel and no LLM to write one.
            NoGPUError: no GPU for the default evaluator.
        """
        problem: Problem = self.problem  # type: ignore[assignment]
        cfg = self.config
        if not (hasattr(self.toolbox, "mutate") or hasattr(self.toolbox, "mate")):
            raise ConfigError("Evolution.toolbox has neither 'mutate' nor 'mate' registered")
        run_dir = Path(cfg.run_dir or f"runs/{problem.name}-{time.strftime('%Y%m%d-%H%M%S')}")
        created = not run_dir.exists()
        resumed = RunStore(run_dir) if resume else None
        cfg = resumed.config() if resumed is not None else cfg   # a resumed run's own config
        strategies.check_resumed(cfg.search, self.config.search, run_dir)
        if self.llm is None and cfg.llm.model is not None:        # evokernel makes the client
            check_llm_run(cfg, resumed, run_dir, self.llm_batch)
        recorded = resumed.meta() if resumed is not None else None
        if self.evaluator is None and not isinstance(self.dask, str):
            self.evaluator = deferred_evaluator(recorded, self.llm_batch)  # batch, no GPU
            if self.evaluator is None:
                require_gpu(NO_DEFAULT_GPU)       # before any folder is made
        store = resumed if resumed is not None else RunStore.create(run_dir, cfg, problem)
        self._store = store
        self._search = cfg.search        # a resumed run goes on with the config it started with
        self._by_compile = cfg.evaluation.baseline == "compile"
        self.llm = connect_llm(self.llm, cfg, store, run_dir)
        if self.llm_batch is not None and self.llm is not None:
            self.llm_batch.attach(self.llm, store)
        owns_evaluator = self.evaluator is None
        if self.evaluator is None:
            from evokernel.engine.factory import make_evaluator
            try:
                self.evaluator = make_evaluator(  # a resumed run keeps its compile baseline
                    problem, cfg.evaluation,
                    compile_ms=store.compile_baseline_ms() if resume else None,
                    dask=self.dask)
            except BaseException:
                discard_if_empty(store, run_dir, created)
                raise
        self._evaluation.evaluator = self.evaluator
        self._evaluation.on_result = self._record_result
        try:
            self._device = prompt_device(recorded, self.evaluator.info)
            store.set_meta("device", self._device)
            return self._loop(problem, cfg, store, run_dir)
        except BaseException:
            discard_if_empty(store, run_dir, created)
            raise
        finally:
            if owns_evaluator:
                self.evaluator.close()

    def _loop(self, problem: Problem, cfg: RunConfig, store: RunStore,
              run_dir: Path) -> RunResult:
        sc = cfg.search
        self._candidates = store.candidates()
        self._results = store.results()
        self._stored: set[str] = set(self._results)
        self._archive = Archive(self._fitness_of)
        rng = random.Random(sc.seed)
        hof = tools.HallOfFame(maxsize=10, similar=lambda a, b: a.candidate.id == b.candidate.id)
        history: list[GenerationStats] = []
        self._logbook = new_logbook(store.logbook())
        done = store.generations()
        if done:
            last = done[-1]
            state, island_ids = saved_state(last["rng_state"], last["population"])
            islands = [[self._individual(self._candidates[i]) for i in ids]
                       for ids in island_ids]
            rng.setstate(state)
            start = last["generation"] + 1
            hof.update([self._individual(c) for c in self._candidates.values()
                        if c.id in self._results])
            logger.info("resuming {} after generation {}", run_dir, last["generation"])
        else:
            first = batch_round(lambda: self._initial(problem), 0, rng, self.llm_batch, store,
                                self.llm)
            if isinstance(first, str):
                return RunResult(run_dir=run_dir, generations=history, hall_of_fame=[],
                                 stopped=first, best_path=None, logbook=self._logbook)
            initial = self._evaluate(first)
            islands = [list(initial) for _ in range(sc.islands)]
            hof.update(initial)
            history.append(self._end_generation(0, islands, initial, rng))
            start = 1
        stopped = "completed"
        for gen in range(start, sc.generations + 1):
            if (self.llm is not None and self.llm.budget_exceeded()      # unless paid for
                    and not generation_begun(gen, self._candidates.values(), store)):
                stopped = "budget"
                logger.warning("LLM budget spent: stopping before generation {}", gen)
                break
            offspring = batch_round(lambda: self._offspring(gen, islands, rng), gen, rng,
                                    self.llm_batch, store, self.llm)
            if isinstance(offspring, str):
                stopped = offspring
                break
            islands = self._survivors(gen, islands, offspring, rng)
            everyone = [i for kids in offspring for i in kids]
            hof.update(everyone)
            history.append(self._end_generation(gen, islands, everyone, rng))
        best_path = store.export_best()
        fame = [(i.candidate, self._results[i.candidate.id]) for i in hof
                if self._results[i.candidate.id].accepted]
        return RunResult(run_dir=run_dir, generations=history, hall_of_fame=fame,
                         stopped=stopped, best_path=best_path, logbook=self._logbook)

    # -- pieces -------------------------------------------------------------------------------
    def _fitness_of(self, result: EvalResult) -> float:
        """A verdict's fitness: speedup over the run's baseline (eager, or torch.compile)."""
        return result.compile_speedup if self._by_compile else result.speedup

    def _individual(self, cand: Candidate) -> Individual:
        return Individual(cand, self._fitness_of(self._results[cand.id]))

    def _niche(self, individual: Individual) -> Any:
        return self._archive.niche(individual.candidate.id)

    def _initial(self, problem: Problem) -> list[Candidate]:
        if problem.seed_source is not None:
            return [Candidate(source=problem.seed_source, idea="seed kernel (round-0 port)",
                              operator="seed", generation=0)]
        if self.llm is None:
            raise ConfigError(f"{problem.path}: no seed kernel (expected "
                              f"{problem.path.parent / 'seeds' / problem.path.name}) and no LLM "
                              "to write one: pass --seed-kernel KERNEL.py or --model provider/name")
        from evokernel.operators import SeedPort
        port = SeedPort()(problem, SearchContext(
            problem=problem, generation=0, rng=random.Random(self._search.seed), llm=self.llm,
            device=self._device, candidate_form=self._search.candidate_form))
        if not port:
            raise ConfigError(f"{problem.path}: the LLM wrote no first kernel")
        return port

    def _record_result(self, r: EvalResult) -> None:
        """The evaluator's on_result: store each verdict as it comes."""
        self._store.add_result(r)
        self._stored.add(r.candidate_id)

    def _evaluate(self, cands: list[Candidate]) -> list[Individual]:
        """Store the candidates, evaluate those without a verdict through ``toolbox.map(
        toolbox.evaluate, ...)`` (DEAP's invalid-fitness idiom), and return them all as
        individuals with their fitness, in order, each id once.

        Raises: ConfigError when the toolbox's evaluate or map does not give one EvalResult
            per individual.
        """
        unique = list({c.id: c for c in cands}.values())
        for c in unique:
            self._store.add_candidate(c)
            self._candidates.setdefault(c.id, c)
        individuals = [Individual(c, None if c.id not in self._results
                                  else self._fitness_of(self._results[c.id])) for c in unique]
        invalid = [i for i in individuals if not i.fitness.valid]
        if invalid:
            verdicts = list(self.toolbox.map(self.toolbox.evaluate, invalid))
            if len(verdicts) != len(invalid):
                raise ConfigError(f"toolbox.map(toolbox.evaluate, ...) gave {len(verdicts)} "
                                  f"results for {len(invalid)} individuals")
            for ind, r in zip(invalid, verdicts):
                if not isinstance(r, EvalResult) or r.candidate_id != ind.candidate.id:
                    raise ConfigError(f"toolbox.evaluate gave {type(r).__name__} for candidate "
                                      f"{ind.candidate.id}; it must return that candidate's "
                                      "EvalResult")
                if r.candidate_id not in self._stored:
                    self._record_result(r)
                self._results[r.candidate_id] = r
                ind.fitness.values = (self._fitness_of(r),)
        return individuals

    def _offspring(self, gen: int, islands: list[list[Individual]],
                   rng: random.Random) -> list[list[Individual]]:
        """Plan, make and evaluate generation ``gen``'s calls, then its repair rounds; returns
        each island's offspring (repairs included).

        Raises: LLMPending (batch LLM mode) before anything of the generation is evaluated.
        """
        sc = self._search
        lambda_, cxpb = sc.offspring_per_generation, sc.crossover_prob    # DEAP's names
        view = GenerationContexts(
            generation=gen, candidates=self._candidates, results=self._results,
            fitness=self._fitness_of, problem=self.problem, llm=self.llm,   # type: ignore[arg-type]
            device=self._device, search=sc)
        with seeded_global_random(rng):
            plans = [p for k, pop in enumerate(islands)
                     for p in plan_island(pop, self.toolbox, view.lineage.related,
                                          lambda_=lambda_, cxpb=cxpb, mutpb=1.0 - cxpb,
                                          island=k)]
        plans = number_calls(plans, first_index=0, generation=gen)
        offspring: list[list[Individual]] = [[] for _ in islands]
        before = dict(self.llm.usage) if self.llm is not None else {}
        new = self._vary(plans, view, offspring)
        raise_if_every_llm_call_failed(self.llm, before, gen)
        calls = len(plans)
        for _ in range(sc.repair_attempts if self.repair else 0):
            # Each round repairs the previous round's children that failed fixably.
            plans = [Plan(self.repair, (i.candidate,), rng.getrandbits(64),
                          self._results[i.candidate.id], island=k)
                     for k, batch in enumerate(new) for i in batch
                     if self._results[i.candidate.id].reason in REPAIRABLE]
            if not plans:
                break
            plans = number_calls(plans, first_index=calls, generation=gen, categories=False)
            calls += len(plans)
            new = self._vary(plans, view, offspring)
        return offspring

    def _vary(self, plans: list[Plan], view: GenerationContexts,
              offspring: list[list[Individual]]) -> list[list[Individual]]:
        """Make the planned calls, evaluate all their children as one batch, and add each child
        to its plan's island in ``offspring``. Returns the new children by island."""
        outcome = run_calls(plans, view.context, set(view.seen))
        individuals = {i.candidate.id: i for i in
                       self._evaluate([c for batch in outcome.children for c in batch])}
        new: list[list[Individual]] = [[] for _ in offspring]
        for p, batch in zip(plans, outcome.children):
            new[p.island] += [individuals[c.id] for c in batch]
        for kids, more in zip(offspring, new):
            kids += more
        return new

    def _survivors(self, gen: int, islands: list[list[Individual]],
                   offspring: list[list[Individual]], rng: random.Random
                   ) -> list[list[Individual]]:
        """(mu + lambda) survival on each island with ``toolbox.select`` over the accepted
        kernels (all of them when none is accepted), then ring migration when it is due."""
        sc = self._search
        mu = sc.population_size                                            # DEAP's name
        self._archive = Archive.rebuild(
            {cid: c for cid, c in self._candidates.items() if c.generation <= gen},
            self._results, self._fitness_of)
        with seeded_global_random(rng):
            out = []
            for pop, kids in zip(islands, offspring):
                unique = list({i.candidate.id: i for i in pop + kids}.values())
                valid = [i for i in unique if self._results[i.candidate.id].accepted]
                out.append(list(self.toolbox.select(valid or unique, mu)))
            if sc.islands > 1 and gen % sc.migration_interval == 0:
                out = migrate_ring(out, sc.migrants,
                                   lambda i: self._results[i.candidate.id].accepted)
        return out

    def _end_generation(self, gen: int, islands: list[list[Individual]],
                        offspring: list[Individual], rng: random.Random) -> GenerationStats:
        population = list({i.candidate.id: i for pop in islands for i in pop}.values())
        stats = generation_stats(gen, population, islands, offspring, self._results,
                                 self.llm.usage if self.llm is not None else {})
        if gen == 0:
            self._archive = Archive.rebuild(self._candidates, self._results, self._fitness_of)
        record = logbook_record(gen, population, nevals=len(offspring), accepted=stats.valid,
                                cells=len(self._archive), tokens=stats.tokens)
        self._logbook.record(**record)
        # One population: the plain RNG state (the original format). Islands: every island too.
        state: Any = rng.getstate() if len(islands) == 1 else \
            {"rng": rng.getstate(), "islands": [list(ids) for ids in stats.islands]}
        self._store.end_generation(gen, list(stats.population), stats.best_id,
                                   stats.best_speedup, stats.valid, len(offspring), state,
                                   logbook=record)
        if self.on_generation is not None:
            self.on_generation(stats)
        return stats
