"""Token counts when a reply carries no usage, and the usage source and stand-in label recorded
for every reply (evokernel.llm.tokens, evokernel.llm.client)."""
import pytest

from evokernel.config import LLMConfig
from evokernel.demo.fake_server import FakeOpenAI
from evokernel.llm.client import LLMClient
from evokernel.llm.tokens import count_tokens, price_usd

MSG = [{"role": "system", "content": "You write CUDA kernels."},
       {"role": "user", "content": "Write a softmax kernel for rows of 4096 floats."}]


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


def test_counting_is_deterministic_and_grows_with_the_text():
    short = count_tokens("openai/gpt-4o", MSG, "ok")
    long = count_tokens("openai/gpt-4o", MSG, "ok " * 200)
    assert short == count_tokens("openai/gpt-4o", MSG, "ok") and short[0] == long[0]
    assert short[0] > 15 and 0 < short[1] < long[1] and long[1] >= 200
    assert count_tokens("openai/gpt-4o", MSG, "")[1] == 0
    # another model's tokenizer counts the same text differently (cl100k vs o200k here)
    assert count_tokens("openai/some-unknown-model", MSG, "ok " * 200)[0] > 0
    with pytest.raises(ValueError, match="messages must be a list"):
        count_tokens("openai/gpt-4o", "hello", "x")


def test_prices_come_from_litellms_map_with_the_batch_discount():
    full = price_usd("openai/gpt-4o-mini", 10_000, 2_000)
    assert full > 0 and price_usd("openai/gpt-4o-mini", 10_000, 2_000, batch=True) < full
    assert price_usd("openai/no-such-model-xyz", 10_000, 2_000) == 0.0


def records_of(server, **client):
    records = []
    llm = LLMClient(LLMConfig(model="openai/gpt-4o", api_base=server.api_base, max_retries=0),
                    on_usage=records.append, **client)
    return llm.complete(MSG, purpose="implement"), records


def test_a_reply_without_usage_is_counted_and_says_so():
    with FakeOpenAI(reply="a reply " * 30, prompt_tokens=0, completion_tokens=0,
                    label=None) as server:
        reply, records = records_of(server)
    assert reply.usage_source == "tokenizer" and reply.scripted is None
    assert (reply.prompt_tokens, reply.completion_tokens) == \
        count_tokens("openai/gpt-4o", MSG, "a reply " * 30)
    assert reply.cost_usd == pytest.approx(price_usd("openai/gpt-4o", reply.prompt_tokens,
                                                     reply.completion_tokens))
    assert records[0]["usage_source"] == "tokenizer"


def test_a_models_usage_is_taken_as_reported():
    with FakeOpenAI(reply="x", prompt_tokens=321, completion_tokens=12, label=None) as server:
        reply, records = records_of(server)
    assert (reply.prompt_tokens, reply.completion_tokens, reply.usage_source) == \
        (321, 12, "provider")
    assert records[0]["scripted"] is None and records[0]["origin"] == "live"


def test_stand_in_replies_are_labelled_and_keep_the_label_when_replayed(tmp_path):
    with FakeOpenAI(reply="scripted text", label="my script") as server:
        reply, records = records_of(server, cache_path=tmp_path / "c.sqlite")
        replay, again = records_of(server, cache_path=tmp_path / "c.sqlite")
        assert server.count == 1
    assert reply.scripted == "evokernel-stand-in: my script"
    assert reply.usage_source == "stand-in" and reply.prompt_tokens == 100
    assert replay.cached and replay.scripted == reply.scripted
    assert again[0]["scripted"] == reply.scripted and again[0]["cached"]


def test_a_mock_response_is_labelled_with_its_function():
    def my_script(messages):
        return "hi"
    client = LLMClient(LLMConfig(model="openai/gpt-4o"), mock_response=my_script)
    reply = client.complete(MSG, purpose="ideas")
    assert reply.scripted == ("litellm mock_response: "
                              "tests.llm.test_tokens.test_a_mock_response_is_labelled_with_its_"
                              "function.<locals>.my_script")
    assert reply.usage_source == "stand-in"
