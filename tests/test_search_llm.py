"""The whole LLM search loop through litellm's mock_response: ideas -> k x m implementations,
crossover, repair of a broken build, and replies without code recorded as failures."""
import sys
from pathlib import Path

from evokernel.config import LLMConfig, RunConfig, SearchConfig
from evokernel.llm import LLMClient
from evokernel.search import Evolution
from evokernel.store import RunStore
from fakes import FakeEvaluator
from test_search import problem

sys.path.insert(0, str(Path(__file__).parent.parent / "experiments"))
from scripted_llm import BROKEN, scripted_reply  # noqa: E402


class BuildingFakeEvaluator(FakeEvaluator):
    """Also rejects the scripted compile error as a build error."""

    def _judge(self, c):
        from evokernel.records import EvalResult, Reason
        if BROKEN in c.source:
            return EvalResult.failure(c.id, Reason.BUILD_ERROR, "nvcc: #error injected")
        return super()._judge(c)


def run(tmp_path, name):
    llm_cfg = LLMConfig(model="openai/scripted-mock", max_concurrency=8)
    cfg = RunConfig(run_dir=str(tmp_path / name), llm=llm_cfg,
                    search=SearchConfig(population_size=3, offspring_per_generation=3,
                                        generations=3, ideas_per_call=2,
                                        implementations_per_idea=2, crossover_prob=0.34, seed=3))
    llm = LLMClient(llm_cfg, cache_path=tmp_path / f"{name}.sqlite", mock_response=scripted_reply)
    ev = BuildingFakeEvaluator()
    result = Evolution(problem(tmp_path), cfg, llm=llm, evaluator=ev).run()
    return result, RunStore(result.run_dir), ev


def test_llm_search_records_lineage_failures_and_tokens(tmp_path):
    result, store, ev = run(tmp_path, "a")
    cands, results = store.candidates(), store.results()
    ops = {c.operator for c in cands.values()}
    assert {"seed", "idea", "repair"} <= ops
    reasons = {r.reason.value for r in results.values()}
    assert {"ok", "build_error", "no_code"} <= reasons
    for c in cands.values():
        if c.operator == "idea":
            assert c.idea and c.parent_ids[0] in cands and c.generation >= 1
        if c.operator == "repair":
            parent = cands[c.parent_ids[0]]
            assert results[parent.id].reason.value == "build_error" and BROKEN not in c.source
        if results[c.id].reason.value == "no_code":
            assert "```" not in c.source and len(c.source) > 0   # the reply itself is kept
    calls = store.llm_calls()
    assert {c["purpose"] for c in calls} >= {"ideas", "implement", "repair"}
    assert store.llm_usage()["prompt_tokens"] > 0
    assert result.best[1].speedup > 1.21                     # beat the seed (1.1 * 1.1)
    assert len(ev.evaluated) == len(set(ev.evaluated))


def test_same_seed_and_replies_give_the_same_search(tmp_path):
    _, a, _ = run(tmp_path, "a")
    _, b, _ = run(tmp_path, "b")
    assert list(a.candidates()) == list(b.candidates())
    assert [g["population"] for g in a.generations()] == [g["population"] for g in b.generations()]
