"""Diversity: no two calls of a generation alike (parents, categories, call indices), near-duplicate
ideas dropped across concurrent calls whatever order the replies come in, each call told its
parent's lineage and the ideas already spent."""
import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from evokernel.config import RunConfig, SearchConfig
from evokernel.operators import IdeaMutation, TuneMutation
from evokernel.operators.prompts import CATEGORY_KEYS
from evokernel.runs.store import RunStore
from evokernel.search.diversity import (SIMILARITY_THRESHOLD, drop_near_duplicates,
                                        near_duplicate, rotate_categories, similarity)
from evokernel.search.evolution import Evolution, SpeedupFitness
from evokernel.search.variation import Plan, number_calls, plan_island
from tests.search.test_search import problem
from tests.support.fake_llm import FakeLLM
from tests.support.fakes import FakeEvaluator


# -- the similarity rule -----------------------------------------------------------------------

@pytest.mark.parametrize("a, b, duplicate", [
    ("Replace the shared-memory reduction with warp shuffles",
     "Use warp shuffles instead of the shared memory reduction", True),
    ("[memory] Use float4 vectorized loads and stores on 16-byte aligned rows",
     "[dtypes] float4 vectorized loads on aligned rows", True),          # tags do not count
    ("Unroll the inner loop by 4", "Unroll the inner loop by 8", True),  # one constant apart
    ("Give each warp several rows so more independent loads are in flight",
     "Assign several rows to each warp to keep more loads in flight", False),
    ("Tile the matrix in 64x64 shared-memory tiles",
     "Tile the matrix in 128x128 shared-memory tiles with cp.async double buffering", False),
    ("idea 1.0", "idea 1.1", False),                                     # numbers are words
])
def test_similarity_rule_on_the_documented_examples(a, b, duplicate):
    assert (similarity(a, b) >= SIMILARITY_THRESHOLD) is duplicate
    assert (near_duplicate(a, [b]) is not None) is duplicate
    assert similarity(a, b) == similarity(b, a)


def test_near_duplicate_threshold_is_checked():
    with pytest.raises(ValueError, match="threshold"):
        near_duplicate("x", ["y"], threshold=0.0)


def test_drop_near_duplicates_keeps_the_first_in_call_order_and_respects_taken():
    ideas = [["Use warp shuffles for the reduction", "Tile rows in shared memory"],
             ["Tile the rows in shared memory", "Vectorize loads with float4"],
             ["Use float4 vectorized loads", "Unroll the loop by 4"]]
    taken = [[], [], ["Unroll the inner loop by 4"]]
    kept, dropped = drop_near_duplicates(ideas, taken)
    # "vectorize" and "vectorized" are different words: 0.5, both kept
    assert kept == [["Use warp shuffles for the reduction", "Tile rows in shared memory"],
                    ["Vectorize loads with float4"], ["Use float4 vectorized loads"]]
    assert dropped == [(1, "Tile the rows in shared memory", "Tile rows in shared memory"),
                       (2, "Unroll the loop by 4", "Unroll the inner loop by 4")]  # taken too
    with pytest.raises(ValueError):
        drop_near_duplicates([["a"]], [])


def test_categories_rotate_without_repeats_up_to_their_number():
    cats = rotate_categories(CATEGORY_KEYS, len(CATEGORY_KEYS), 4)
    assert sorted(cats) == sorted(CATEGORY_KEYS)
    assert rotate_categories(CATEGORY_KEYS, 2, 5) == [CATEGORY_KEYS[5], CATEGORY_KEYS[0]]
    with pytest.raises(ValueError):
        rotate_categories((), 1, 0)


# -- planning ------------------------------------------------------------------------------------

def individuals(*speeds):
    return [SimpleNamespace(candidate=SimpleNamespace(id=f"k{i}", parent_ids=()),
                            fitness=SpeedupFitness((s,))) for i, s in enumerate(speeds)]


def planning_toolbox(mutate=True, mate=False):
    from deap import base, tools
    tb = base.Toolbox()
    tb.register("select_parents", tools.selTournament, tournsize=2)
    if mutate:
        tb.register("mutate", TuneMutation())
    if mate:
        tb.register("mate", lambda a, b, ctx: [])
    return tb


def test_parents_differ_across_a_generations_calls_while_the_population_allows():
    pop = individuals(1.0, 2.0, 3.0, 4.0)
    random.seed(11)
    plans = plan_island(pop, planning_toolbox(), lambda a, b: a == b, lambda_=6, cxpb=0.0,
                        mutpb=1.0)
    firsts = [p.parents[0].id for p in plans]
    assert len(set(firsts[:4])) == 4                  # four individuals: four different parents
    assert set(firsts[4:]) <= {i.candidate.id for i in pop}


def test_crossover_second_parent_comes_from_another_lineage():
    pop = individuals(5.0, 4.0, 1.0)
    family = {("k0", "k1"), ("k1", "k0")}              # k1 descends from k0
    related = lambda a, b: a == b or (a, b) in family
    random.seed(3)
    plans = plan_island(pop, planning_toolbox(mutate=False, mate=True), related, lambda_=1,
                        cxpb=1.0, mutpb=0.0)
    a, b = (p.id for p in plans[0].parents)
    assert not related(a, b)


