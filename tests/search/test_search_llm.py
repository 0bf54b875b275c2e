"""The whole LLM search loop through litellm's mock_response: ideas -> k x m implementations,
crossover, repair of a broken build, and replies without code recorded as failures."""
import sys
from pathlib import Path

from evokernel.config import LLMConfig, RunConfig, SearchConfig
from evokernel.llm.client import LLMClient
from evokernel.search.evolution import Evolution
from evokernel.runs.store import RunStore
from tests.support.fakes import FakeEvaluator
from tests.search.test_search import problem

from evokernel.demo.scripted_llm import BROKEN, scripted_reply  # noqa: E402


class BuildingFakeEvaluator(FakeEvaluator):
    """Also rejects the scripted compile error as a build error."""

    def _judge(self, c):
        from evokernel.records import EvalResult, Reason
        if BROKEN in c.source:
            return EvalResult.failure(c.id, Reason.BUILD_ERROR, "nvcc: #error injected")
        return super()._judge(c)


NO_CODE = "I would merge these two kernels, but not without seeing a profile first."


def replies(messages):
    """The scripted LLM, except that a crossover's reply holds no code: the scripted replies
    have no code one time in six, and with near-duplicate ideas dropped a run this small may
    make too few calls to meet one, so the no-code path is made certain here."""
    if "# Parent A" in messages[-1]["content"]:
        return NO_CODE
    return scripted_reply(messages)


def run(tmp_path, name):
    llm_cfg = LLMConfig(model="openai/scripted-mock", max_concurrency=8)
    cfg = RunConfig(run_dir=str(tmp_path / name), llm=llm_cfg,
                    search=SearchConfig(population_size=3, offspring_per_generation=3,
                                        generations=3, ideas_per_call=2,
                                        implementations_per_idea=2, crossover_prob=0.34, seed=3))
    llm = LLMClient(llm_cfg, cache_path=tmp_path / f"{name}.sqlite", mock_response=replies)
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


# -- the search through litellm's real request path: a local fake OpenAI server --------------

import itertools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402

from evokernel.operators import IdeaMutation  # noqa: E402
from evokernel.demo.fake_server import FakeOpenAI  # noqa: E402
from tests.support.fakes import KERNEL  # noqa: E402


class ServerScript:
    """Fake-server replies: every ideas call gets its own k ideas; every implementation a
    distinct kernel (or, from ``implement``, anything else)."""

    def __init__(self, implement=None):
        self.n = itertools.count()
        self.lock = threading.Lock()
        self.implement = implement or (lambda n: f"```python\n{KERNEL}# variant {n}\n```")

    def __call__(self, request):
        prompt = request["messages"][-1]["content"]
        with self.lock:
            n = next(self.n)
        if "DISTINCT ideas" in prompt:
            k = int(re.search(r"Propose (\d+) DISTINCT", prompt).group(1))
            return "```json\n" + json.dumps([{"idea": f"idea {n}.{i}", "category": "memory"}
                                             for i in range(k)]) + "\n```"
        return self.implement(n)


def server_config(tmp_path, name, server, **search):
    s = dict(population_size=1, offspring_per_generation=1, generations=1, ideas_per_call=1,
             implementations_per_idea=1, crossover_prob=0.0, seed=5)
    s.update(search)
    llm = LLMConfig(model="openai/fake-model", api_base=server.api_base, max_concurrency=16,
                    max_retries=0)
    return RunConfig(run_dir=str(tmp_path / name), llm=llm, search=SearchConfig(**s))


@pytest.fixture
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


