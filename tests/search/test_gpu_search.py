"""On the GPU: the DEAP search with the real evaluator and the scripted LLM (litellm's
mock_response; its replies are scripted, not a model's ideas). What only a GPU shows: real
verdicts give the archive real bottleneck cells (the floors are measured), the Logbook's
statistics match the measured speedups, and a rejection's detail reaches the lineage."""
import pytest

from evokernel.config import EvalConfig, LLMConfig, RunConfig, SearchConfig
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.client import LLMClient
from evokernel.problem import load_problem
from evokernel.runs.store import RunStore
from evokernel.search.archive import Archive, bottleneck
from evokernel.search.evolution import Evolution
from evokernel.search.lineage import LineageIndex


@pytest.mark.gpu
def test_search_on_the_gpu_fills_archive_cells_and_the_logbook(tmp_path):
    llm_cfg = LLMConfig(model="openai/scripted-mock", max_concurrency=8)
    cfg = RunConfig(problem="softmax", run_dir=str(tmp_path / "run"), llm=llm_cfg,
                    evaluation=EvalConfig(measure_compile=False),
                    search=SearchConfig(population_size=2, offspring_per_generation=2,
                                        generations=2, ideas_per_call=2,
                                        implementations_per_idea=1, seed=0))
    llm = LLMClient(llm_cfg, cache_path=tmp_path / "cache.sqlite", mock_response=scripted_reply)
    result = Evolution(load_problem("softmax"), cfg, llm=llm).run()
    store = RunStore(result.run_dir)
    cands, results = store.candidates(), store.results()
    accepted = [r for r in results.values() if r.accepted]
    assert accepted and all(r.floor_ms for r in accepted)          # the floor is measured
    assert all(bottleneck(r) in ("host", "spills", "memory", "compute", "latency")
               for r in accepted)
    archive = Archive.rebuild(cands, results, lambda r: r.speedup)
    assert len(archive) >= 1
    book = store.logbook()
    assert [r["gen"] for r in book] == [0, 1, 2]
    for record, g in zip(book, store.generations()):
        assert record["max"] == pytest.approx(max(results[i].speedup for i in g["population"]))
    lineage = LineageIndex(cands, results, lambda r: r.speedup)
    for cid, r in results.items():
        a = lineage.attempt(cid)
        if not r.accepted and (r.detail.strip() or r.norm_error_ratio is not None):
            assert a.detail and a.reason == r.reason.value          # the reason's numbers
