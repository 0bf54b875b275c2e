"""The batch LLM mode end to end on the CPU: export -> replies written by the scripted LLM from
the exported request files -> import -> resume, round after round, until the run finishes with
the same store contents as a live run answered by the same script."""
from collections import Counter

from evokernel.config import LLMConfig, RunConfig, SearchConfig
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.batch import write_replies
from evokernel.llm.batch_mode import BatchMode
from evokernel.llm.batch_import import import_replies
from evokernel.llm.client import LLMClient
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution
from tests.search.test_search import problem
from tests.search.test_search_llm import BuildingFakeEvaluator

SCRIPT = "evokernel.demo.scripted_llm"


def config(tmp_path, name):
    return RunConfig(run_dir=str(tmp_path / name), llm=LLMConfig(model="openai/scripted-mock"),
                     search=SearchConfig(population_size=3, offspring_per_generation=3,
                                         generations=3, ideas_per_call=2,
                                         implementations_per_idea=2, crossover_prob=0.34,
                                         seed=3))


def live_run(tmp_path):
    cfg = config(tmp_path, "live")
    llm = LLMClient(cfg.llm, cache_path=tmp_path / "live" / "llm_cache.sqlite",
                    mock_response=scripted_reply)
    Evolution(problem(tmp_path), cfg, llm=llm, evaluator=BuildingFakeEvaluator()).run()
    return RunStore(cfg.run_dir)


def batch_run(tmp_path):
    """The same search in the batch mode; returns its store and each stop's export."""
    cfg = config(tmp_path, "batch")
    folder = tmp_path / "batch-dir"
    exports = []
    evaluator = BuildingFakeEvaluator()

    def run(resume):
        mode = BatchMode(folder, on_export=exports.append)
        return Evolution(problem(tmp_path), cfg, evaluator=evaluator,
                         llm_batch=mode).run(resume=resume)
    result = run(False)
    stops = 0
    while result.stopped == "llm_batch":
        stops += 1
        assert stops < 50, "the batch run does not converge"
        assert write_replies(folder, scripted_reply, answered_by=SCRIPT, scripted=True) > 0
        report = import_replies(folder, cfg.run_dir)
        assert report.problems == () and report.pending == () and report.imported
        result = run(True)
    assert result.stopped == "completed"
    assert len(evaluator.evaluated) == len(set(evaluator.evaluated))   # nothing timed twice
    return RunStore(cfg.run_dir), exports


def test_batch_round_trip_gives_the_live_runs_store(tmp_path):
    live = live_run(tmp_path)
    batch, exports = batch_run(tmp_path)
    assert list(batch.candidates().items()) == list(live.candidates().items())
    assert {k: r.to_dict() for k, r in batch.results().items()} == \
        {k: r.to_dict() for k, r in live.results().items()}
    strip = lambda gs: [{k: v for k, v in g.items() if k != "finished_s"} for g in gs]
    assert strip(batch.generations()) == strip(live.generations())
    paid = lambda s: Counter((c["purpose"], c["sample_index"], c["model"])
                             for c in s.llm_calls() if not c["cached"])
    assert paid(batch) == paid(live)
    # tokens: the mock reports litellm's placeholders; reply files carry none, so counted
    n = sum(paid(batch).values())
    lu, bu = live.llm_usage(), batch.llm_usage()
    assert lu["usage_sources"] == {"stand-in": n} and bu["usage_sources"] == {"tokenizer": n}
    assert bu["prompt_tokens"] > 20 * n and bu["completion_tokens"] > 0   # prompts are long
    assert bu["origins"] == {"batch": n} and lu["origins"] == {"live": n}
    # both are labelled scripted, every call of them, replays included
    assert lu["scripted"] == len(live.llm_calls()) and bu["scripted"] == len(batch.llm_calls())
    assert bu["scripted_by"] == [f"replies written by {SCRIPT}"]
    assert bu["answered_by"] == [SCRIPT]
    # the idea mutation's two rounds (ideas, then implementations) are two exports
    gen1 = [e for e in exports if e.generation == 1]
    assert len(gen1) >= 2 and [e.round for e in gen1] == list(range(1, len(gen1) + 1))
    assert all(r["status"] == "answered" for r in batch.llm_requests())
    # the script's failures went through too: broken builds and their repairs (whether a reply
    # without code comes up depends on which calls the diversity rules make; the same as live)
    reasons = {r.reason.value for r in batch.results().values()}
    assert {"ok", "build_error"} <= reasons
    assert reasons == {r.reason.value for r in live.results().values()}
    assert "repair" in {c.operator for c in batch.candidates().values()}
    assert {r["purpose"] for r in batch.llm_requests()} >= {"ideas", "implement", "repair"}
