"""The batch mode's rounds on a machine without a GPU (evokernel.engine.deferred): a resumed run
makes the rounds that need only replies (the implementations of answered ideas), stops with
"needs_gpu" before evaluating anything, and the GPU machine then goes on from the same cache:
no request is asked twice, though its measured device sheet differs from the recorded one."""
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from evokernel.demo.scripted_llm import scripted_reply
from evokernel.engine.deferred import DeferredEvaluator, deferred_evaluator
from evokernel.errors import EvaluationDeferred
from evokernel.llm.batch import write_replies
from evokernel.llm.batch_import import import_replies
from evokernel.llm.batch_mode import BatchMode
from evokernel.operators import IdeaMutation
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution
from evokernel.search.runstate import prompt_device
from tests.llm.test_batch import config
from tests.search.test_search import problem
from tests.search.test_search_llm import BuildingFakeEvaluator


class MeasuredEvaluator(BuildingFakeEvaluator):
    """A fake evaluator whose device sheet names a GPU and a measured bandwidth, as a
    CudaEvaluator's does (each new machine measures it a little differently)."""

    def __init__(self, copy_gbs):
        super().__init__()
        self.info = {**self.info, "device": "NVIDIA H200", "copy_gbs": copy_gbs}


def no_repair(cfg):
    """The test's config without repair rounds (a repair is a new question, asked after the
    GPU's verdicts: rightly not in the cache yet)."""
    return dataclasses.replace(cfg, search=dataclasses.replace(cfg.search, repair_attempts=0))


def search(tmp_path, cfg, evaluator, resume=False):
    return Evolution(problem(tmp_path), cfg, mutations=[IdeaMutation()], crossovers=[],
                     evaluator=evaluator, llm_batch=BatchMode(tmp_path / "batch")).run(
                         resume=resume)


def answer(tmp_path, cfg):
    write_replies(tmp_path / "batch", scripted_reply, answered_by="script", scripted=True)
    assert import_replies(tmp_path / "batch", cfg.run_dir).problems == ()


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_the_implementation_round_runs_without_a_gpu_and_the_gpu_asks_nothing_again(
        tmp_path, no_gpu):
    cfg = no_repair(config(tmp_path, offspring=2))
    assert search(tmp_path, cfg, MeasuredEvaluator(4012.0)).stopped == "llm_batch"  # ideas
    answer(tmp_path, cfg)
    store = RunStore(cfg.run_dir, read_only=True)
    results_before = set(store.results())
    store.close()

    # On the CPU machine: the implementation round is written out, then the run waits for a GPU.
    assert search(tmp_path, cfg, None, resume=True).stopped == "llm_batch"
    store = RunStore(cfg.run_dir, read_only=True)
    assert {r["purpose"] for r in store.llm_requests("pending")} == {"implement"}
    store.close()
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "needs_gpu"
    store = RunStore(cfg.run_dir, read_only=True)
    calls = store.llm_usage()["calls"]
    store.close()
    assert search(tmp_path, cfg, None, resume=True).stopped == "needs_gpu"    # again: nothing
    store = RunStore(cfg.run_dir, read_only=True)                            # new is counted
    assert store.llm_usage()["calls"] == calls
    assert set(store.results()) == results_before          # nothing evaluated, nothing made up
    assert store.generations()[-1]["generation"] == 0
    asked = len(store.llm_requests())
    store.close()

    # On the GPU machine, which measures its bandwidth a little differently.
    gpu = MeasuredEvaluator(3987.0)
    assert search(tmp_path, cfg, gpu, resume=True).stopped == "completed"
    store = RunStore(cfg.run_dir, read_only=True)
    assert len(store.llm_requests()) == asked and not store.llm_requests("pending")
    assert gpu.evaluated and set(gpu.evaluated) <= set(store.results())
    assert store.meta()["device"]["copy_gbs"] == 4012.0     # the sheet the prompts showed
    assert store.generations()[-1]["generation"] == 1
    store.close()


