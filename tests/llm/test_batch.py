"""The batch LLM mode's pieces: what an export holds, the client's queue and its billing of
imported replies, and every kind of bad input to `evokernel llm import`, each named, nothing
lost, the run resumable afterwards."""
import json
import shutil
import sqlite3
import threading

import pytest

from evokernel.config import LLMConfig, RunConfig, SearchConfig
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.errors import ConfigError, LLMError, LLMPending
from evokernel.llm.batch import BatchQueue, write_replies
from evokernel.llm.batch_import import import_replies
from evokernel.llm.batch_mode import BatchMode
from evokernel.llm.cache import LLMReply, ReplyCache, request_key
from evokernel.llm.client import LLMClient
from evokernel.operators import IdeaMutation
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution
from tests.search.test_search import problem
from tests.search.test_search_llm import BuildingFakeEvaluator

MODEL = "openai/gpt-4o-mini"
MSG = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "write a kernel"}]


def config(tmp_path, offspring=6, generations=1):
    return RunConfig(run_dir=str(tmp_path / "run"), llm=LLMConfig(model=MODEL, max_tokens=4096),
                     search=SearchConfig(population_size=2, offspring_per_generation=offspring,
                                         generations=generations, ideas_per_call=2,
                                         implementations_per_idea=1, crossover_prob=0.0,
                                         seed=11))


def search(tmp_path, cfg, resume=False, evaluator=None):
    return Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                     evaluator=evaluator or BuildingFakeEvaluator(),
                     llm_batch=BatchMode(tmp_path / "batch")).run(resume=resume)


@pytest.fixture
def stopped(tmp_path):
    """A run stopped at generation 1's first round (6 ideas requests written out)."""
    cfg = config(tmp_path)
    result = search(tmp_path, cfg)
    assert result.stopped == "llm_batch"
    return cfg, RunStore(cfg.run_dir)


