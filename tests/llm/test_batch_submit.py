"""`--llm-batch-submit` through litellm's Batch API (files + batches) against the fake
OpenAI-compatible server on 127.0.0.1: the search runs to the end with every request answered in
batches, the same as a live run through the same server; failed lines are resubmitted, a batch
that ends badly fails its requests, and a run killed while it waits polls the same batch."""
import json
from collections import Counter

import pytest

from evokernel.config import LLMConfig, RunConfig, SearchConfig
from evokernel.demo.fake_server import FakeOpenAI
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.errors import LLMError
from evokernel.llm import submit
from evokernel.llm.batch_mode import BatchMode
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution
from tests.search.test_search import problem
from tests.search.test_search_llm import BuildingFakeEvaluator


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")


def script(request):
    return scripted_reply(request["messages"])


def config(tmp_path, name, server, generations=2):
    return RunConfig(run_dir=str(tmp_path / name),
                     llm=LLMConfig(model="openai/fake-model", api_base=server.api_base,
                                   max_retries=0),
                     search=SearchConfig(population_size=2, offspring_per_generation=2,
                                         generations=generations, ideas_per_call=2,
                                         implementations_per_idea=1, crossover_prob=0.5,
                                         seed=2))


def search(tmp_path, cfg, mode=None, resume=False):
    return Evolution(problem(tmp_path), cfg, evaluator=BuildingFakeEvaluator(),
                     llm_batch=mode).run(resume=resume)


def test_submit_runs_the_search_through_the_batch_api_like_a_live_run(tmp_path):
    with FakeOpenAI(reply=script) as server:
        live = RunStore(search(tmp_path, config(tmp_path, "live", server)).run_dir)
        live_requests = server.count
        assert not server.batches
        result = search(tmp_path, config(tmp_path, "batch", server),
                        BatchMode(submit=True, poll_s=0.01))
        assert result.stopped == "completed"
        batches = list(server.batches.values())
        lines = sum(b["request_counts"]["total"] for b in batches)
        assert server.count - live_requests == lines                       # all in batches
        rounds = Counter(b["metadata"]["generation"] for b in batches)
        assert rounds["1"] >= 2                         # ideas, then their implementations
        assert all(b["status"] == "completed" and b["endpoint"] == "/v1/chat/completions"
                   for b in batches)
        assert {b["metadata"]["evokernel_run"] for b in batches} == {"batch"}
        uploaded = [json.loads(x) for f in server.files.values() if f["meta"]["purpose"] ==
                    "batch" for x in f["content"].decode().splitlines()]
        assert {x["body"]["model"] for x in uploaded} == {"fake-model"}
    batch = RunStore(result.run_dir)
    assert list(batch.candidates().items()) == list(live.candidates().items())
    strip = lambda gs: [{k: v for k, v in g.items() if k != "finished_s"} for g in gs]
    assert strip(batch.generations()) == strip(live.generations())
    paid = lambda s: Counter((c["purpose"], c["sample_index"]) for c in s.llm_calls()
                             if not c["cached"])
    assert paid(batch) == paid(live)
    u = batch.llm_usage()
    assert u["origins"] == {"batch": sum(paid(batch).values())}
    assert u["prompt_tokens"] == 100 * sum(paid(batch).values())       # the server's usage
    assert u["usage_sources"] == {"stand-in": sum(paid(batch).values())}
    assert u["scripted"] == len(batch.llm_calls())                     # the fake server: labelled
    assert all(r["status"] == "answered" and r["batch_id"] for r in batch.llm_requests())
    downloaded = sorted(p.name for p in (tmp_path / "batch" / "llm_batch").glob("*-output.jsonl"))
    assert len(downloaded) == len(batches)


