"""DEAP as DEAP users expect: operators registered on ``Evolution.toolbox`` are used, ``map`` is
the evaluation seam, DEAP's global RNG is seeded by the run and given back, the Logbook is kept in
the run store (exactly across a kill and resume) and shown by ``evokernel show``, and the batch
LLM mode's stop (LLMPending) resumes to the same search as a live run."""
import io
import random
import re

import pytest
from deap import tools
from rich.console import Console

from evokernel.config import RunConfig, SearchConfig
from evokernel.errors import ConfigError
from evokernel.operators import IdeaMutation, TuneMutation
from evokernel.report.show import render
from evokernel.runs.store import RunStore
from evokernel.runs.view import load_run
from evokernel.search.evolution import Evolution
from evokernel.search.toolbox import LOGBOOK_HEADER, OperatorChoice
from tests.search.test_search import Doubler, config, problem
from tests.support.fake_llm import FakeLLM
from tests.support.fakes import FakeEvaluator, Interrupt


def test_a_mutation_registered_on_the_toolbox_is_the_one_used(tmp_path):
    evo = Evolution(problem(tmp_path), config(tmp_path), evaluator=FakeEvaluator())
    assert isinstance(evo.toolbox.mutate.func, OperatorChoice)      # the default: TuneMutation
    evo.toolbox.register("mutate", Doubler())
    result = evo.run()
    ops = {c.operator for c in RunStore(result.run_dir).candidates().values()}
    assert ops == {"seed", "doubler"}
    assert "BLOCK = 512;" in result.best[0].source


def test_a_plain_function_with_bound_arguments_can_be_registered(tmp_path):
    def set_unroll(parent, ctx, value):
        source = re.sub(r"UNROLL = \d+;", f"UNROLL = {value};", parent.source)
        return [ctx.child(source, idea=f"UNROLL={value}", parents=[parent], operator="x")]
    evo = Evolution(problem(tmp_path), config(tmp_path, generations=1), evaluator=FakeEvaluator())
    evo.toolbox.register("mutate", set_unroll, value=8)
    result = evo.run()
    gen1 = [c for c in RunStore(result.run_dir).candidates().values() if c.generation == 1]
    assert [c.idea for c in gen1] == ["UNROLL=8"] and "UNROLL = 8;" in gen1[0].source


def test_map_is_the_evaluation_seam(tmp_path):
    batches = []

    def spying_map(func, individuals):
        individuals = list(individuals)
        batches.append([i.candidate.id for i in individuals])
        return map(func, individuals)           # one by one, as a distributed map would
    ev = FakeEvaluator()
    evo = Evolution(problem(tmp_path), config(tmp_path, "spied"), mutations=[TuneMutation()],
                    evaluator=ev)
    evo.toolbox.register("map", spying_map)
    evo.run()
    seen = [cid for batch in batches for cid in batch]
    assert seen == ev.evaluated and len(seen) == len(set(seen))      # every evaluation, once
    assert len(batches) == 4                                          # seed + 3 generations
    Evolution(problem(tmp_path), config(tmp_path, "default"), mutations=[TuneMutation()],
              evaluator=FakeEvaluator()).run()
    a, b = RunStore(tmp_path / "spied"), RunStore(tmp_path / "default")
    assert a.results() == b.results()
    assert [g["population"] for g in a.generations()] == [g["population"] for g in b.generations()]


def test_an_evaluate_that_returns_no_verdict_is_a_clear_error(tmp_path):
    evo = Evolution(problem(tmp_path), config(tmp_path), evaluator=FakeEvaluator())
    evo.toolbox.register("evaluate", lambda individual: (1.0,))     # a DEAP-style tuple
    with pytest.raises(ConfigError, match="toolbox.evaluate gave tuple .* EvalResult"):
        evo.run()


