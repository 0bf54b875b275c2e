"""Search strategies (evokernel.search.strategies): the presets against the configs
experiments/ablation_branching.py made before they moved into the package, the checks, each
strategy's operators and select, and short searches of the baselines on the CPU (the scripted
LLM through litellm's mock_response, the demo's fake evaluator: its numbers are not
measurements)."""
import argparse
import dataclasses
import json

import pytest
from deap import tools

from evokernel.config import STRATEGIES, LLMConfig, RunConfig, SearchConfig
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.errors import ConfigError
from evokernel.llm.client import LLMClient
from evokernel.operators import IdeaMutation, LLMCrossover, Repair, TuneMutation
from evokernel.problem import load_problem
from evokernel.runs.store import RunStore
from evokernel.search import strategies
from evokernel.search.archive import sel_niches
from evokernel.search.evolution import Evolution
from tests.support.scripts import load_experiment

ablation_branching = load_experiment("ablation_branching")
MOCK = LLMConfig(model="openai/scripted-mock", max_concurrency=8)


def old_search_config(args, arm, seed):
    """experiments/ablation_branching.py's search_config as it was at c9fe560, before the
    presets moved into the package: the reference the presets must match."""
    common_kw = dict(generations=args.max_generations, seed=seed,
                     repair_attempts=0 if args.no_repair else 1)
    if arm == "best_of_n":
        return SearchConfig(population_size=1, offspring_per_generation=args.offspring,
                            ideas_per_call=1, implementations_per_idea=1, crossover_prob=0.0,
                            **common_kw)
    if arm == "sequential":
        return SearchConfig(population_size=1, offspring_per_generation=1, ideas_per_call=1,
                            implementations_per_idea=1, crossover_prob=0.0, **common_kw)
    if arm == "branching":
        return SearchConfig(population_size=args.population,
                            offspring_per_generation=args.population, ideas_per_call=args.k,
                            implementations_per_idea=args.m, crossover_prob=0.0, **common_kw)
    return SearchConfig(population_size=args.population, offspring_per_generation=args.offspring,
                        ideas_per_call=args.k, implementations_per_idea=args.m, **common_kw)


@pytest.mark.parametrize("arm", STRATEGIES)
@pytest.mark.parametrize("flags", [
    dict(population=4, offspring=4, k=3, m=2, max_generations=50, no_repair=False),   # defaults
    dict(population=2, offspring=3, k=2, m=1, max_generations=7, no_repair=True),
    dict(population=1, offspring=1, k=1, m=5, max_generations=0, no_repair=False)])
def test_each_preset_is_the_config_the_ablation_made_before(arm, flags):
    args = argparse.Namespace(**flags)
    old = old_search_config(args, arm, seed=5)
    new = ablation_branching.search_config(args, arm, 5)
    assert new == dataclasses.replace(old, strategy=arm)      # all else as before
    strategies.check(new)                                  # a preset passes its own check
    # stored and read back as config.json is
    cfg = RunConfig(search=new)
    assert RunConfig.from_dict(json.loads(cfg.to_json())).search == new


def test_what_each_strategy_fixes_and_leaves_to_the_config():
    base = SearchConfig(population_size=5, offspring_per_generation=7, ideas_per_call=4,
                        implementations_per_idea=3, islands=2, migrants=2, generations=9,
                        seed=3, repair_attempts=2, candidate_form="nvrtc")
    seq = strategies.preset("sequential", base)
    assert (seq.population_size, seq.offspring_per_generation, seq.ideas_per_call,
            seq.implementations_per_idea, seq.crossover_prob, seq.islands, seq.migrants) == \
        (1, 1, 1, 1, 0.0, 1, 1)
    best = strategies.preset("best_of_n", base)
    assert (best.population_size, best.offspring_per_generation, best.ideas_per_call,
            best.implementations_per_idea) == (1, 7, 1, 1)
    branch = strategies.preset("branching", base)
    assert (branch.population_size, branch.offspring_per_generation, branch.ideas_per_call,
            branch.implementations_per_idea, branch.crossover_prob, branch.islands) == \
        (5, 5, 4, 3, 0.0, 1)
    assert strategies.preset("evokernel", base) == base
    for s in (seq, best, branch):           # the rest is the config's
        assert (s.generations, s.seed, s.repair_attempts, s.candidate_form) == (9, 3, 2, "nvrtc")
    assert strategies.preset("sequential") == strategies.preset("sequential", SearchConfig())


