"""The DEAP loop with a fake evaluator: selection, lineage, store, and resume after a kill."""

import dataclasses

import pytest

from evokernel.config import RunConfig, SearchConfig
from evokernel.errors import ConfigError
from evokernel.problem import Problem
from evokernel.search.evolution import Evolution
from evokernel.runs.store import RunStore
from evokernel.operators.tune import TuneMutation
from tests.support.fakes import KERNEL, FakeEvaluator, Interrupt

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x): return x\n" \
            "def get_inputs(): return [torch.randn(4)]\ndef get_init_inputs(): return []\n"


def problem(tmp_path, seed=KERNEL):
    path = tmp_path / "ident.py"
    path.write_text(REFERENCE)
    return Problem(name="ident", path=path, source=REFERENCE, seed_source=seed)


def config(tmp_path, name="run", **search):
    s = dict(population_size=3, offspring_per_generation=4, generations=3, seed=7)
    s.update(search)
    return RunConfig(run_dir=str(tmp_path / name), search=SearchConfig(**s))


def test_search_improves_on_seed_and_records_lineage(tmp_path):
    ev = FakeEvaluator()
    seen = []
    result = Evolution(problem(tmp_path), config(tmp_path), mutations=[TuneMutation()],
                       evaluator=ev, on_generation=seen.append).run()
    assert [g.generation for g in seen] == [0, 1, 2, 3]
    assert seen[0].best_speedup == pytest.approx(1.1 * 1.1)      # seed: BLOCK 128, UNROLL 1
    assert seen[-1].best_speedup > seen[0].best_speedup
    assert all(b.best_speedup >= a.best_speedup for a, b in zip(seen, seen[1:]))  # (mu + lambda)
    assert len(ev.evaluated) == len(set(ev.evaluated))              # nothing timed twice
    store = RunStore(result.run_dir)
    cands, results = store.candidates(), store.results()
    assert set(cands) == set(results) == set(ev.evaluated)
    for c in cands.values():
        if c.operator == "tune":
            assert c.parent_ids and all(p in cands for p in c.parent_ids)
            assert c.idea.startswith("tune ") and c.generation >= 1
    best_cand, best_res = result.best
    assert best_res.speedup == max(r.speedup for r in results.values())
    assert (result.run_dir / "best.py").read_text().endswith(best_cand.source)
    assert store.config() == config(tmp_path)
    # a rejected candidate (BLOCK=1024) never enters the population
    for g in store.generations():
        assert all(results[i].accepted for i in g["population"])


def test_resume_after_kill_evaluates_nothing_twice_and_matches(tmp_path):
    full = FakeEvaluator()
    Evolution(problem(tmp_path), config(tmp_path, "full"), mutations=[TuneMutation()],
              evaluator=full).run()
    for die_after in (1, 3, 6, 9):
        name = f"killed{die_after}"
        first = FakeEvaluator(die_after=die_after)
        with pytest.raises(Interrupt):
            Evolution(problem(tmp_path), config(tmp_path, name), mutations=[TuneMutation()],
                      evaluator=first).run()
        second = FakeEvaluator()
        Evolution(problem(tmp_path), config(tmp_path, name), mutations=[TuneMutation()],
                  evaluator=second).run(resume=True)
        assert not set(first.evaluated) & set(second.evaluated)
        assert sorted(first.evaluated + second.evaluated) == sorted(full.evaluated)
        a = RunStore(tmp_path / "full").generations()
        b = RunStore(tmp_path / name).generations()
        assert [g["population"] for g in a] == [g["population"] for g in b]


def test_no_seed_and_no_llm_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no seed kernel"):
        Evolution(problem(tmp_path, seed=None), config(tmp_path), evaluator=FakeEvaluator()).run()


def test_existing_run_dir_needs_resume(tmp_path):
    Evolution(problem(tmp_path), config(tmp_path, generations=0), evaluator=FakeEvaluator()).run()
    with pytest.raises(ConfigError, match="already holds a run"):
        Evolution(problem(tmp_path), config(tmp_path, generations=0),
                  evaluator=FakeEvaluator()).run()


class Doubler:
    """A user-defined mutation: no framework change needed to plug it in."""

    name = "doubler"

    def __call__(self, parent, ctx):
        import re
        b = int(re.search(r"BLOCK = (\d+)", parent.source)[1])
        if b >= 512:
            return []
        src = parent.source.replace(f"BLOCK = {b};", f"BLOCK = {2 * b};")
        return [ctx.child(src, idea=f"double BLOCK to {2 * b}", parents=[parent],
                          operator=self.name)]