def test_the_global_rng_is_lent_and_given_back(tmp_path):
    random.seed(1234)
    before = random.getstate()
    Evolution(problem(tmp_path), config(tmp_path, "a"), mutations=[TuneMutation()],
              evaluator=FakeEvaluator()).run()
    assert random.getstate() == before                 # the caller's random is untouched
    random.seed(99)                                    # another global state: the same search
    Evolution(problem(tmp_path), config(tmp_path, "b"), mutations=[TuneMutation()],
              evaluator=FakeEvaluator()).run()
    a, b = RunStore(tmp_path / "a"), RunStore(tmp_path / "b")
    assert list(a.candidates()) == list(b.candidates())
    assert [g["rng_state"] for g in a.generations()] == [g["rng_state"] for g in b.generations()]
    # selTournament really draws from it: another run seed makes another search
    Evolution(problem(tmp_path), config(tmp_path, "c", seed=8), mutations=[TuneMutation()],
              evaluator=FakeEvaluator()).run()
    assert list(RunStore(tmp_path / "c").candidates()) != list(a.candidates())


def test_logbook_in_the_store_exact_across_a_kill_and_in_show(tmp_path):
    full = Evolution(problem(tmp_path), config(tmp_path, "full"), mutations=[TuneMutation()],
                     evaluator=FakeEvaluator()).run()
    assert isinstance(full.logbook, tools.Logbook) and full.logbook.header == list(LOGBOOK_HEADER)
    records = RunStore(tmp_path / "full").logbook()
    assert [r["gen"] for r in records] == [0, 1, 2, 3] and records == list(full.logbook)
    store = RunStore(tmp_path / "full")
    results, gens = store.results(), store.generations()
    for r, g in zip(records, gens):
        speeds = [results[i].speedup for i in g["population"]]
        assert r["max"] == pytest.approx(max(speeds)) and r["min"] == pytest.approx(min(speeds))
        assert r["nevals"] == g["total"] and r["accepted"] == g["valid"]
    with pytest.raises(Interrupt):
        Evolution(problem(tmp_path), config(tmp_path, "killed"), mutations=[TuneMutation()],
                  evaluator=FakeEvaluator(die_after=6)).run()
    resumed = Evolution(problem(tmp_path), config(tmp_path, "killed"), mutations=[TuneMutation()],
                        evaluator=FakeEvaluator()).run(resume=True)
    assert list(resumed.logbook) == records
    assert RunStore(tmp_path / "killed").logbook() == records
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render(load_run(tmp_path / "full"), 120))
    out = console.file.getvalue()
    table = out[out.index("DEAP logbook"):out.index("failures")]
    rows = [line.split() for line in table.splitlines() if re.match(r"\s+\d+\s+\d+", line)]
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert rows[-1][4] == f"{records[-1]['max']:.3f}x"


def batch_run(tmp_path, name, llm):
    cfg = RunConfig(run_dir=str(tmp_path / name), search=SearchConfig(
        population_size=2, offspring_per_generation=2, generations=2, seed=4, ideas_per_call=2,
        implementations_per_idea=1, crossover_prob=0.0))
    return Evolution(problem(tmp_path), cfg, llm=llm,
                     mutations=[IdeaMutation(), TuneMutation()], crossovers=[],
                     evaluator=FakeEvaluator())


def test_batch_mode_stops_before_evaluating_and_resumes_to_the_live_search(tmp_path):
    live = batch_run(tmp_path, "live", FakeLLM()).run()
    llm = FakeLLM(batch=True)
    rounds = []
    result = batch_run(tmp_path, "batch", llm).run()
    while result.stopped == "llm_batch":
        store = RunStore(tmp_path / "batch")
        done = {c.id for c in store.candidates().values()}
        rounds.append((len(store.generations()), {p for p, _, _ in llm.written.values()}))
        assert set(store.results()) == done              # nothing proposed is left unjudged
        assert llm.import_written() > 0                   # `evokernel llm import`
        result = batch_run(tmp_path, "batch", llm).run(resume=True)
        assert len(rounds) < 10
    assert rounds[0] == (1, {"ideas"})                    # generation 1's ideas, all at once
    assert rounds[1] == (1, {"implement"})                # then their implementations
    a, b = RunStore(tmp_path / "live"), RunStore(tmp_path / "batch")
    assert list(a.candidates()) == list(b.candidates())
    assert a.generations()[-1]["population"] == b.generations()[-1]["population"]
    assert live.stopped == result.stopped == "completed"
