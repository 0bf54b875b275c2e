"""`evokernel run --llm-batch`, `evokernel llm import` and `evokernel llm pending` through the
command line, on the CPU: the GPU check and the CUDA evaluator are replaced by the demo's fake
evaluator (its numbers are not measurements)."""
import json

import pytest

from evokernel.cli import main as cli
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.batch import write_replies
from evokernel.runs.store import RunStore


@pytest.fixture
def no_gpu_needed(monkeypatch):
    import importlib

    import evokernel.engine.evaluator as evaluator
    monkeypatch.setattr("evokernel.cli.options.require_gpu", lambda *a: None)
    # the fake stands for a GPU machine's evaluator: no deferred rounds (evokernel.engine.deferred)
    monkeypatch.setattr("evokernel.engine.deferred.deferred_evaluator", lambda *a, **k: None)
    fake = lambda problem, cfg, *args, **kwargs: FakeEvaluator(problem)   # noqa: E731
    monkeypatch.setattr(evaluator, "CudaEvaluator", fake)
    try:                    # where the run builds its evaluator once engine/factory.py exists
        factory = importlib.import_module("evokernel.engine.factory")
    except ImportError:
        return
    monkeypatch.setattr(factory, "make_evaluator", fake)


RUN = ["run", "softmax", "--model", "openai/frontier-stand-in", "--generations", "1",
       "--population", "2", "--offspring", "4", "--ideas", "2", "--implementations", "1",
       "--no-compile-baseline"]


def test_a_resume_without_a_gpu_makes_the_implementation_round_then_says_where_to_go_on(
        tmp_path, no_gpu_needed, capsys, monkeypatch):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    from evokernel.engine import deferred
    monkeypatch.undo()        # now a machine without a GPU, and no fake evaluator
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    store = RunStore(run_dir)
    store.set_meta("device", {"device": "NVIDIA H200", "copy_gbs": 4000.0})  # as a GPU records
    store.close()
    assert deferred.deferred_evaluator is not None
    outs = []
    for _ in range(3):
        write_replies(folder, scripted_reply, answered_by="script", scripted=True)
        assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
        capsys.readouterr()
        assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) == 0
        outs.append(capsys.readouterr().out)
        if "(needs_gpu)" in outs[-1]:
            break
    assert "(llm_batch)" in outs[0] and "(needs_gpu)" in outs[-1]
    assert f"evokernel run --resume {run_dir} --llm-batch {folder}" in outs[-1]
    store = RunStore(run_dir, read_only=True)
    assert not store.llm_requests("pending") and store.generations()[-1]["generation"] == 0
    store.close()


def test_run_llm_batch_import_resume_until_done(tmp_path, no_gpu_needed, capsys):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "(llm_batch)" in out and "generation 1 waits for" in out
    assert f"evokernel run --resume {run_dir} --llm-batch {folder}" in out
    exports = sorted(folder.glob("*.jsonl"))
    assert len(exports) == 1 and str(exports[0]) in out
    lines = [json.loads(x) for x in exports[0].read_text().splitlines()]
    assert lines and all(x["url"] == "/v1/chat/completions" and x["method"] == "POST"
                         and x["body"]["model"] == "frontier-stand-in" for x in lines)
    assert f"waits for {len(lines)} repl" in out
    assert cli.main(["llm", "pending", str(run_dir)]) == 1
    assert f"{len(lines)} of {len(lines)} batch requests wait" in capsys.readouterr().out
    for _ in range(10):
        write_replies(folder, scripted_reply, answered_by="evokernel.demo.scripted_llm",
                      scripted=True)
        assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
        assert "imported" in capsys.readouterr().out
        assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) in (0, 1)
        out = capsys.readouterr().out
        if "(llm_batch)" not in out:
            break
    assert "(completed)" in out
    assert cli.main(["llm", "pending", str(run_dir)]) == 0
    store = RunStore(run_dir, read_only=True)
    assert [g["generation"] for g in store.generations()] == [0, 1]
    assert {c.operator for c in store.candidates().values()} >= {"seed", "idea"}