def test_custom_operator_plugs_in(tmp_path):
    result = Evolution(problem(tmp_path), config(tmp_path), mutations=[Doubler()],
                       evaluator=FakeEvaluator()).run()
    cand, res = result.best
    assert cand.operator == "doubler" and "BLOCK = 512;" in cand.source


def test_failed_operator_does_not_stop_the_run(tmp_path):
    class Broken:
        name = "broken"

        def __call__(self, parent, ctx):
            raise RuntimeError("bug in a user operator")
    result = Evolution(problem(tmp_path), config(tmp_path), mutations=[Broken(), TuneMutation()],
                       evaluator=FakeEvaluator()).run()
    assert len(result.generations) == 4


# -- islands ---------------------------------------------------------------------------------

def island_config(tmp_path, name="islands", **search):
    s = dict(islands=3, migration_interval=2, migrants=1, generations=4)
    s.update(search)
    return config(tmp_path, name, **s)


def test_islands_evolve_apart_and_migrate_along_a_ring(tmp_path):
    seen = []
    ev = FakeEvaluator()
    result = Evolution(problem(tmp_path), island_config(tmp_path), mutations=[TuneMutation()],
                       evaluator=ev, on_generation=seen.append).run()
    assert [len(g.islands) for g in seen] == [3] * 5
    results = RunStore(result.run_dir).results()
    for g in seen:
        assert all(1 <= len(pop) <= 3 and len(set(pop)) == len(pop) for pop in g.islands)
        assert all(results[i].accepted for pop in g.islands for i in pop)
        assert set(g.population) == {i for pop in g.islands for i in pop}
        assert g.best_speedup == max(results[i].speedup for i in g.population)
    assert len(set(seen[1].islands)) > 1            # no migration yet: the islands differ
    for g in (seen[2], seen[4]):                    # after a migration the best sits on >= 2
        assert sum(g.best_id in pop for pop in g.islands) >= 2
    assert len(ev.evaluated) == len(set(ev.evaluated))
    assert sum(g.total for g in seen[1:]) > 3 * 4   # three islands' offspring per generation


def test_islands_are_reproducible_and_one_island_is_the_plain_search(tmp_path):
    def run(name, **s):
        Evolution(problem(tmp_path), island_config(tmp_path, name, **s),
                  mutations=[TuneMutation()], evaluator=FakeEvaluator()).run()
        store = RunStore(tmp_path / name)
        return list(store.candidates()), [g["rng_state"] for g in store.generations()]
    assert run("a") == run("b")
    one = run("one", islands=1)
    plain = Evolution(problem(tmp_path), config(tmp_path, "plain", generations=4),
                      mutations=[TuneMutation()], evaluator=FakeEvaluator()).run()
    store = RunStore(plain.run_dir)
    assert one == (list(store.candidates()), [g["rng_state"] for g in store.generations()])
    assert isinstance(one[1][0], list)              # one population: the plain RNG state


def test_islands_resume_after_kill_evaluates_nothing_twice_and_matches(tmp_path):
    full = FakeEvaluator()
    Evolution(problem(tmp_path), island_config(tmp_path, "full"), mutations=[TuneMutation()],
              evaluator=full).run()
    a = RunStore(tmp_path / "full").generations()
    assert isinstance(a[-1]["rng_state"], dict) and len(a[-1]["rng_state"]["islands"]) == 3
    for die_after in (2, 7, 13, 20):   # the tune space holds 24 kernels
        name = f"killed{die_after}"
        first = FakeEvaluator(die_after=die_after)
        with pytest.raises(Interrupt):
            Evolution(problem(tmp_path), island_config(tmp_path, name),
                      mutations=[TuneMutation()], evaluator=first).run()
        second = FakeEvaluator()
        Evolution(problem(tmp_path), island_config(tmp_path, name), mutations=[TuneMutation()],
                  evaluator=second).run(resume=True)
        assert not set(first.evaluated) & set(second.evaluated)
        assert sorted(first.evaluated + second.evaluated) == sorted(full.evaluated)
        b = RunStore(tmp_path / name).generations()
        assert [(g["population"], g["rng_state"]) for g in a] == \
            [(g["population"], g["rng_state"]) for g in b]


