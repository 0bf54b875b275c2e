"""evokernel.llm.client through litellm's real code path: mock_response and a local fake OpenAI server.
No test calls a real LLM API."""
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evokernel.config import LLMConfig
from evokernel.errors import BudgetExceeded, ConfigError, LLMError
from evokernel.llm.client import LLMClient, request_key
from evokernel.demo.fake_server import FakeOpenAI

MSG = [{"role": "user", "content": "write a kernel"}]


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


@pytest.fixture(scope="module", autouse=True)
def warm_litellm():
    """Import litellm and make one mocked call, so timing tests measure calls, not imports."""
    LLMClient(LLMConfig(model="openai/fake-model"), mock_response="warm").complete(
        MSG, purpose="warm")


def client_for(server, records=None, **cfg):
    cfg.setdefault("max_retries", 0)
    config = LLMConfig(model="openai/fake-model", api_base=server.api_base, **cfg)
    return LLMClient(config, on_usage=records.append if records is not None else None,
                     backoff_initial_s=0.01, backoff_max_s=0.05)


def test_import_evokernel_does_not_import_litellm():
    code = ("import sys, evokernel, evokernel.llm.client, evokernel.operators, evokernel.operators.prompts; "
            "assert 'litellm' not in sys.modules, 'litellm imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_mock_response_goes_through_litellm_with_usage_and_cost():
    records = []
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini"), mock_response="hello",
                       on_usage=records.append)
    reply = client.complete(MSG, purpose="ideas", sample_index=3)
    assert reply.text == "hello" and reply.model == "openai/gpt-4o-mini" and not reply.cached
    assert reply.prompt_tokens > 0 and reply.completion_tokens > 0
    assert reply.cost_usd > 0  # a priced model: litellm's local cost map
    # a mock's usage is litellm's placeholder (10 + 20 whatever the text), labelled so
    assert reply.usage_source == "stand-in"
    assert records == [{"purpose": "ideas", "model": "openai/gpt-4o-mini", "sample_index": 3,
                        "prompt_tokens": reply.prompt_tokens,
                        "completion_tokens": reply.completion_tokens, "reasoning_tokens": 0,
                        "cost_usd": reply.cost_usd, "cached": False,
                        "latency_s": reply.latency_s, "attempts": 1, "error": None,
                        "key": request_key("openai/gpt-4o-mini", MSG, 0.8, None, 3),
                        "usage_source": "stand-in",
                        "scripted": "litellm mock_response: a fixed string", "origin": "live",
                        "answered_by": None}]
    u = client.usage
    assert u["calls"] == 1 and u["cost_usd"] == pytest.approx(reply.cost_usd)


def test_callable_mock_gets_the_messages_and_unknown_price_costs_zero():
    seen = []
    client = LLMClient(LLMConfig(model="openai/no-such-model-xyz"),
                       mock_response=lambda messages: seen.append(messages) or "scripted")
    assert client.complete(MSG, purpose="p").text == "scripted"
    assert seen == [MSG]
    assert client.usage["cost_usd"] == 0.0


def test_fake_server_reply_tokens_and_reasoning_tokens():
    with FakeOpenAI(reply=lambda req: "echo " + req["messages"][-1]["content"],
                    prompt_tokens=11, completion_tokens=22, reasoning_tokens=7) as server:
        reply = client_for(server, temperature=0.3).complete(MSG, purpose="p")
        assert server.count == 1
        assert server.requests[0]["temperature"] == 0.3
    assert reply.text == "echo write a kernel"
    assert (reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens) == (11, 22, 7)


def test_sixteen_concurrent_calls_with_1s_latency_finish_under_3s():
    with FakeOpenAI(reply="ok", latency_s=1.0) as server:
        client = client_for(server, max_concurrency=16)
        start = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda i: client.complete(MSG, purpose="p", sample_index=i),
                                    range(16)))
        elapsed = time.perf_counter() - start
        assert server.count == 16 and server.max_in_flight >= 8  # truly concurrent
    assert [r.text for r in replies] == ["ok"] * 16
    assert 1.0 <= elapsed < 3.0, elapsed


