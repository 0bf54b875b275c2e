"""`evokernel llm import` on replies that are there but hold nothing usable: an empty, blank or
null message content in a Batch API line is refused like an empty reply file (named by file and
line, the request stays pending); several bad lines for one request are each named; an ideas
reply with no readable ideas is imported verbatim but named, and counted as a failed call; the
advice names the run's own batch folder."""
import json
import shutil

from evokernel.cli.llm import reply_checks
from evokernel.llm.batch_import import import_replies
from evokernel.llm.cache import ReplyCache
from evokernel.report.labels import batch_line
from evokernel.runs.store import RunStore
from tests.llm.test_batch import finish, line, search, stopped  # noqa: F401 (a fixture)

IDEAS = '```json\n[{"idea": "fuse the max and the sum into one pass"}]\n```'


def with_finish(text, reason):
    obj = json.loads(line("x", text))
    obj["response"]["body"]["choices"][0]["finish_reason"] = reason
    return obj


def test_an_empty_blank_or_null_reply_line_is_refused_and_stays_pending(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    cut = with_finish("", "length")
    cut["custom_id"] = k[3]
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join([line(k[0], ""), line(k[1], " \n\t"), line(k[2], None),
                                  json.dumps(cut)]) + "\n")
    report = import_replies(results, cfg.run_dir)
    assert report.imported == () and report.already == ()
    assert list(report.problems) == [
        f"{results}:1: custom_id {k[0]}: empty reply (the message's content is empty; not "
        "imported)",
        f"{results}:2: custom_id {k[1]}: empty reply (the message's content is whitespace "
        "only; not imported)",
        f"{results}:3: custom_id {k[2]}: empty reply (the message's content is null; not "
        "imported)",
        f"{results}:4: custom_id {k[3]}: empty reply (the message's content is empty; "
        "finish_reason \"length\": max_tokens ran out before any text; not imported)"]
    assert "cut at the request's max_tokens" not in report.text()    # nothing was imported
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").keys() == set()
    assert [x.split()[0] for x in report.pending] == k                 # all six still wait
    # the real replies, imported afterwards, are taken: nothing was blocked
    real = tmp_path / "real.jsonl"
    real.write_text("".join(line(key, IDEAS) + "\n" for key in k[:4]))
    again = import_replies(real, cfg.run_dir)
    assert again.imported == tuple(k[:4]) and again.problems == ()
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[2])["text"] == IDEAS
    assert done_generations(tmp_path, cfg) == [0, 1]


def done_generations(tmp_path, cfg):
    return [g["generation"] for g in finish(tmp_path, cfg).generations()]


def test_each_bad_line_of_one_request_is_named_and_none_is_imported(tmp_path, stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    results = tmp_path / "results.jsonl"
    no_response = json.dumps({"custom_id": k[0], "response": None, "error": None})
    bad = [no_response, line(k[0], status=500), line(k[0], ""), line(k[0], None)]
    results.write_text("\n".join(bad + bad[:1]) + "\n")
    report = import_replies(results, cfg.run_dir)
    p = list(report.problems)
    assert report.imported == ()
    assert f"{results}:1: custom_id {k[0]}: no response object" in p
    assert f"{results}:2: custom_id {k[0]}: status 500: server overloaded" in p
    assert f"{results}:3: custom_id {k[0]}: empty reply (the message's content is empty; " \
           "not imported)" in p
    assert f"{results}:4: custom_id {k[0]}: empty reply (the message's content is null; " \
           "not imported)" in p
    assert f"{results}:5: custom_id {k[0]}: no response object" in p
    assert not [x for x in p if "imported once" in x or "lines (" in x]
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").keys() == set()
    rows = {r["key"]: r for r in RunStore(cfg.run_dir).llm_requests()}
    assert rows[k[0]]["status"] == "failed" and k[0] in " ".join(report.pending)
    assert len(p) == 5 and k[1] not in " ".join(report.problems)
    # one real reply among bad lines is imported; every bad line is still named
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([line(k[2], ""), line(k[2], IDEAS), line(k[2], status=500),
                                line(k[2], IDEAS)]) + "\n")
    report = import_replies(mixed, cfg.run_dir)
    assert report.imported == (k[2],)
    assert list(report.problems) == [
        f"{mixed}:1: custom_id {k[2]}: empty reply (the message's content is empty; not "
        "imported)",
        f"{mixed}:3: custom_id {k[2]}: status 500: server overloaded",
        f"custom_id {k[2]}: 2 lines ({mixed}:2, {mixed}:4); the same reply, imported once"]
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[2])["text"] == IDEAS