def test_number_calls_gives_indices_and_idea_calls_their_own_categories():
    cand = SimpleNamespace(id="p", parent_ids=())
    plans = [Plan(TuneMutation(), (cand,), 1), Plan(IdeaMutation(), (cand,), 2),
             Plan(IdeaMutation(), (cand,), 3)]
    out = number_calls(plans, first_index=5, generation=1)
    assert [p.call_index for p in out] == [5, 6, 7]
    assert out[1].category == CATEGORY_KEYS[0] and out[2].category == CATEGORY_KEYS[1]
    assert out[0].category == CATEGORY_KEYS[2]        # idea calls take the first turns
    later = number_calls(plans, first_index=0, generation=2)
    assert later[1].category == CATEGORY_KEYS[2]      # the rotation goes on next generation
    assert all(p.category is None for p in
               number_calls(plans, first_index=0, generation=1, categories=False))


# -- the search ------------------------------------------------------------------------------

@dataclass
class SpyIdeas(IdeaMutation):
    """The idea mutation, recording what each ideas call was told and what it kept."""

    told: list = field(default_factory=list)
    implemented: list = field(default_factory=list)

    def propose(self, parent, ctx):
        self.told.append(SimpleNamespace(gen=ctx.generation, index=ctx.call_index,
                                         category=ctx.category, parent=parent.id,
                                         taken=tuple(ctx.taken_ideas), lineage=ctx.lineage,
                                         inspirations=ctx.inspirations, history=ctx.history))
        return super().propose(parent, ctx)

    def implement(self, parent, ideas, ctx):
        self.implemented.append((ctx.generation, ctx.call_index, tuple(ideas),
                                 tuple(ctx.taken_ideas)))
        return super().implement(parent, ideas, ctx)


def diverse_run(tmp_path, name, jitter_s=0.0, **search):
    s = dict(population_size=3, offspring_per_generation=4, generations=3, seed=5,
             ideas_per_call=3, implementations_per_idea=1, crossover_prob=0.0,
             repair_attempts=0)
    s.update(search)
    spy = SpyIdeas()
    llm = FakeLLM(jitter_s=jitter_s)
    cfg = RunConfig(run_dir=str(tmp_path / name), search=SearchConfig(**s))
    result = Evolution(problem(tmp_path), cfg, llm=llm, mutations=[spy], crossovers=[],
                       evaluator=FakeEvaluator()).run()
    return result, spy, llm


def test_no_two_calls_of_a_generation_alike_and_ideas_deduplicated(tmp_path):
    result, spy, llm = diverse_run(tmp_path, "run", jitter_s=0.02)
    store = RunStore(result.run_dir)
    cands = store.candidates()
    for gen in (1, 2, 3):
        told = [t for t in spy.told if t.gen == gen]
        assert len(told) == 4
        assert sorted(t.index for t in told) == [0, 1, 2, 3]
        assert len({t.category for t in told}) == 4 and all(t.category in CATEGORY_KEYS
                                                             for t in told)
        population = store.generations()[gen - 1]["population"]
        parents = [t.parent for t in told]
        assert len(set(parents)) == min(4, len(population))   # different parents where possible
        # no two children of the generation implement near-duplicate ideas
        ideas = [c.idea for c in cands.values() if c.generation == gen]
        for i, a in enumerate(ideas):
            assert near_duplicate(a, ideas[:i]) is None, (gen, a)
        # the implementation phase is told the generation's other kept ideas
        for g, index, mine, taken in spy.implemented:
            if g == gen:
                others = {i for gg, ii, m, _ in spy.implemented if gg == gen and ii != index
                          for i in m}
                assert others <= set(taken)
    # ideas calls on the seed overlapped (same parent, overlapping scripted ideas): some dropped
    made = sum(len(m) for g, _, m, _ in spy.implemented if g == 1)
    assert made < 4 * 3


def test_dropping_does_not_depend_on_the_order_replies_arrive(tmp_path):
    a, _, _ = diverse_run(tmp_path, "slow", jitter_s=0.03)
    b, _, _ = diverse_run(tmp_path, "fast", jitter_s=0.0)
    assert list(RunStore(a.run_dir).candidates()) == list(RunStore(b.run_dir).candidates())


def test_each_call_gets_its_parents_lineage_not_the_whole_history(tmp_path):
    result, spy, _ = diverse_run(tmp_path, "run", generations=3)
    cands = RunStore(result.run_dir).candidates()
    late = [t for t in spy.told if t.gen == 3]
    assert any(len(t.lineage) < len(t.history) for t in late)
    for t in late:
        ids = {a.candidate_id for a in t.lineage}
        assert ids <= {a.candidate_id for a in t.history}
        for a in t.lineage:
            c = cands[a.candidate_id]
            assert a.parent_speedup is not None and a.gain == pytest.approx(
                a.speedup / a.parent_speedup)
            assert c.generation < 3
        # the ideas on the way to the parent are among those it must not repeat
        path_ideas = [cands[a.candidate_id].idea for a in t.lineage
                      if a.candidate_id == t.parent]
        assert set(path_ideas) <= set(t.taken)