def test_migrate_ring_is_deaps_migring_best_replacing_worst():
    from types import SimpleNamespace

    from deap import tools

    from evokernel.search.evolution import SpeedupFitness
    from evokernel.search.variation import migrate_ring

    def ind(name, speedup):
        return SimpleNamespace(candidate=SimpleNamespace(id=name),
                               fitness=SpeedupFitness((speedup,)))
    a, b, c, d, e, z = (ind("a", 5), ind("b", 1), ind("c", 3), ind("d", 2), ind("e", 4),
                        ind("z", 0))
    islands = [[a, b], [c, d], [e, z]]
    accepted = lambda i: i.candidate.id != "z"      # z was rejected: it never migrates
    out = migrate_ring(islands, 1, accepted)
    names = [[i.candidate.id for i in pop] for pop in out]
    assert names == [["a", "e"], ["c", "a"], ["e", "c"]]
    assert [[i.candidate.id for i in pop] for pop in islands] == [["a", "b"], ["c", "d"],
                                                                   ["e", "z"]]  # untouched
    # with every kernel accepted and none already on the next island: exactly DEAP's migRing
    plain = [[a, b], [c, d], [e, ind("y", 0.5)]]
    deap_islands = [list(pop) for pop in plain]
    tools.migRing(deap_islands, 1, tools.selBest, replacement=tools.selWorst)
    assert migrate_ring(plain, 1, lambda i: True) == deap_islands
    # a kernel already on the receiving island is not sent again: the best of the others goes
    out = migrate_ring([[a, b], [a, c]], 1, accepted)
    assert [[i.candidate.id for i in pop] for pop in out] == [["a", "c"], ["a", "b"]]
    assert migrate_ring([[a], [c]], 0, accepted) == [[a], [c]]


@pytest.mark.parametrize("bad", [dict(islands=0), dict(migration_interval=0),
                                 dict(migrants=5, population_size=4), dict(migrants=-1),
                                 dict(ideas_per_call=0), dict(repair_attempts=-1)])
def test_bad_island_and_branching_settings_are_config_errors(bad):
    with pytest.raises(ConfigError):
        SearchConfig(**bad)


def test_operator_returning_garbage_is_dropped_and_lineage_is_filled(tmp_path):
    from evokernel.records import Candidate

    class Sloppy:
        name = "sloppy"

        def __call__(self, parent, ctx):
            src = parent.source.replace("UNROLL = 1;", "UNROLL = 8;")
            return ["hello", None, {"a": 1}, Candidate(source=src)]   # no ctx.child(...)
    result = Evolution(problem(tmp_path), config(tmp_path, generations=1), mutations=[Sloppy()],
                       evaluator=FakeEvaluator()).run()
    cands = RunStore(result.run_dir).candidates()
    (child,) = [c for c in cands.values() if c.generation == 1]
    assert child.operator == "sloppy" and child.parent_ids and child.generation == 1


def test_failed_start_leaves_no_run_directory(tmp_path):
    class Broken(FakeEvaluator):
        def evaluate(self, candidates, on_result=None):
            raise RuntimeError("GPU worker could not set up the problem")
    cfg = config(tmp_path, "fails")
    with pytest.raises(RuntimeError):
        Evolution(problem(tmp_path), cfg, evaluator=Broken()).run()
    assert not (tmp_path / "fails").exists()
    Evolution(problem(tmp_path), cfg, evaluator=FakeEvaluator()).run()   # the retry works


def test_every_llm_call_failing_stops_the_run(tmp_path):
    from evokernel.config import LLMConfig
    from evokernel.errors import LLMError
    from evokernel.llm.client import LLMClient
    from evokernel.demo.fake_server import FakeOpenAI
    with FakeOpenAI(lambda req: "never", fail_first=10**6, fail_status=401,
                    fail_message="invalid api key") as server:
        llm_cfg = LLMConfig(model="openai/fake", api_base=server.api_base, max_retries=0)
        cfg = dataclasses.replace(config(tmp_path, generations=2), llm=llm_cfg)
        llm = LLMClient(llm_cfg, backoff_initial_s=0.0, backoff_max_s=0.0)
        with pytest.raises(LLMError, match="generation 1: all .* LLM calls failed"):
            Evolution(problem(tmp_path), cfg, llm=llm, evaluator=FakeEvaluator()).run()
    assert RunStore(tmp_path / "run").generations()[0]["generation"] == 0   # kept for resume