def test_an_ideas_reply_without_readable_ideas_is_imported_verbatim_and_named(tmp_path,
                                                                              stopped):
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())
    garbage = "asdf qwer\n\nI cannot help with that.\n"
    replies = tmp_path / "batch" / "replies"
    (replies / f"{k[0]}.txt").write_text(garbage)
    (replies / f"{k[1]}.txt").write_text(IDEAS)
    report = import_replies(tmp_path / "batch", cfg.run_dir, checks=reply_checks())
    assert set(report.imported) == {k[0], k[1]} and report.problems == ()
    assert ReplyCache(tmp_path / "run" / "llm_cache.sqlite").get(k[0])["text"] == garbage
    text = report.text()
    assert f"{replies / (k[0] + '.txt')}: a reply to an ideas request with no readable " \
           "ideas; imported as written" in text
    assert k[1] not in text.split("notes:")[1].split("still pending")[0]
    # the same from a Batch API line
    results = tmp_path / "results.jsonl"
    results.write_text(line(k[2], "no ideas here") + "\n")
    report = import_replies(results, cfg.run_dir, checks=reply_checks())
    assert report.imported == (k[2],)
    assert f"{results}:1: a reply to an ideas request with no readable ideas" in report.text()
    # show's batch line counts both as failed calls
    usage = RunStore(cfg.run_dir, read_only=True).llm_usage()
    assert usage["batch_unusable"] == 2
    assert "; 2 failed: imported, but nothing its operator can use" in batch_line(usage,
                                                                                 cfg.run_dir)


def test_the_advice_names_the_runs_batch_folder_not_another_folder(tmp_path, stopped):
    cfg, store = stopped
    key = sorted(r["key"] for r in store.llm_requests())[0]
    other = tmp_path / "my_replies"
    other.mkdir()
    (other / f"{key}.txt").write_text(IDEAS)
    text = import_replies(other, cfg.run_dir).text()
    assert f"--llm-batch {tmp_path / 'batch'} " in text and f"--llm-batch {other}" not in text
    answers = tmp_path / "answers"                  # a folder of replies/, not a batch folder
    (answers / "replies").mkdir(parents=True)
    (answers / "replies" / f"{key}.txt").write_text(IDEAS)
    text = import_replies(answers, cfg.run_dir).text()
    assert f"--llm-batch {tmp_path / 'batch'} " in text and f"--llm-batch {answers}" not in text
    # a copy of the batch folder (with the run's request files) is named as given
    copy = tmp_path / "copy" / "batch"
    shutil.copytree(tmp_path / "batch", copy)
    assert f"--llm-batch {copy} " in import_replies(copy, cfg.run_dir).text()
    # the run's folder is gone (the run was moved): the advice says what DIR is
    shutil.rmtree(tmp_path / "batch")
    text = import_replies(other, cfg.run_dir).text()
    assert "--llm-batch DIR " in text and "DIR: the batch folder the run's requests" in text


def test_content_given_as_text_parts_is_imported_as_their_text(tmp_path, stopped):
    """A Batch API line whose message content is a list of text parts (the list form of the
    Chat Completions API) is imported as the parts' text joined, not as the list's JSON."""
    cfg, store = stopped
    k = sorted(r["key"] for r in store.llm_requests())[0]
    obj = json.loads(line(k, None))
    obj["response"]["body"]["choices"][0]["message"]["content"] = [
        {"type": "text", "text": IDEAS[:20]}, {"type": "text", "text": IDEAS[20:]}]
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(obj) + "\n")
    report = import_replies(results, cfg.run_dir)
    assert report.problems == () and len(report.imported) == 1
    assert ReplyCache(f"{cfg.run_dir}/llm_cache.sqlite").get(k)["text"] == IDEAS
