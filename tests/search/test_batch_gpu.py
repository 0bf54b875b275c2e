"""On the GPU: the batch round trip with the real evaluator (build, gate, timing) on softmax.
Export -> the scripted LLM answers the request files -> import -> resume, until the run ends;
then the same search live through litellm's mock_response. Generation 1's parents are the seed
alone in both, so both make the same requests and get the same children and verdicts (only the
measured times differ between two runs). Both runs have the LLM's operator only: with the default
operators (IdeaMutation and TuneMutation, one drawn per call) seed 0 draws TuneMutation for both
of generation 1's calls, which needs no LLM, so no request was written (the H200, 2026-12-03)."""
import pytest

from evokernel.config import EvalConfig, LLMConfig, RunConfig, SearchConfig
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.batch import write_replies
from evokernel.llm.batch_import import import_replies
from evokernel.llm.batch_mode import BatchMode
from evokernel.llm.client import LLMClient
from evokernel.operators import IdeaMutation
from evokernel.problem import load_problem
from evokernel.runs.store import RunStore
from evokernel.search.evolution import Evolution


def search(cfg, **kw):
    """The test's search: the LLM's idea mutation only, no crossover."""
    return Evolution(load_problem("softmax"), cfg, mutations=[IdeaMutation()], crossovers=[],
                     **kw)


def config(tmp_path, name):
    return RunConfig(problem="softmax", run_dir=str(tmp_path / name),
                     llm=LLMConfig(model="openai/scripted-mock", max_concurrency=8),
                     evaluation=EvalConfig(measure_compile=False),
                     search=SearchConfig(population_size=2, offspring_per_generation=2,
                                         generations=1, ideas_per_call=2,
                                         implementations_per_idea=1, crossover_prob=0.0,
                                         seed=0))


@pytest.mark.gpu
def test_batch_round_trip_on_the_gpu_matches_a_live_run(tmp_path):
    cfg = config(tmp_path, "batch")
    folder = tmp_path / "requests"
    result = search(cfg, llm_batch=BatchMode(folder)).run()
    stops = 0
    while result.stopped == "llm_batch":
        stops += 1
        assert stops <= 6
        write_replies(folder, scripted_reply, answered_by="evokernel.demo.scripted_llm",
                      scripted=True)
        assert import_replies(folder, cfg.run_dir).problems == ()
        result = search(cfg, llm_batch=BatchMode(folder)).run(resume=True)
    assert result.stopped == "completed" and stops >= 2           # ideas, implementations
    live_cfg = config(tmp_path, "live")
    llm = LLMClient(live_cfg.llm, cache_path=tmp_path / "live" / "llm_cache.sqlite",
                    mock_response=scripted_reply)
    search(live_cfg, llm=llm).run()
    batch, live = RunStore(cfg.run_dir), RunStore(live_cfg.run_dir)
    assert list(batch.candidates()) == list(live.candidates())
    verdicts = lambda s: {k: (r.verdict.value, r.reason.value) for k, r in s.results().items()}
    assert verdicts(batch) == verdicts(live)
    assert any(r.accepted and r.candidate_ms > 0 for r in batch.results().values())
    assert [g["generation"] for g in batch.generations()] == [0, 1]
    assert all(r["status"] == "answered" for r in batch.llm_requests())
    assert batch.llm_usage()["usage_sources"].keys() == {"tokenizer"}