def test_an_export_is_openai_batch_jsonl_plus_one_file_per_request(tmp_path, stopped):
    cfg, store = stopped
    rows = store.llm_requests()
    assert len(rows) == 6 and {r["status"] for r in rows} == {"pending"}
    assert {r["purpose"] for r in rows} == {"ideas"} and {r["attempts"] for r in rows} == {1}
    export = tmp_path / "batch" / "run-g001-r01.jsonl"
    lines = [json.loads(x) for x in export.read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == sorted(r["key"] for r in rows)
    for line, row in zip(lines, sorted(rows, key=lambda r: r["key"])):
        assert set(line) == {"custom_id", "method", "url", "body"}
        assert (line["method"], line["url"]) == ("POST", "/v1/chat/completions")
        body = line["body"]
        assert body == {"model": "gpt-4o-mini", "messages": body["messages"],
                        "temperature": 0.8, "max_tokens": 4096}
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        # the custom_id is the reply-cache key of exactly this request
        assert line["custom_id"] == request_key(MODEL, body["messages"], 0.8, 4096,
                                                row["sample_index"])
        own = json.loads((tmp_path / "batch" / "requests" / f"{line['custom_id']}.json")
                         .read_text())
        assert own == {"custom_id": line["custom_id"], "model": MODEL,
                       "messages": body["messages"], "temperature": 0.8, "max_tokens": 4096}
    assert (tmp_path / "batch" / "replies").is_dir()
    # nothing of generation 1 is in the store: it was not evaluated
    assert {c.generation for c in store.candidates().values()} == {0}
    assert [g["generation"] for g in store.generations()] == [0]
    assert store.llm_calls() == []                       # a pending request is not a call


@pytest.mark.parametrize("model, sampling", [
    ("openai/gpt-5", {"max_completion_tokens": 4096}),        # no temperature other than 1
    ("openai/o3", {"max_completion_tokens": 4096}),
    ("openai/gpt-4o-mini", {"temperature": 0.8, "max_tokens": 4096}),
])
def test_a_batch_line_carries_the_settings_as_the_provider_takes_them(tmp_path, model,
                                                                      sampling):
    """A raw batch line gets no drop_params: litellm's mapping is applied when it is queued,
    so a gpt-5 line does not carry the temperature its API refuses. The key is unchanged."""
    queue = BatchQueue()
    client = LLMClient(LLMConfig(model=model, max_tokens=4096),
                       cache_path=tmp_path / "c.sqlite", batch=queue)
    with pytest.raises(LLMPending):
        client.complete(MSG, purpose="ideas", sample_index=1)
    (req,) = queue.take()
    assert req.batch_line()["body"] == {"model": model.split("/", 1)[1], "messages": MSG,
                                        **sampling}
    assert req.custom_id == request_key(model, MSG, 0.8, 4096, 1)
    assert req.request_file()["temperature"] == 0.8      # what the run asked for, on record


def test_the_client_queues_instead_of_sending_and_bills_an_import_once(tmp_path):
    records, queue = [], BatchQueue()
    client = LLMClient(LLMConfig(model=MODEL, max_total_tokens=1000),
                       cache_path=tmp_path / "c.sqlite", batch=queue, on_usage=records.append)
    out = []

    def ask():
        try:
            client.complete(MSG, purpose="ideas", sample_index=4)
        except LLMPending as e:
            out.append(e)
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4 and records == [] and client.usage["errors"] == 0
    (req,) = queue.take()                                # identical requests: written once
    key = request_key(MODEL, MSG, 0.8, None, 4)
    assert (req.custom_id, req.purpose, req.sample_index, req.messages) == \
        (key, "ideas", 4, MSG) and queue.take() == []
    client.cache.put(key, LLMReply("ok", MODEL, 600, 500, 0, 0.01, False, 0.0,
                                   usage_source="tokenizer", origin="batch",
                                   answered_by="someone"), unbilled=True)
    first = client.complete(MSG, purpose="ideas", sample_index=4)
    again = client.complete(MSG, purpose="ideas", sample_index=4)
    assert (first.text, first.cached, first.prompt_tokens, first.origin) == \
        ("ok", False, 600, "batch")
    assert (again.cached, again.prompt_tokens) == (True, 0)
    assert [r["cached"] for r in records] == [False, True]
    assert records[0]["usage_source"] == "tokenizer" and records[0]["answered_by"] == "someone"
    assert client.budget_exceeded()                      # the imported tokens count
    queue.fail("k" * 64, "expired")
    with pytest.raises(ValueError, match="needs a cache_path"):
        LLMClient(LLMConfig(model=MODEL), batch=BatchQueue())


def test_a_request_the_batch_failed_for_good_raises_llm_error(tmp_path):
    queue = BatchQueue()
    records = []
    client = LLMClient(LLMConfig(model=MODEL), cache_path=tmp_path / "c.sqlite", batch=queue,
                       on_usage=records.append)
    queue.fail(request_key(MODEL, MSG, 0.8, None, 0), "batch b-1 ended expired")
    with pytest.raises(LLMError, match="batch failed this request: batch b-1 ended expired") \
            as e:
        client.complete(MSG, purpose="implement")
    assert not isinstance(e.value, LLMPending) and queue.take() == []
    assert records[0]["error"] == "batch b-1 ended expired" and client.usage["errors"] == 1


def test_an_old_reply_cache_gets_the_provenance_columns(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE replies (key TEXT PRIMARY KEY, model TEXT, text TEXT NOT NULL,"
                 " prompt_tokens INTEGER, completion_tokens INTEGER, reasoning_tokens INTEGER,"
                 " cost_usd REAL, created_s REAL)")
    conn.execute("INSERT INTO replies VALUES ('k', 'm', 'old reply', 1, 2, 0, 0.0, 0.0)")
    conn.commit()
    conn.close()
    cache = ReplyCache(path)
    hit = cache.get("k")
    assert hit["text"] == "old reply" and hit["origin"] == "live"
    assert hit["usage_source"] == "provider" and hit["scripted"] is None and not hit["unbilled"]
    assert not cache.claim("k")


def line(cid, text=None, *, status=200, error=None, usage=True):
    body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
    if usage:
        body["usage"] = {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}
    if status != 200:
        body = {"error": {"message": "server overloaded", "type": "server_error"}}
    return json.dumps({"id": f"batch_req_{cid[:4]}", "custom_id": cid, "error": error,
                       "response": None if error else {"status_code": status,
                                                       "request_id": "r", "body": body}})


def test_every_bad_input_is_named_and_the_run_resumes(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    results = tmp_path / "results.jsonl"
    rows = [line(k[0], "I would need the profiler output first."),     # 1 no code: kept
            line(k[1], "```json\n[]\n```"),                              # 2 } the same id with
            line(k[1], "something else"),                                # 3 } two replies
            line(k[2], status=500),                                      # 4 non-200
            line(k[3], error={"code": "batch_expired", "message": "not done in 24h"}),  # 5
            "",                                                          # 6 blank: skipped
            line("f" * 64, "who asked?"),                                # 7 unknown id
            json.dumps({"id": "x", "response": {}}),                     # 8 no custom_id
            line(k[4], "a reply cut off")[:60]]                          # 9 truncated
    results.write_text("\n".join(rows))                                  # k[5]: missing
    report = import_replies(results, cfg.run_dir)
    p = "\n".join(report.problems)
    assert report.imported == (k[0],)
    assert f"custom_id {k[1]}: 2 different replies ({results}:2, {results}:3); none imported" in p
    assert f"{results}:4: custom_id {k[2]}: status 500: server overloaded" in p
    assert f"{results}:5: custom_id {k[3]}: error object: not done in 24h" in p
    assert f"{results}:7: custom_id {'f' * 64}: unknown (no request of this run has that id)" in p
    assert f"{results}:8: no custom_id" in p
    assert f"{results}:9: not valid JSON (a truncated line?)" in p
    assert len(report.problems) == 6 and ":6:" not in p
    assert [x.split()[0] for x in report.pending] == k[1:]               # listed, still pending
    text = report.text()
    assert "6 problems" in text and "still pending, no reply yet (5)" in text
    assert f"--llm-batch {tmp_path / 'batch'}" in text
    # the no-code reply is stored verbatim, with the reply's own usage and the batch price
    hit = ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[0])
    assert hit["text"] == "I would need the profiler output first."
    assert (hit["prompt_tokens"], hit["usage_source"], hit["origin"]) == (1200, "provider",
                                                                           "batch")
    assert hit["answered_by"] == "gpt-4o-mini-2024-07-18" and hit["cost_usd"] > 0
    status = {r["key"]: r["status"] for r in RunStore(cfg.run_dir).llm_requests()}
    assert status[k[0]] == "answered" and status[k[2]] == status[k[3]] == "failed"
    # resume: only the five without a reply are written out again
    assert search(tmp_path, cfg, resume=True).stopped == "llm_batch"
    again = (tmp_path / "batch" / "run-g001-r02.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["custom_id"] for x in again) == k[1:]
    assert {r["attempts"] for r in RunStore(cfg.run_dir).llm_requests() if r["key"] != k[0]} \
        == {2}
    done = finish(tmp_path, cfg)
    assert [g["generation"] for g in done.generations()] == [0, 1]
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[0])["text"] == \
        "I would need the profiler output first."                       # kept throughout


def finish(tmp_path, cfg):
    """Answer with the scripted LLM and resume until the run completes; returns the store."""
    for _ in range(10):
        write_replies(tmp_path / "batch", scripted_reply, answered_by="script", scripted=True)
        report = import_replies(tmp_path / "batch", cfg.run_dir)
        # a request answered from the results file has no reply file: the script's differs
        assert not [x for x in report.problems if "imported before; kept that one" not in x]
        if search(tmp_path, cfg, resume=True).stopped == "completed":
            return RunStore(cfg.run_dir)
    raise AssertionError("the run did not finish")


def test_reimport_changes_nothing_and_a_conflicting_reply_is_refused(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    first = tmp_path / "a.jsonl"
    first.write_text(line(k[0], "first reply") + "\n")
    assert import_replies(first, cfg.run_dir).imported == (k[0],)
    again = import_replies(first, cfg.run_dir)
    assert again.imported == () and again.already == (k[0],) and again.problems == ()
    other = tmp_path / "b.jsonl"
    other.write_text(line(k[0], "another reply") + "\n" + line(k[1], "x") + "\n"
                     + line(k[1], "x") + "\n")
    report = import_replies(other, cfg.run_dir)
    assert f"{other}:1: custom_id {k[0]}: a different reply was imported before; kept that " \
           "one" in report.problems
    assert f"custom_id {k[1]}: 2 lines ({other}:2, {other}:3); the same reply, imported " \
           "once" in report.problems
    assert report.imported == (k[1],)
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[0])["text"] == "first reply"


def test_reply_files_bad_ones_named_good_ones_counted(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    replies = tmp_path / "batch" / "replies"
    (replies / f"{k[0]}.txt").write_text("Idea: nothing to add.\n\nNo code today.")
    (replies / f"{k[1]}.txt").write_text("  \n")
    (replies / f"{k[2]}.txt").write_bytes(b"caf\xe9")
    (replies / f"{'e' * 64}.txt").write_text("an answer to no request")
    (replies / "notes.md").write_text("my notes")
    (replies / "answered_by.json").write_text("{not json")
    report = import_replies(tmp_path / "batch", cfg.run_dir, answered_by="claude-x (fresh "
                            "context, no tools)")
    p = "\n".join(report.problems)
    assert f"{replies / (k[1] + '.txt')}: empty reply file (not imported)" in p
    assert f"{replies / (k[2] + '.txt')}: not UTF-8 text" in p
    assert f"custom_id {'e' * 64}: unknown" in p
    assert f"{replies / 'notes.md'}: ignored" in p
    assert f"{replies / 'answered_by.json'}: not a readable manifest" in p
    assert report.imported == (k[0],) and report.counted == 1
    hit = ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[0])
    assert hit["text"] == "Idea: nothing to add.\n\nNo code today."     # verbatim
    assert hit["usage_source"] == "tokenizer" and hit["prompt_tokens"] > 100
    assert hit["completion_tokens"] > 0 and hit["cost_usd"] == 0.0      # a file: not priced
    assert hit["answered_by"] == "claude-x (fresh context, no tools)" and hit["scripted"] is None
    assert len(report.pending) == 5


def test_a_reply_without_code_becomes_a_no_code_candidate(tmp_path):
    cfg = config(tmp_path, offspring=1)
    ev = BuildingFakeEvaluator()
    assert search(tmp_path, cfg, evaluator=ev).stopped == "llm_batch"     # the ideas call
    write_replies(tmp_path / "batch", scripted_reply, answered_by="script", scripted=True)
    import_replies(tmp_path / "batch", cfg.run_dir)
    assert search(tmp_path, cfg, resume=True, evaluator=ev).stopped == "llm_batch"
    store = RunStore(cfg.run_dir)
    pending = [r for r in store.llm_requests("pending") if r["purpose"] == "implement"]
    assert len(pending) == 2
    text = "I would restructure the reduction, but not today."
    for r in pending:
        (tmp_path / "batch" / "replies" / f"{r['key']}.txt").write_text(text)
    assert import_replies(tmp_path / "batch", cfg.run_dir).problems == ()
    assert search(tmp_path, cfg, resume=True, evaluator=ev).stopped == "completed"
    cands, results = store.candidates(), store.results()
    kept = [c for c in cands.values() if c.source == text]
    assert len(kept) == 1 and results[kept[0].id].reason.value == "no_code"


def test_a_run_waiting_for_batch_replies_is_not_resumed_live(tmp_path, stopped, monkeypatch):
    """Resumed without --llm-batch, the written-out requests would be sent again or fail for
    want of a key, and the generation saved without their children: refused, named."""
    cfg, store = stopped
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    live = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                     evaluator=BuildingFakeEvaluator())
    with pytest.raises(ConfigError, match=r"6 LLM request\(s\) written out by the batch mode "
                                          r"still wait for replies"):
        live.run(resume=True)
    assert len(store.llm_requests("pending")) == 6         # nothing sent, nothing lost
    for r in store.llm_requests("pending"):                # answered: the key is what is missing
        (tmp_path / "batch" / "replies" / f"{r['key']}.txt").write_text(scripted_reply(
            r["request"]["messages"]))
    assert import_replies(tmp_path / "batch", cfg.run_dir).problems == ()
    live = Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                     evaluator=BuildingFakeEvaluator())
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        live.run(resume=True)