def test_concurrency_limit_bounds_requests_in_flight():
    with FakeOpenAI(reply="ok", latency_s=0.3) as server:
        client = client_for(server, max_concurrency=3)
        with ThreadPoolExecutor(9) as pool:
            list(pool.map(lambda i: client.complete(MSG, purpose="p", sample_index=i), range(9)))
        assert server.count == 9 and 2 <= server.max_in_flight <= 3


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_429_and_5xx_are_retried_then_succeed(status):
    records = []
    with FakeOpenAI(reply="finally", fail_first=2, fail_status=status) as server:
        reply = client_for(server, records, max_retries=3).complete(MSG, purpose="p")
        assert server.count == 3
    assert reply.text == "finally"
    assert records[-1]["attempts"] == 3 and records[-1]["error"] is None


def test_retries_give_up_after_max_retries():
    records = []
    with FakeOpenAI(fail_first=100, fail_status=429) as server:
        client = client_for(server, records, max_retries=2)
        with pytest.raises(LLMError, match="RateLimitError"):
            client.complete(MSG, purpose="p")
        assert server.count == 3
    assert client.usage["errors"] == 1 and client.usage["retries"] == 2
    assert records[-1]["error"] and records[-1]["attempts"] == 3


@pytest.mark.parametrize("status,kind", [(401, "AuthenticationError"),
                                         (400, "BadRequestError"), (404, "NotFoundError")])
def test_401_and_other_4xx_are_not_retried(status, kind):
    with FakeOpenAI(fail_first=100, fail_status=status) as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retries=3).complete(MSG, purpose="p")
        assert server.count == 1
    assert type(info.value.__cause__).__name__ == kind


def test_context_window_exceeded_is_not_retried():
    with FakeOpenAI(fail_first=100, fail_status=400,
                    fail_message="This model's maximum context length is 8192 tokens. However,"
                                 " your messages resulted in 9000 tokens.") as server:
        with pytest.raises(LLMError) as info:
            client_for(server, max_retries=3).complete(MSG, purpose="p")
        assert server.count == 1
    assert type(info.value.__cause__).__name__ == "ContextWindowExceededError"


def test_hard_timeout_against_a_slow_server():
    with FakeOpenAI(reply="late", latency_s=10.0) as server:
        client = client_for(server, timeout_s=0.5, max_retries=1)
        start = time.perf_counter()
        with pytest.raises(LLMError):
            client.complete(MSG, purpose="p")
        elapsed = time.perf_counter() - start
        assert server.count == 2  # a timeout is retried
    assert 1.0 <= elapsed < 3.0, elapsed


def test_hard_timeout_when_the_provider_ignores_timeout():
    release = threading.Event()

    def hang(messages):  # runs inside the call, like a provider that never answers
        release.wait(10.0)
        return "too late"

    client = LLMClient(LLMConfig(model="openai/fake-model", timeout_s=0.3, max_retries=0),
                       mock_response=hang)
    start = time.perf_counter()
    try:
        with pytest.raises(LLMError, match="timeout_s=0.3"):
            client.complete(MSG, purpose="p")
    finally:
        release.set()
    assert time.perf_counter() - start < 1.5


def test_token_budget_stops_at_the_budget():
    with FakeOpenAI(reply="ok", prompt_tokens=100, completion_tokens=50) as server:
        client = client_for(server, max_total_tokens=400)
        for i in range(2):
            client.complete(MSG, purpose="p", sample_index=i)
        assert not client.budget_exceeded()          # 300 of 400
        client.complete(MSG, purpose="p", sample_index=2)
        assert client.budget_exceeded()              # 450 of 400
        with pytest.raises(BudgetExceeded):
            client.complete(MSG, purpose="p", sample_index=3)
        assert server.count == 3                     # nothing sent once over budget
    assert isinstance(BudgetExceeded("x"), LLMError)


def test_cost_budget_stops_at_the_budget():
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", max_cost_usd=1.0),
                       mock_response="ok")
    first = client.complete(MSG, purpose="p")
    assert first.cost_usd > 0
    client = LLMClient(LLMConfig(model="openai/gpt-4o-mini", max_cost_usd=2.5 * first.cost_usd),
                       mock_response="ok")
    sent = 0
    with pytest.raises(BudgetExceeded):
        for i in range(10):
            client.complete(MSG, purpose="p", sample_index=i)
            sent += 1
    assert sent == 3 and client.budget_exceeded()