def test_a_run_without_deferred_rounds_matches_one_made_all_on_the_gpu(tmp_path, no_gpu):
    cfg_a = no_repair(config(tmp_path / "a", offspring=2))
    cfg_b = no_repair(config(tmp_path / "b", offspring=2))
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    search(tmp_path / "a", cfg_a, MeasuredEvaluator(4000.0))
    answer(tmp_path / "a", cfg_a)
    search(tmp_path / "a", cfg_a, None, resume=True)         # CPU: implementation round
    answer(tmp_path / "a", cfg_a)
    search(tmp_path / "a", cfg_a, MeasuredEvaluator(4000.0), resume=True)
    ev = MeasuredEvaluator(4000.0)
    while search(tmp_path / "b", cfg_b, ev, resume=(tmp_path / "b" / "run").exists()
                 ).stopped == "llm_batch":
        answer(tmp_path / "b", cfg_b)
    a, b = RunStore(cfg_a.run_dir, read_only=True), RunStore(cfg_b.run_dir, read_only=True)
    assert list(a.candidates()) == list(b.candidates())
    assert a.generations()[-1]["population"] == b.generations()[-1]["population"]
    a.close(), b.close()


def test_the_stand_in_is_only_for_a_resumed_batch_folder_run_without_a_gpu():
    meta = {"device": {"device": "NVIDIA H200", "copy_gbs": 4000.0}}
    folder, submit = BatchMode(folder="b"), BatchMode(submit=True)
    assert isinstance(deferred_evaluator(meta, folder, gpu_visible=False), DeferredEvaluator)
    assert deferred_evaluator(meta, folder, gpu_visible=True) is None
    assert deferred_evaluator(None, folder, gpu_visible=False) is None      # a new run
    assert deferred_evaluator(meta, None, gpu_visible=False) is None        # not batch mode
    assert deferred_evaluator(meta, submit, gpu_visible=False) is None      # evaluates in-process
    assert deferred_evaluator({}, folder, gpu_visible=False) is None        # no GPU recorded
    ev = deferred_evaluator(meta, folder, gpu_visible=False)
    assert ev.info == meta["device"]
    with pytest.raises(EvaluationDeferred, match="3 candidate.*NVIDIA H200"):
        ev.evaluate([object()] * 3)


def test_prompts_show_the_recorded_sheet_of_the_same_gpu_and_a_new_gpus_own():
    recorded = {"device": {"device": "NVIDIA H200", "copy_gbs": 4012.0}}
    assert prompt_device(recorded, {"device": "NVIDIA H200", "copy_gbs": 3987.0}) == \
        recorded["device"]
    assert prompt_device(recorded, {"device": "NVIDIA H100", "copy_gbs": 3000.0}) == \
        {"device": "NVIDIA H100", "copy_gbs": 3000.0}
    assert prompt_device(None, {"device": "NVIDIA H200"}) == {"device": "NVIDIA H200"}


def _cpu_rounds(tmp_path, cfg):
    """Generation 1 made on the CPU from imported replies (ideas, then implementations), up to
    the stop for the GPU. Returns: the tokens spent and the calls made."""
    assert search(tmp_path, cfg, MeasuredEvaluator(4012.0)).stopped == "llm_batch"
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "llm_batch"
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "needs_gpu"
    store = RunStore(cfg.run_dir, read_only=True)
    usage = store.llm_usage()
    store.close()
    return int(usage["prompt_tokens"] + usage["completion_tokens"]), usage["calls"]