def test_batch_mode_needs_a_model(tmp_path, no_gpu_needed, capsys):
    argv = ["run", "softmax", "--run-dir", str(tmp_path / "r"), "--llm-batch", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "--llm-batch/--llm-batch-submit need --model" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_import_names_bad_lines_and_exits_1(tmp_path, no_gpu_needed, capsys):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    capsys.readouterr()
    results = tmp_path / "results.jsonl"
    results.write_text('{"custom_id": "nope", "response": {"status_code": 200, "body": '
                       '{"choices": [{"message": {"content": "x"}}]}}}\n{"custom_id": "tr')
    assert cli.main(["llm", "import", str(results), str(run_dir)]) == 1
    out = capsys.readouterr().out
    assert f"{results}:1: custom_id nope: unknown" in out
    assert f"{results}:2: not valid JSON (a truncated line?)" in out
    assert "still pending" in out
    assert cli.main(["llm", "import", str(tmp_path / "missing.jsonl"), str(run_dir)]) == 2
    assert "missing.jsonl: no such file or folder" in capsys.readouterr().err


def test_resume_accepts_the_batch_flags_only(tmp_path, no_gpu_needed, capsys):
    run_dir = tmp_path / "run"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(tmp_path / "b"),
                     "--generations", "5"]) == 2
    err = capsys.readouterr().err
    assert "drop --generations" in err and "--llm-batch" not in err.split("drop")[1]


def test_the_stop_message_names_this_invocations_folder_not_the_stored_path(tmp_path, capsys,
                                                                           no_gpu_needed):
    from evokernel.cli.llm import stop_message
    from evokernel.llm.batch_mode import BatchMode
    run_dir = tmp_path / "run"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(tmp_path / "b")]) == 0
    import sqlite3
    db = sqlite3.connect(run_dir / "run.sqlite")      # as stored by a run started elsewhere
    db.execute("UPDATE llm_requests SET export = 'old/place/run-g001-r01.jsonl'")
    db.commit()
    db.close()
    text = stop_message(run_dir, BatchMode(folder=tmp_path / "here"))
    assert str(tmp_path / "here" / "run-g001-r01.jsonl") in text and "old/place" not in text


def test_an_empty_reply_line_is_refused_and_the_real_reply_imported_later_is_used(
        tmp_path, no_gpu_needed, capsys):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    capsys.readouterr()
    keys = sorted(p.stem for p in (folder / "requests").glob("*.json"))
    results = tmp_path / "results.jsonl"
    for content in ('""', "null"):
        results.write_text("".join(
            f'{{"custom_id": "{k}", "response": {{"status_code": 200, "body": {{"choices": '
            f'[{{"message": {{"content": {content}}}, "finish_reason": "stop"}}]}}}}}}\n'
            for k in keys))
        assert cli.main(["llm", "import", str(results), str(run_dir)]) == 1
        out = capsys.readouterr().out
        assert f"imported 0 replies from {results}" in out
        assert f"{results}:1: custom_id {keys[0]}: empty reply" in out
        assert f"still pending, no reply yet ({len(keys)})" in out
        assert cli.main(["llm", "pending", str(run_dir)]) == 1
        assert f"{len(keys)} of {len(keys)} batch requests wait" in capsys.readouterr().out
    write_replies(folder, scripted_reply, answered_by="script", scripted=True)
    assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"imported {len(keys)} repl" in out and "imported before" not in out
    assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) == 0
    assert "(llm_batch)" in capsys.readouterr().out     # the ideas' implementations wait
    store = RunStore(run_dir, read_only=True)
    assert {r["purpose"] for r in store.llm_requests("pending")} == {"implement"}
    store.close()


def test_an_ideas_reply_without_ideas_is_imported_named_and_shown_as_failed(
        tmp_path, no_gpu_needed, capsys):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    capsys.readouterr()
    keys = sorted(p.stem for p in (folder / "requests").glob("*.json"))
    reply = folder / "replies" / f"{keys[0]}.txt"
    reply.write_text("lorem ipsum, no ideas today\n")
    assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"imported 1 reply from {folder}" in out
    assert f"{reply}: a reply to an ideas request with no readable ideas; imported as " \
           "written" in out
    assert cli.main(["show", str(run_dir)]) == 0
    assert "1 failed: imported, but nothing its operator can use" in \
        " ".join(capsys.readouterr().out.split())