def test_a_failed_line_is_submitted_again(tmp_path):
    with FakeOpenAI(reply=script, fail_first=1, fail_status=500, batch_polls=2) as server:
        result = search(tmp_path, config(tmp_path, "run", server, generations=1),
                        BatchMode(submit=True, poll_s=0.01))
        assert result.stopped == "completed"
        first, second = list(server.batches.values())[:2]
        assert first["request_counts"]["failed"] == 1 and first["error_file_id"]
        assert second["request_counts"]["total"] == 1                 # only the failed one
    rows = RunStore(result.run_dir).llm_requests()
    assert sorted(r["attempts"] for r in rows)[-1] == 2
    assert all(r["status"] == "answered" for r in rows)


def test_a_batch_that_expires_fails_its_requests_for_good(tmp_path):
    with FakeOpenAI(reply=script, batch_outcome="expired") as server:
        cfg = config(tmp_path, "run", server, generations=1)
        with pytest.raises(LLMError, match=r"all \d+ LLM calls failed.*ended expired"):
            search(tmp_path, cfg, BatchMode(submit=True, poll_s=0.01, max_attempts=2))
        assert len(server.batches) == 2                           # tried twice, then given up
    rows = RunStore(cfg.run_dir).llm_requests()
    assert {r["status"] for r in rows} == {"failed"} and {r["attempts"] for r in rows} == {2}
    assert "injected: batch expired" in rows[0]["detail"]


def test_a_run_killed_while_waiting_polls_the_same_batch(tmp_path, monkeypatch):
    real = submit.wait_and_import
    calls = []

    def killed_once(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(submit, "wait_and_import", killed_once)
    with FakeOpenAI(reply=script) as server:
        cfg = config(tmp_path, "run", server, generations=1)
        with pytest.raises(KeyboardInterrupt):
            search(tmp_path, cfg, BatchMode(submit=True, poll_s=0.01))
        assert len(server.batches) == 1
        assert search(tmp_path, cfg, BatchMode(submit=True, poll_s=0.01),
                      resume=True).stopped == "completed"
        assert calls[1] == calls[0]                                   # the same batch again
        ids = [b["input_file_id"] for b in server.batches.values()]
        assert len(ids) == len(set(ids))


def test_the_fake_servers_batch_endpoints_through_litellm(tmp_path):
    from evokernel.llm.retry import load_litellm
    litellm = load_litellm()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"custom_id": f"k{i}", "method": "POST",
                                        "url": "/v1/chat/completions",
                                        "body": {"model": "m", "messages": [
                                            {"role": "user", "content": f"q{i}"}]}}) + "\n"
                            for i in range(3)))
    with FakeOpenAI(reply=lambda b: "re " + b["messages"][0]["content"], fail_first=1,
                    batch_polls=2) as server:
        args = {"custom_llm_provider": "openai", "api_base": server.api_base}
        with path.open("rb") as f:
            uploaded = litellm.create_file(file=f, purpose="batch", **args)
        assert server.files[uploaded.id]["content"] == path.read_bytes()
        batch = litellm.create_batch(completion_window="24h", endpoint="/v1/chat/completions",
                                     input_file_id=uploaded.id, **args)
        seen = [litellm.retrieve_batch(batch_id=batch.id, **args).status for _ in range(3)]
        assert seen == ["in_progress", "in_progress", "completed"]
        done = litellm.retrieve_batch(batch_id=batch.id, **args)
        out = litellm.file_content(file_id=done.output_file_id, **args).content.decode()
        err = litellm.file_content(file_id=done.error_file_id, **args).content.decode()
    out = [json.loads(x) for x in out.splitlines()]
    assert [(x["custom_id"], x["response"]["body"]["choices"][0]["message"]["content"])
            for x in out] == [("k1", "re q1"), ("k2", "re q2")]
    assert out[0]["response"]["body"]["system_fingerprint"].startswith("evokernel-stand-in")
    (bad,) = [json.loads(x) for x in err.splitlines()]
    assert (bad["custom_id"], bad["response"]["status_code"]) == ("k0", 429)
    with pytest.raises(ValueError, match="batch_outcome"):
        FakeOpenAI(batch_outcome="done")