def test_a_bad_strategy_is_named_with_the_known_ones():
    known = "best_of_n, sequential, branching, evokernel"
    with pytest.raises(ConfigError, match=f"search.strategy must be one of {known}, got 'beam'"):
        SearchConfig(strategy="beam")
    with pytest.raises(ConfigError, match=f"one of {known}, got 'beam'"):
        strategies.preset("beam")
    with pytest.raises(ConfigError, match="config.json: .*'beam'"):
        RunConfig.from_dict({"search": {"strategy": "beam"}})
    assert RunConfig.from_dict({"search": {}}).search.strategy == "evokernel"   # older runs


def test_a_baseline_config_not_in_its_shape_is_refused_naming_the_fields(tmp_path):
    bad = SearchConfig(strategy="sequential", population_size=3)
    with pytest.raises(ConfigError, match=r"'sequential' fixes population_size=3 .*1\).*"
                                          r"offspring_per_generation=8.*preset\('sequential'"):
        strategies.check(bad)
    with pytest.raises(ConfigError, match="'sequential' fixes"):
        Evolution(load_problem("softmax"), RunConfig(search=bad, llm=MOCK))


def seeded(individual_ops_and_speedups):
    from evokernel.records import Candidate
    from evokernel.search.toolbox import Individual
    return [Individual(Candidate(source=f"# {i}", operator=op), speedup)
            for i, (op, speedup) in enumerate(individual_ops_and_speedups)]


def test_keep_the_seed_keeps_the_seed_and_else_the_fastest():
    pop = seeded([("idea", 2.0), ("seed", 1.0), ("idea", 3.0)])
    assert strategies.keep_the_seed(pop, 1) == [pop[1]]
    pop = seeded([("idea", 2.0), ("idea", 3.0)])              # the seed was rejected
    assert strategies.keep_the_seed(pop, 1) == [pop[1]]


def evolution(tmp_path, strategy, **kw):
    cfg = RunConfig(run_dir=str(tmp_path / strategy), llm=MOCK,
                    search=strategies.preset(strategy))
    return Evolution(load_problem("softmax"), cfg, **kw)


@pytest.mark.parametrize("strategy, select", [("best_of_n", strategies.keep_the_seed),
                                              ("sequential", sel_niches),
                                              ("branching", tools.selBest),
                                              ("evokernel", sel_niches)])
def test_each_strategy_has_its_operators_and_select(tmp_path, strategy, select):
    evo = evolution(tmp_path, strategy)
    assert evo.toolbox.select.func is select
    if select is sel_niches:
        assert set(evo.toolbox.select.keywords) == {"niche"}
    baseline = strategy != "evokernel"
    assert [type(m) for m in evo.mutations] == \
        ([IdeaMutation] if baseline else [IdeaMutation, TuneMutation])
    assert [type(c) for c in evo.crossovers] == ([] if baseline else [LLMCrossover])
    assert hasattr(evo.toolbox, "mate") is not baseline
    assert isinstance(evo.repair, Repair)


def test_operators_passed_in_win_over_the_strategys(tmp_path):
    tune, cross = TuneMutation(), LLMCrossover()
    evo = evolution(tmp_path, "best_of_n", mutations=[tune], crossovers=[cross])
    assert evo.mutations == [tune] and evo.crossovers == [cross]
    assert evo.toolbox.select.func is strategies.keep_the_seed      # select is still the arm's
    # a baseline needs the LLM's ideas, unless mutations are given
    no_llm = RunConfig(search=strategies.preset("sequential"))
    with pytest.raises(ConfigError, match="'sequential' makes its children with the LLM"):
        Evolution(load_problem("softmax"), no_llm)
    assert Evolution(load_problem("softmax"), no_llm, mutations=[tune]).mutations == [tune]


