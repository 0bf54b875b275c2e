"""`show` and `report` say who answered a run's LLM calls: a stand-in's replies are labelled
scripted everywhere their ideas appear, counted tokens are called counted, and imported replies
name who answered; a model's run carries no such label."""
import io

from rich.console import Console

from evokernel.report.labels import scripted_note
from evokernel.report.show import render
from evokernel.report.write import write_report
from evokernel.runs.store import RunStore
from evokernel.runs.view import load_run
from tests.support.runstores import RECORDED, build_crossover_run

MOCK = "litellm mock_response: evokernel.demo.scripted_llm.scripted_reply"


def run_with_calls(tmp_path, **fields):
    build_crossover_run(tmp_path / "run")
    store = RunStore(tmp_path / "run")
    for cached in (False, False, True):
        store.record_llm_call({"purpose": "ideas", "model": "openai/gpt-5", "sample_index": 0,
                               "prompt_tokens": 1000, "completion_tokens": 400,
                               "reasoning_tokens": 0, "cost_usd": 0.01, "cached": cached,
                               "error": None, "usage_source": "provider", "scripted": None,
                               "origin": "live", "answered_by": None, **fields})
    store.close()
    return tmp_path / "run"


def shown(run_dir, width=120):
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render(load_run(run_dir), width))
    return console.file.getvalue()


def flat(text):
    """The text with the panel's borders and the line wrapping taken out."""
    return " ".join(text.replace("│", " ").split())


def test_a_models_run_is_not_labelled_scripted(tmp_path):
    out = shown(run_with_calls(tmp_path))
    assert "3 calls (1 from the replay cache), 2,000 prompt + 800 completion tokens (from the " \
           "replies' usage), $0.0200" in flat(out)
    assert "SCRIPTED" not in out and "idea*" not in out and "scripted" not in out
    md = write_report(tmp_path / "run", tmp_path / "rep").read_text()
    assert "SCRIPTED" not in md and "| idea |" in md


def test_a_scripted_run_is_labelled_in_show_and_report(tmp_path):
    run = run_with_calls(tmp_path, scripted=MOCK, usage_source="stand-in")
    out = shown(run)
    text = flat(out)
    assert f"SCRIPTED: 3 of 3 LLM calls were answered by a stand-in ({MOCK}), not a model" in text
    assert "the stand-in's placeholder numbers, not counts" in text
    assert "lineage of the best kernel (seed first); idea*: from scripted replies, not a " \
           "model's" in text and " idea* " in out
    md_path = write_report(run, tmp_path / "rep")
    md = md_path.read_text()
    assert f"**SCRIPTED: 3 of 3 LLM calls were answered by a stand-in ({MOCK})" in md
    assert md.count("| idea (scripted, not a model's) |") == 2   # lineage and all candidates
    html = md_path.with_suffix(".html").read_text()
    assert "<strong>SCRIPTED: 3 of 3" in html
    assert "idea (scripted, not a model&#x27;s)" in html


def test_imported_replies_say_who_answered_and_that_tokens_were_counted(tmp_path):
    run = run_with_calls(tmp_path, origin="batch", usage_source="tokenizer",
                         answered_by="claude-opus-x (fresh context, no tools)", cost_usd=0.0)
    text = flat(shown(run))
    assert "(counted with litellm.token_counter (the replies carried no usage))" in text
    assert "2 replies imported from the batch mode" in text
    assert "answered by claude-opus-x (fresh context, no tools)" in text
    assert "SCRIPTED" not in text
    assert "LLM batch" not in text                  # no request rows: the mode was not used


def test_show_says_how_many_batch_requests_wait(tmp_path):
    run = run_with_calls(tmp_path)
    store = RunStore(run)
    store.add_llm_requests(2, "b/run-g002-r01.jsonl", [
        {"key": k, "purpose": "implement", "sample_index": 0, "model": "openai/gpt-5",
         "request": {"messages": []}} for k in ("a" * 64, "b" * 64, "c" * 64)])
    store.set_llm_request("a" * 64, "answered")
    store.close()
    text = flat(shown(run, width=200))
    assert f"LLM batch 2 of 3 requests written out wait for replies (evokernel llm pending " \
           f"{run})" in text


def test_calls_recorded_before_labels_are_recognised_by_a_stand_in_models_name():
    usage = load_run(RECORDED).llm_usage               # model "openai/scripted-mock", no label
    assert usage["scripted"] == 12 and "openai/scripted-mock (a stand-in by its name" in \
        scripted_note(usage)
    assert usage["usage_sources"] == {"stand-in": 10}
    assert "SCRIPTED: 12 of 12" in flat(shown(RECORDED))