def test_replay_cache_sends_zero_requests_on_a_second_run(tmp_path):
    counter = iter(range(1000))
    cache = tmp_path / "cache.sqlite"
    with FakeOpenAI(reply=lambda req: f"reply {next(counter)}") as server:
        config = LLMConfig(model="openai/fake-model", api_base=server.api_base, max_retries=0)
        first = LLMClient(config, cache_path=cache)
        run1 = [first.complete(MSG, purpose="p", sample_index=j).text for j in range(3)]
        assert server.count == 3 and len(set(run1)) == 3   # samples are distinct entries
        records = []
        second = LLMClient(config, cache_path=cache, on_usage=records.append)
        replies = [second.complete(MSG, purpose="p", sample_index=j) for j in range(3)]
        assert server.count == 3                            # zero new requests
    assert [r.text for r in replies] == run1
    assert all(r.cached and r.cost_usd == 0.0 for r in replies)
    assert all(rec["cached"] for rec in records) and len(records) == 3
    assert second.usage["cache_hits"] == 3 and second.usage["calls"] == 0


def test_identical_requests_in_flight_are_sent_once():
    """Single flight: a live run gets what its replay will (one reply per cache key)."""
    counter = iter(range(1000))
    with FakeOpenAI(reply=lambda req: f"reply {next(counter)}", latency_s=0.3) as server:
        records = []
        client = client_for(server, records, max_concurrency=8)
        with ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(lambda i: client.complete(MSG, purpose="p",
                                                              sample_index=i % 2), range(6)))
        assert server.count == 2
    assert len({r.text for r in replies[0::2]}) == 1 and len({r.text for r in replies[1::2]}) == 1
    assert replies[0].text != replies[1].text
    assert sum(r.cached for r in replies) == 4 and sum(r.prompt_tokens > 0 for r in replies) == 2
    assert client.usage["calls"] == 2 and client.usage["cache_hits"] == 4
    assert sorted(rec["cached"] for rec in records) == [False] * 2 + [True] * 4


def test_a_failed_request_in_flight_fails_its_twins_without_sending_them():
    with FakeOpenAI(fail_first=100, fail_status=401, latency_s=0.3) as server:
        client = client_for(server, max_retries=2)

        def call(_):
            with pytest.raises(LLMError):
                client.complete(MSG, purpose="p")
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(call, range(4)))
        assert server.count == 1


def test_cache_key_ignores_api_base_but_not_sampling():
    k = request_key("m", MSG, 0.8, None, 0)
    assert k == request_key("m", MSG, 0.8, None, 0)
    assert len({k, request_key("m", MSG, 0.7, None, 0), request_key("m", MSG, 0.8, 100, 0),
                request_key("m", MSG, 0.8, None, 1), request_key("n", MSG, 0.8, None, 0)}) == 5


def test_ensemble_choice_is_weighted_and_replayable():
    config = LLMConfig(models=[["openai/model-a", 3], ["openai/model-b", 1]])
    assert config.models == (("openai/model-a", 3.0), ("openai/model-b", 1.0))
    assert config.model == "openai/model-a"
    a, b = (LLMClient(config, mock_response="ok") for _ in range(2))
    picks = [a.choose_model([{"role": "user", "content": str(i)}]) for i in range(200)]
    assert picks == [b.choose_model([{"role": "user", "content": str(i)}]) for i in range(200)]
    assert 100 < picks.count("openai/model-a") < 190 and "openai/model-b" in picks
    reply = a.complete([{"role": "user", "content": "7"}], purpose="p")
    assert reply.model == picks[7]


def test_bad_arguments():
    with pytest.raises(ValueError):
        LLMClient(LLMConfig())
    with pytest.raises(ConfigError):
        LLMConfig(models=[["openai/x", 0]])
    client = LLMClient(LLMConfig(model="openai/x"), mock_response="ok")
    with pytest.raises(ValueError):
        client.complete([], purpose="p")
    with pytest.raises(ValueError):
        client.complete([{"content": "no role"}], purpose="p")