def test_the_default_strategy_builds_what_evolution_built_before(tmp_path):
    evo = Evolution(load_problem("softmax"), RunConfig())
    assert [type(m) for m in evo.mutations] == [TuneMutation] and evo.crossovers == []
    assert evo.repair is None and not hasattr(evo.toolbox, "mate")
    assert evo.toolbox.select.func is sel_niches


def search(tmp_path, strategy, generations, **search_kw):
    base = SearchConfig(generations=generations, seed=1, **search_kw)
    cfg = RunConfig(problem="softmax", run_dir=str(tmp_path / strategy), llm=MOCK,
                    search=strategies.preset(strategy, base))
    problem = load_problem("softmax")
    llm = LLMClient(MOCK, cache_path=tmp_path / f"{strategy}.sqlite", mock_response=scripted_reply)
    result = Evolution(problem, cfg, llm=llm, evaluator=FakeEvaluator(problem)).run()
    store = RunStore(result.run_dir)
    return result, store, store.candidates(), store.results(), store.generations()


def test_best_of_n_samples_the_seed_every_generation(tmp_path):
    result, store, cands, results, gens = search(tmp_path, "best_of_n", 2,
                                                 offspring_per_generation=3)
    assert result.stopped == "completed" and [g["generation"] for g in gens] == [0, 1, 2]
    seed_id = next(c.id for c in cands.values() if c.operator == "seed")
    assert all(g["population"] == [seed_id] for g in gens)       # the seed stays the only parent
    ideas = [c for c in cands.values() if c.operator == "idea"]
    assert ideas and all(c.parent_ids == (seed_id,) for c in ideas)
    for gen in (1, 2):         # up to 3 samples (1 idea x 1 implementation), near-duplicates out
        assert 1 <= sum(c.generation == gen for c in ideas) <= 3
    assert {c.operator for c in cands.values()} <= {"seed", "idea", "repair"}
    assert any(results[c.id].speedup > results[seed_id].speedup for c in ideas)  # yet never kept
    assert store.config().search.strategy == "best_of_n"


def test_sequential_refines_the_best_kernel_so_far(tmp_path):
    result, store, cands, results, gens = search(tmp_path, "sequential", 4)
    assert [g["generation"] for g in gens] == [0, 1, 2, 3, 4]
    ideas = [c for c in cands.values() if c.operator == "idea"]
    assert ideas
    for prev, g in zip(gens, gens[1:]):
        assert len(g["population"]) == 1
        mine = [c for c in ideas if c.generation == g["generation"]]
        assert len(mine) <= 1                              # one idea x one implementation
        assert all(c.parent_ids == tuple(prev["population"]) for c in mine)  # of the best so far
        so_far = [results[c.id].speedup for c in cands.values()
                  if c.generation <= g["generation"] and results[c.id].accepted]
        assert results[g["population"][0]].speedup == pytest.approx(max(so_far))
    assert {c.operator for c in cands.values()} <= {"seed", "idea", "repair"}
    ideas_calls = [c for c in store.llm_calls() if c.get("purpose") == "ideas"]
    assert len(ideas_calls) == 4                           # one idea call per generation


def test_a_resume_with_another_strategy_is_refused_naming_both(tmp_path):
    search(tmp_path, "sequential", 1)
    cfg = RunConfig(problem="softmax", run_dir=str(tmp_path / "sequential"), llm=MOCK)
    problem = load_problem("softmax")
    llm = LLMClient(MOCK, cache_path=tmp_path / "x.sqlite", mock_response=scripted_reply)
    with pytest.raises(ConfigError, match="started with search.strategy 'sequential'.*"
                                          "made for 'evokernel'"):
        Evolution(problem, cfg, llm=llm, evaluator=FakeEvaluator(problem)).run(resume=True)


def test_describe_names_each_strategy_in_one_line():
    for s in STRATEGIES:
        line = strategies.describe(strategies.preset(s))
        assert line.startswith(s) and "\n" not in line
    assert "3 ideas x 2 implementations for each of 4" in \
        strategies.describe(strategies.preset("branching"))