def test_a_generations_16_proposals_with_1s_latency_finish_under_3s(tmp_path, fake_key):
    """4 planned idea mutations x (2 ideas x 2 implementations), all in flight together."""
    slow = lambda req: 0.0 if "DISTINCT ideas" in req["messages"][-1]["content"] else 1.0
    ends = []
    with FakeOpenAI(reply=ServerScript(), latency_s=slow) as server:
        cfg = server_config(tmp_path, "run", server, offspring_per_generation=4,
                            ideas_per_call=2, implementations_per_idea=2)
        LLMClient(cfg.llm).complete([{"role": "user", "content": "warm"}], purpose="warm")
        result = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                           evaluator=FakeEvaluator(),
                           on_generation=lambda g: ends.append(time.perf_counter())).run()
        assert server.count == 1 + 4 + 16
    elapsed = ends[1] - ends[0]
    assert result.generations[1].total == 16
    assert 1.0 <= elapsed < 3.0, elapsed


def test_budget_stop_ends_the_search_at_its_budget_and_holds_on_resume(tmp_path, fake_key):
    with FakeOpenAI(reply=ServerScript(), prompt_tokens=100, completion_tokens=50) as server:
        cfg = server_config(tmp_path, "run", server, generations=5)
        cfg = RunConfig(run_dir=cfg.run_dir, search=cfg.search,
                        llm=LLMConfig(model="openai/fake-model", api_base=server.api_base,
                                      max_retries=0, max_total_tokens=500))
        result = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                           evaluator=FakeEvaluator()).run()
        # 2 calls (150 tokens each) a generation: 300 after generation 1, 600 after 2 >= 500
        assert result.stopped == "budget"
        assert [g.generation for g in result.generations] == [0, 1, 2]
        assert server.count == 4
        store = RunStore(result.run_dir)
        usage = store.llm_usage()
        assert usage["prompt_tokens"] + usage["completion_tokens"] == 600
        assert result.generations[-1].tokens == 600
        again = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                          evaluator=FakeEvaluator()).run(resume=True)
        assert again.stopped == "budget" and server.count == 4    # the spent budget counts


def test_malformed_replies_are_recorded_not_fatal(tmp_path, fake_key):
    garbage = ["", "Sorry, I cannot help with that.",
               "```python\nclass ModelNew(nn.Module:\n", "```cuda\n__global__ void k() {}\n```"]
    script = ServerScript(implement=lambda n: garbage[n % len(garbage)])
    with FakeOpenAI(reply=script) as server:
        cfg = server_config(tmp_path, "run", server, generations=2, offspring_per_generation=2,
                            ideas_per_call=2, implementations_per_idea=2)
        result = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                           evaluator=FakeEvaluator()).run()
    assert [g.generation for g in result.generations] == [0, 1, 2]
    store = RunStore(result.run_dir)
    cands, results = store.candidates(), store.results()
    bad = [c for c in cands.values() if c.operator != "seed"]
    assert bad and all(results[c.id].reason.value == "no_code" for c in bad)
    assert {c.source for c in bad} <= set(garbage)          # each reply kept as it came
    calls = store.llm_calls()
    assert sum(c["purpose"] == "implement" for c in calls) >= len(bad)
    assert all(c["error"] is None for c in calls)
    assert result.best[0].operator == "seed"


def test_a_replayed_search_sends_zero_requests(tmp_path, fake_key):
    cache = tmp_path / "replies.sqlite"
    with FakeOpenAI(reply=ServerScript()) as server:
        def search(name):
            cfg = server_config(tmp_path, name, server, generations=2, population_size=2,
                                offspring_per_generation=2, ideas_per_call=2,
                                implementations_per_idea=2)
            Evolution(problem(tmp_path), cfg, llm=LLMClient(cfg.llm, cache_path=cache),
                      mutations=[IdeaMutation()], crossovers=[],
                      evaluator=FakeEvaluator()).run()
            return RunStore(tmp_path / name)
        first = search("first")
        sent = server.count
        assert sent > 0
        second = search("second")
        assert server.count == sent                              # zero new requests
    assert list(first.candidates()) == list(second.candidates())
    assert [g["population"] for g in first.generations()] == \
        [g["population"] for g in second.generations()]
    assert all(c["cached"] for c in second.llm_calls())
    assert second.llm_usage()["prompt_tokens"] == 0