def test_a_generation_whose_replies_are_paid_is_evaluated_though_they_spent_the_budget(
        tmp_path, no_gpu):
    """The budget stops new questions, not the evaluation of answers already paid for: a
    generation made on the CPU from imported replies that reach the token budget is still
    evaluated on the GPU (the ablation's arms at 300k tokens, results/ablation-2026-12-02)."""
    (tmp_path / "free").mkdir(), (tmp_path / "capped").mkdir()
    spent, _ = _cpu_rounds(tmp_path / "free", no_repair(config(tmp_path / "free", offspring=2)))
    cfg = no_repair(config(tmp_path / "capped", offspring=2))
    cfg = dataclasses.replace(cfg, llm=dataclasses.replace(cfg.llm, max_total_tokens=spent))
    assert _cpu_rounds(tmp_path / "capped", cfg)[0] == spent     # the same rounds, budget reached
    store = RunStore(cfg.run_dir, read_only=True)
    made = {c.id for c in store.candidates().values() if c.generation == 1}
    calls = store.llm_usage()["calls"]
    store.close()
    assert made

    gpu = MeasuredEvaluator(4012.0)
    assert search(tmp_path / "capped", cfg, gpu, resume=True).stopped == "completed"
    store = RunStore(cfg.run_dir, read_only=True)
    assert made <= set(store.results()) and made <= set(gpu.evaluated)
    assert store.generations()[-1]["generation"] == 1
    assert store.llm_usage()["calls"] == calls                # nothing new was asked
    store.close()


def test_a_generation_whose_requests_were_written_out_is_finished_after_the_budget_is_spent(
        tmp_path, no_gpu):
    """A generation begun within the budget is finished, as in a live run, when the replies of
    its first round (imported after it was written out) spend the budget before its candidates
    exist: the resume goes on to its implementations and the GPU evaluates them. Seen in the
    ablation's softmax evokernel-s1 (results/ablation-2026-12-02): 264k tokens when its
    generation 4 began, 304k after its ideas and crossover replies, and the resume then stopped
    with "budget" before the implementation that had been asked for and answered."""
    cfg = no_repair(config(tmp_path, offspring=2))
    assert search(tmp_path, cfg, MeasuredEvaluator(4012.0)).stopped == "llm_batch"  # ideas
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "llm_batch"      # implementations
    store = RunStore(cfg.run_dir, read_only=True)
    spent = store.llm_usage()
    asked = {r["generation"] for r in store.llm_requests()}
    store.close()
    assert asked == {1} and spent["prompt_tokens"] + spent["completion_tokens"] > 0
    conf = Path(cfg.run_dir) / "config.json"        # the budget as the ideas' replies left it
    data = json.loads(conf.read_text())
    data["llm"]["max_total_tokens"] = 1
    conf.write_text(json.dumps(data))
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "needs_gpu"
    gpu = MeasuredEvaluator(4012.0)
    assert search(tmp_path, cfg, gpu, resume=True).stopped == "completed"  # its 1 generation
    store = RunStore(cfg.run_dir, read_only=True)
    made = {c.id for c in store.candidates().values() if c.generation == 1}
    assert made and made <= set(store.results()) and made <= set(gpu.evaluated)
    assert store.generations()[-1]["generation"] == 1
    store.close()


def test_a_resume_before_the_replies_keeps_waiting_for_them_past_the_budget(tmp_path, no_gpu):
    """Resumed past the budget before the replies of a begun generation are imported, the run
    writes the same requests out again and stops for them (not losing them as over budget);
    once they are imported it goes on to the GPU. A new question is still refused."""
    cfg = no_repair(config(tmp_path, offspring=2))
    assert search(tmp_path, cfg, MeasuredEvaluator(4012.0)).stopped == "llm_batch"  # ideas
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "llm_batch"      # implementations
    conf = Path(cfg.run_dir) / "config.json"
    data = json.loads(conf.read_text())
    data["llm"]["max_total_tokens"] = 1                    # the ideas' replies spent it
    conf.write_text(json.dumps(data))
    store = RunStore(cfg.run_dir, read_only=True)
    waiting = {r["key"] for r in store.llm_requests("pending")}
    store.close()
    assert waiting
    assert search(tmp_path, cfg, None, resume=True).stopped == "llm_batch"      # not yet answered
    store = RunStore(cfg.run_dir, read_only=True)
    assert {r["key"] for r in store.llm_requests("pending")} == waiting      # nothing new asked
    assert not [c for c in store.candidates().values() if c.generation == 1]
    store.close()
    answer(tmp_path, cfg)
    assert search(tmp_path, cfg, None, resume=True).stopped == "needs_gpu"
