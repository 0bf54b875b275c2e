"""Search strategies: four ways to spend one LLM token budget on a problem, chosen by
``SearchConfig.strategy`` and stored with the run's config (so ``evokernel run --resume`` goes on
with the same one). experiments/ablation_branching.py compares them under one budget.

- ``best_of_n``: independent samples from the seed kernel: every call writes one idea and one
  implementation for the seed, which stays the only parent (``toolbox.select`` is
  ``keep_the_seed``); ``offspring_per_generation`` samples per generation.
- ``sequential``: multi-turn refinement of one kernel: each generation, one idea and one
  implementation for the best kernel so far, the call shown that kernel's lineage (population 1;
  the default ``toolbox.select`` keeps the fastest kernel when it keeps one).
- ``branching``: Stanford CRFM's method (A. Ouyang, A. Mirhoseini, P. Liang, "Surprisingly Fast
  AI-Generated Kernels We Didn't Mean to Publish (Yet)", CRFM blog, 2025-05-28,
  https://crfm.stanford.edu/2025/05/28/fast-kernels.html): each generation, k ideas in natural
  language for each kept kernel and m implementations of each idea, all at once; the best
  ``population_size`` kernels become the next seeds (``toolbox.select`` is DEAP's ``selBest``).
- ``evokernel``: the default search: idea mutation and LLM-free tuning, crossover, repair,
  survival by archive cell (evokernel.search.archive), inspirations from other lineages.

The three baselines make their children with the idea mutation alone (operators.idea, repair as
configured), without crossover, and fix part of the search's shape (``FIXED`` below, applied by
``preset``); everything else (generations, seed, repair_attempts, candidate_form, and the sizes a
strategy leaves open) is the config's. ``Evolution`` builds its operators and ``toolbox.select``
from the strategy (``operators``, ``survival``); operators passed to it explicitly, and a
``select`` registered on its toolbox, win.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from deap import tools

from evokernel.config import STRATEGIES, SearchConfig
from evokernel.errors import ConfigError
from evokernel.operators import IdeaMutation, LLMCrossover, Repair, TuneMutation
from evokernel.operators.base import Crossover, Mutation, RepairOperator

__all__ = ["STRATEGIES", "FIXED", "check", "check_resumed", "describe", "fixed", "keep_the_seed",
           "operators", "preset", "survival"]

#: What each strategy fixes of a SearchConfig (field -> value; "population_size" as a value
#: means "the config's population_size"). The three baselines also keep one island.
FIXED: dict[str, dict[str, Any]] = {
    "best_of_n": {"population_size": 1, "ideas_per_call": 1, "implementations_per_idea": 1,
                  "crossover_prob": 0.0, "islands": 1},
    "sequential": {"population_size": 1, "offspring_per_generation": 1, "ideas_per_call": 1,
                   "implementations_per_idea": 1, "crossover_prob": 0.0, "islands": 1},
    "branching": {"offspring_per_generation": "population_size", "crossover_prob": 0.0,
                  "islands": 1},
    "evokernel": {},
}


def fixed(strategy: str, search: SearchConfig) -> dict[str, Any]:
    """The values ``strategy`` fixes (FIXED), resolved against ``search``: field -> value.

    Raises: ConfigError naming an unknown strategy and the known ones."""
    if strategy not in FIXED:
        raise ConfigError(f"search.strategy must be one of {', '.join(STRATEGIES)}, got "
                          f"{strategy!r}")
    return {k: getattr(search, v) if isinstance(v, str) else v
            for k, v in FIXED[strategy].items()}


def preset(strategy: str, base: SearchConfig | None = None) -> SearchConfig:
    """The SearchConfig of ``strategy``: ``base`` (default SearchConfig()) with ``strategy`` set
    and what the strategy fixes (FIXED) put in; every other field is ``base``'s. ``migrants``
    is capped at the population size (one island: no migration happens).

    e.g. ``preset("sequential", SearchConfig(generations=50, population_size=4))``: population
    1, 1 operator call of 1 idea x 1 implementation per generation, no crossover, 50
    generations. Raises: ConfigError for an unknown strategy or a bad resulting config."""
    base = base if base is not None else SearchConfig()
    values = fixed(strategy, base)
    if strategy == "evokernel":
        return dataclasses.replace(base, strategy=strategy)
    population = values.get("population_size", base.population_size)
    return dataclasses.replace(base, strategy=strategy, **values,
                               migrants=min(base.migrants, population))


def check(search: SearchConfig) -> None:
    """Raises: ConfigError when ``search`` does not have the shape its strategy fixes (a
    SearchConfig made by hand with a baseline's name), naming each field, its value and the
    strategy's, and ``preset`` as the way to make one."""
    wrong = [f"{k}={getattr(search, k)!r} (the strategy's: {v!r})"
             for k, v in fixed(search.strategy, search).items() if getattr(search, k) != v]
    if wrong:
        raise ConfigError(f"search.strategy {search.strategy!r} fixes {', '.join(wrong)}; make "
                          f"the config with evokernel.search.strategies.preset"
                          f"({search.strategy!r}, ...)")


def keep_the_seed(individuals: Sequence[Any], k: int) -> list[Any]:
    """best_of_n's ``toolbox.select``: the seed kernel (operator "seed") alone stays the parent;
    the fastest kernel (DEAP's ``selBest``) when the seed itself is not among ``individuals``
    (it was rejected), so the search can still go on. Returns one individual (``k`` is
    ignored: best_of_n's population is 1)."""
    seed = [i for i in individuals if i.candidate.operator == "seed"]
    return seed[:1] or tools.selBest(list(individuals), 1)


def survival(strategy: str) -> Callable[..., list[Any]] | None:
    """The strategy's ``toolbox.select`` (``select(individuals, k)``), or None for the search's
    default (evokernel.search.archive.sel_niches: sequential and evokernel)."""
    return {"best_of_n": keep_the_seed, "branching": tools.selBest}.get(strategy)


def operators(search: SearchConfig, uses_llm: bool, mutations: Sequence[Mutation] | None = None,
              crossovers: Sequence[Crossover] | None = None,
              repair: RepairOperator | None = None
              ) -> tuple[Sequence[Mutation], Sequence[Crossover], RepairOperator | None]:
    """The (mutations, crossovers, repair) of a search with config ``search``: those passed in
    (not None) as they are, else the strategy's defaults. evokernel: with an LLM (``uses_llm``)
    IdeaMutation + TuneMutation and LLMCrossover, without one TuneMutation alone and no
    crossover; a baseline: IdeaMutation alone, no crossover. Repair with an LLM, else None.

    Raises: ConfigError when ``search`` is not in its strategy's shape (``check``), or for a
    baseline with neither an LLM nor mutations passed in (its children are the LLM's ideas)."""
    check(search)
    evokernel = search.strategy == "evokernel"
    if mutations is None:
        if not (evokernel or uses_llm):
            raise ConfigError(f"search.strategy {search.strategy!r} makes its children with the "
                              "LLM's idea mutation: give a model (--model provider/name) or "
                              "pass mutations=")
        mutations = [IdeaMutation(), TuneMutation()] if evokernel and uses_llm else \
            [TuneMutation()] if evokernel else [IdeaMutation()]
    if crossovers is None:
        crossovers = [LLMCrossover()] if evokernel and uses_llm else []
    if repair is None and uses_llm:
        repair = Repair()
    return mutations, crossovers, repair


def check_resumed(stored: SearchConfig, made_for: SearchConfig, run_dir: Any) -> None:
    """Raises: ConfigError when a resumed run's stored config (``stored``) has another strategy
    than the one a search's operators were made for (``made_for``), naming both."""
    if stored.strategy != made_for.strategy:
        raise ConfigError(f"{run_dir}: the run was started with search.strategy "
                          f"{stored.strategy!r}, and this search was made for "
                          f"{made_for.strategy!r}: make it with the run's own config "
                          "(RunStore(run_dir).config(), as `evokernel run --resume` does)")


def describe(search: SearchConfig) -> str:
    """One line naming ``search``'s strategy and what it does per generation (``evokernel
    show``, the report)."""
    s = search
    return {
        "best_of_n": f"best_of_n: {s.offspring_per_generation} independent samples (1 idea x 1 "
                     "implementation) of the seed kernel per generation; the seed stays the "
                     "only parent",
        "sequential": "sequential: 1 idea x 1 implementation of the best kernel so far per "
                      "generation (refinement of one kernel)",
        "branching": f"branching (Stanford CRFM): {s.ideas_per_call} ideas x "
                     f"{s.implementations_per_idea} implementations for each of "
                     f"{s.population_size} kept kernels per generation; the best "
                     f"{s.population_size} are the next seeds",
        "evokernel": "evokernel: the default search (with a model: idea mutation, tuning, "
                     "crossover, repair; without one: tuning), survival by archive cell",
    }[s.strategy]
