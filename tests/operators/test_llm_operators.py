"""LLM operators (idea mutation, crossover, repair, port) through litellm's real code path, with
scripted replies from mock_response or the local fake server. No test calls a real LLM API."""
import itertools
import json
import pickle
import random
import re
import threading
import time
from pathlib import Path

import pytest

from evokernel.config import LLMConfig
from evokernel.llm.client import LLMClient
from evokernel.operators import (Attempt, IdeaMutation, LLMCrossover, Repair, SearchContext,
                                 SeedPort, TuneMutation)
from evokernel.operators.parsing import extract_code
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason, Verdict
from evokernel.demo.fake_server import FakeOpenAI

PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1024)]

def get_init_inputs():
    return []
"""
SEED = """import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)  # seed
"""


def code_reply(tag: str, idea_line: str = "a kernel") -> str:
    return (f"Idea: {idea_line}\n```python\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
            f"    def forward(self, x):\n        return x  # {tag}\n```\n")


class Script:
    """Scripted replies: a JSON list of ideas for the ideas call, a unique kernel per other call."""

    def __init__(self, ideas=("tile in shared memory", "use float4 loads", "unroll by 4",
                              "more rows per block"), implement=None):
        self.ideas = list(ideas)
        self.implement = implement or (lambda idea, n: code_reply(f"{idea} #{n}"))
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def __call__(self, messages) -> str:
        user = messages[-1]["content"]
        if "DISTINCT ideas" in user:
            k = int(re.search(r"Propose (\d+) DISTINCT", user).group(1))
            return "```json\n" + json.dumps([{"idea": i, "category": "memory"}
                                             for i in self.ideas[:k]]) + "\n```"
        m = re.search(r"^> (.*)$", user, re.MULTILINE)
        with self.lock:
            n = next(self.counter)
        return self.implement(m.group(1) if m else "", n)

    def from_request(self, request: dict) -> str:  # the fake server's form
        return self(request["messages"])


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


@pytest.fixture
def problem():
    return Problem(name="toy", path=Path("/nonexistent/toy.py"), source=PROBLEM, seed_source=SEED)


@pytest.fixture
def parent():
    return Candidate(source=SEED, operator="seed", generation=0)


def make_ctx(problem, parent, llm, **kw):
    result = EvalResult(candidate_id=parent.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                        reference_ms=2.0, candidate_ms=0.8, floor_ms=0.4)
    kw.setdefault("history", [Attempt("tried-idea-xyz", "idea", 0.0, "lower_precision")])
    return SearchContext(problem=problem, generation=2, rng=kw.pop("rng", random.Random(0)),
                         llm=llm, results={parent.id: result},
                         device={"device": "H200-fake", "sm_count": 132}, **kw)


def mock_client(script, records=None, **cfg):
    return LLMClient(LLMConfig(model="openai/fake-model", max_retries=0, **cfg),
                     mock_response=script,
                     on_usage=records.append if records is not None else None)


def test_idea_mutation_yields_k_times_m_children_with_lineage(problem, parent):
    records, prompts = [], []
    script = Script()
    client = mock_client(lambda msgs: prompts.append(msgs) or script(msgs), records)
    children = IdeaMutation(k=3, m=2)(parent, make_ctx(problem, parent, client))
    assert len(children) == 6 and len({c.id for c in children}) == 6
    assert all(c.operator == "idea" and c.parent_ids == (parent.id,) and c.generation == 2
               for c in children)
    assert [c.idea for c in children] == [f"[memory] {i}" for i in script.ideas[:3]
                                           for _ in range(2)]
    assert all(extract_code(c.source) == c.source for c in children)
    assert sorted(r["purpose"] for r in records) == ["ideas"] + ["implement"] * 6
    impl = [r for r in records if r["purpose"] == "implement"]
    indices = sorted(r["sample_index"] for r in impl)
    assert indices[0] == indices[1] == indices[2] and indices[3] == indices[4] == indices[5]
    assert indices[3] == indices[0] + 1          # implementation j of each idea: base + j
    # The ideas call is conditioned on the parent, its result, the history and the GPU.
    ideas_user = prompts[0][-1]["content"]
    for needle in (SEED.strip(), "speedup 2.5x", "takes 200% of it", "tried-idea-xyz",
                   "lower_precision", "H200-fake", "Propose 3 DISTINCT"):
        assert needle in ideas_user, needle
    assert "mean 1000" in prompts[0][0]["content"] and "// tune:" in prompts[0][0]["content"]


def test_idea_mutation_defaults_to_ctx_k_and_m(problem, parent):
    client = mock_client(Script())
    ctx = make_ctx(problem, parent, client, ideas_per_call=2, implementations_per_idea=3)
    assert len(IdeaMutation()(parent, ctx)) == 6


def test_sixteen_implementations_with_1s_latency_finish_under_3s(problem, parent):
    script = Script()
    slow_impl = lambda req: 1.0 if "Rewrite the current kernel" in req["messages"][-1]["content"] else 0.0
    with FakeOpenAI(reply=script.from_request, latency_s=slow_impl) as server:
        client = LLMClient(LLMConfig(model="openai/fake-model", api_base=server.api_base,
                                     max_concurrency=16, max_retries=0))
        client.complete([{"role": "user", "content": "warm-up"}], purpose="warm")
        start = time.perf_counter()
        children = IdeaMutation(k=4, m=4)(parent, make_ctx(problem, parent, client))
        elapsed = time.perf_counter() - start
        assert server.count == 1 + 1 + 16 and server.max_in_flight >= 8  # truly concurrent
    assert len(children) == 16
    assert 1.0 <= elapsed < 3.0, elapsed


def test_replies_without_code_become_no_code_candidates(problem, parent):
    garbage = ["Sorry, I can't do that.", "```python\nprint('no ModelNew here')\n```",
               "```python\nclass ModelNew(nn.Module:\n", ""]
    script = Script(implement=lambda idea, n: garbage[n])
    children = IdeaMutation(k=2, m=2)(parent, make_ctx(problem, parent, mock_client(script)))
    assert sorted(c.source for c in children) == sorted(garbage)
    assert all(extract_code(c.source) is None for c in children)
    assert all(c.operator == "idea" and c.parent_ids == (parent.id,) for c in children)


def test_one_failed_implementation_does_not_lose_the_others(problem, parent):
    def implement(idea, n):
        if idea == "[memory] use float4 loads":
            raise RuntimeError("provider exploded")
        return code_reply(f"{idea} #{n}")

    records = []
    client = mock_client(Script(implement=implement), records)
    children = IdeaMutation(k=3, m=2)(parent, make_ctx(problem, parent, client))
    assert len(children) == 4 and "[memory] use float4 loads" not in {c.idea for c in children}
    assert sum(1 for r in records if r["error"]) == 2


def test_a_pending_request_does_not_cancel_the_others(problem, parent, monkeypatch):
    """Batch mode: every implementation request is written out even when the first is pending
    before the rest have started (Executor.map cancels unstarted work once a result raises;
    CI's loaded 2-core machine lost one request of two that way)."""
    import evokernel.operators.idea as idea_mod
    from evokernel.errors import LLMPending
    monkeypatch.setattr(idea_mod, "MAX_THREADS", 1)     # one worker: requests start in turn
    asked = []

    class Pending:
        def complete(self, messages, *, purpose, sample_index):
            asked.append(sample_index)
            time.sleep(0.01)
            raise LLMPending(f"request {sample_index} written out")

    ctx = make_ctx(problem, parent, Pending())
    with pytest.raises(LLMPending):
        IdeaMutation(k=4, m=2).implement(parent, ["a", "b", "c", "d"], ctx)
    assert len(asked) == 8 and len(set(asked)) == 2      # 4 ideas x sample base + j, j < 2


def test_failed_ideas_call_returns_nothing_and_raises_nothing(problem, parent):
    with FakeOpenAI(fail_first=100, fail_status=401) as server:
        client = LLMClient(LLMConfig(model="openai/fake-model", api_base=server.api_base,
                                     max_retries=2))
        assert IdeaMutation(k=2, m=2)(parent, make_ctx(problem, parent, client)) == []
        assert server.count == 1


def test_unreadable_ideas_reply_returns_nothing(problem, parent):
    records = []
    client = mock_client(lambda msgs: "I have no ideas today.", records)
    assert IdeaMutation(k=2, m=2)(parent, make_ctx(problem, parent, client)) == []
    assert [r["purpose"] for r in records] == ["ideas"]


def test_budget_spent_after_the_ideas_call_stops_quietly(problem, parent):
    client = mock_client(Script(), max_total_tokens=1)  # the ideas call alone spends it
    assert IdeaMutation(k=2, m=2)(parent, make_ctx(problem, parent, client)) == []
    assert client.usage["calls"] == 1 and client.budget_exceeded()


def test_replay_reproduces_children_with_zero_requests(problem, parent, tmp_path):
    cache = tmp_path / "llm.sqlite"
    with FakeOpenAI(reply=Script().from_request) as server:
        config = LLMConfig(model="openai/fake-model", api_base=server.api_base, max_retries=0)
        run = lambda: IdeaMutation(k=2, m=2)(parent, make_ctx(
            problem, parent, LLMClient(config, cache_path=cache), rng=random.Random(7)))
        first = run()
        assert server.count == 5 and len(first) == 4
        second = run()
        assert server.count == 5
    assert second == first


def test_duplicate_and_already_seen_children_are_dropped(problem, parent):
    script = Script(implement=lambda idea, n: code_reply("same"))
    ctx = make_ctx(problem, parent, mock_client(script))
    children = IdeaMutation(k=2, m=2)(parent, ctx)
    assert len(children) == 1
    ctx = make_ctx(problem, parent, mock_client(script), seen_ids=frozenset({children[0].id}))
    assert IdeaMutation(k=2, m=2)(parent, ctx) == []


def test_crossover_merges_two_parents(problem, parent):
    other = Candidate(source=SEED.replace("# seed", "# other"), idea="vectorized loads",
                      operator="idea", generation=1)
    prompts = []
    client = mock_client(lambda m: prompts.append(m) or code_reply("merged", "merge tiles+float4"))
    ctx = make_ctx(problem, parent, client)
    children = LLMCrossover()(parent, other, ctx)
    assert len(children) == 1
    child = children[0]
    assert child.operator == "crossover" and child.parent_ids == (parent.id, other.id)
    assert child.idea == "merge tiles+float4" and child.generation == 2
    user = prompts[0][-1]["content"]
    assert "vectorized loads" in user and "# other" in user and "speedup 2.5x" in user
    assert LLMCrossover()(parent, parent, ctx) == []


def test_repair_gets_the_error_and_keeps_the_idea(problem, parent):
    broken = Candidate(source=SEED.replace("# seed", "# broken"), idea="warp shuffles",
                       parent_ids=(parent.id,), operator="idea", generation=1)
    result = EvalResult.failure(broken.id, Reason.BUILD_ERROR, "nvcc failed",
                                log="x" * 10000 + "\nerror: identifier 'foo' is undefined")
    prompts, n = [], itertools.count()
    client = mock_client(lambda m: prompts.append(m) or code_reply(f"fixed {next(n)}"))
    children = Repair(children=2)(broken, result, make_ctx(problem, parent, client))
    assert len(children) == 2
    assert all(c.operator == "repair" and c.parent_ids == (broken.id,) and
               c.idea == "warp shuffles" for c in children)
    user = prompts[0][-1]["content"]
    assert "build_error" in user and "identifier 'foo' is undefined" in user
    assert len(user) < 10000 + len(PROBLEM) + len(SEED)   # the log is cut to its tail
    accepted = EvalResult(candidate_id=broken.id, verdict=Verdict.ACCEPT, reason=Reason.OK)
    assert Repair()(broken, accepted, make_ctx(problem, parent, client)) == []


def test_seed_port_writes_a_first_kernel(problem, parent):
    prompts = []
    client = mock_client(lambda m: prompts.append(m) or code_reply("port", "one thread per element"))
    children = SeedPort()(problem, make_ctx(problem, parent, client))
    assert len(children) == 1
    assert children[0].operator == "port" and children[0].parent_ids == ()
    assert children[0].idea == "one thread per element"
    assert "def get_inputs" in prompts[0][-1]["content"]


def test_operators_without_llm_return_nothing_and_pickle(problem, parent):
    ctx = make_ctx(problem, parent, None)
    result = EvalResult.failure(parent.id, Reason.BUILD_ERROR, "x")
    assert IdeaMutation()(parent, ctx) == []
    assert LLMCrossover()(parent, Candidate(source="y"), ctx) == []
    assert Repair()(parent, result, ctx) == []
    assert SeedPort()(problem, ctx) == []
    for op in (IdeaMutation(k=2, m=3), LLMCrossover(), Repair(), SeedPort(), TuneMutation()):
        assert pickle.loads(pickle.dumps(op)) == op
    with pytest.raises(ValueError):
        IdeaMutation(k=0)