def test_each_request_is_also_written_as_plain_text_with_its_messages_verbatim(tmp_path, stopped):
    cfg, store = stopped
    for row in store.llm_requests():
        as_json = json.loads((tmp_path / "batch" / "requests" / f"{row['key']}.json").read_text())
        text = (tmp_path / "batch" / "requests" / f"{row['key']}.md").read_text()
        assert row["key"] in text.splitlines()[0] and "read every one" in text
        for m in as_json["messages"]:
            assert f"======== {m['role']} message ========\n{m['content']}" in text
        assert max(len(line) for line in text.splitlines()) < max(
            len(m["content"]) for m in as_json["messages"])     # real line breaks


def test_a_batch_line_keeps_the_configs_settings_where_litellm_is_not_installed(monkeypatch):
    import sys

    from evokernel.llm.retry import provider_params
    assert "temperature" not in provider_params("openai/gpt-5", 0.8, 1000)   # litellm maps it
    monkeypatch.setitem(sys.modules, "litellm", None)       # `import litellm` now fails
    assert provider_params("openai/gpt-5", 0.8, 1000) == {"temperature": 0.8, "max_tokens": 1000}
    assert provider_params("anthropic/claude", 0.8, None) == {"temperature": 0.8}


def test_a_reply_cut_at_max_tokens_is_imported_as_written_with_a_note(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    cut = json.loads(line(k[0], '```json\n[{"idea": "fuse the two pa'))
    cut["response"]["body"]["choices"][0]["finish_reason"] = "length"
    (tmp_path / "out.jsonl").write_text(json.dumps(cut) + "\n")
    report = import_replies(tmp_path / "out.jsonl", cfg.run_dir)
    assert report.imported == (k[0],) and report.problems == ()
    assert f"{tmp_path / 'out.jsonl'}:1: cut at the request's max_tokens" in report.text()


def test_an_empty_reply_folder_says_so_and_the_advice_names_the_folder_given(tmp_path, stopped):
    cfg, store = stopped
    elsewhere = tmp_path / "copy" / "batch"      # a copy of the batch folder: its requests too
    (elsewhere / "replies").mkdir(parents=True)
    shutil.copytree(tmp_path / "batch" / "requests", elsewhere / "requests")
    report = import_replies(elsewhere, cfg.run_dir)
    assert report.imported == () and "no reply files" in report.text()
    assert f"--llm-batch {elsewhere} " in report.text()


def test_a_scripted_label_is_not_credited_to_the_manifests_model(tmp_path, stopped):
    cfg, store = stopped
    key = sorted(r["key"] for r in store.llm_requests())[0]
    replies = tmp_path / "batch" / "replies"
    (replies / "answered_by.json").write_text('{"answered_by": "some model", "scripted": false}')
    (replies / f"{key}.txt").write_text("Idea: none.")
    import_replies(tmp_path / "batch", cfg.run_dir, scripted="tester")
    hit = ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(key)
    assert hit["scripted"] == "tester" and hit["answered_by"] != "some model"


def test_a_round_written_again_before_its_replies_reuses_its_file(tmp_path, stopped):
    """A resume with no replies yet writes the same requests: no second file (r02) that could
    be submitted, and paid for, twice; the attempt is counted as before."""
    cfg, _ = stopped
    first = sorted((tmp_path / "batch").glob("*.jsonl"))
    text = first[0].read_text()
    for _ in range(2):
        assert search(tmp_path, cfg, resume=True).stopped == "llm_batch"
    assert sorted((tmp_path / "batch").glob("*.jsonl")) == first and first[0].read_text() == text
    rows = RunStore(cfg.run_dir).llm_requests()
    assert {r["attempts"] for r in rows} == {3} and {r["export"] for r in rows} == {str(first[0])}
