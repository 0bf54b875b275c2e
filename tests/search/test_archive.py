"""The MAP-Elites archive (idea category x bottleneck), its inspirations from other lineages, and
the survival selection that keeps each cell's best before the next-fastest."""
from types import SimpleNamespace

import pytest
from deap import tools

from evokernel.config import RunConfig, SearchConfig
from evokernel.records import Candidate, EvalResult, KernelResources, KernelTime, Reason, Verdict
from evokernel.runs.store import RunStore
from evokernel.search.archive import Archive, bottleneck, sel_niches, tagged_category
from evokernel.search.evolution import Evolution, SpeedupFitness
from evokernel.search.lineage import LineageIndex
from evokernel.operators import TuneMutation
from tests.search.test_search import problem
from tests.support.fakes import FakeEvaluator


def ok(cid="x", ms=1.0, **kw):
    return EvalResult(candidate_id=cid, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      reference_ms=2.0, candidate_ms=ms, **kw)


@pytest.mark.parametrize("result, expected", [
    (ok(kernels=(KernelTime("k", 7, gpu_us=200.0),)), "host"),        # 0.2 of 1 ms on the GPU
    (ok(resources=(KernelResources("k", 255, spill_store_bytes=64),), floor_ms=0.9), "spills"),
    (ok(floor_ms=0.8), "memory"),                                      # 1.25x the memory floor
    (ok(floor_ms=0.1, compute_floor_ms=0.9), "compute"),
    (ok(floor_ms=0.8, compute_floor_ms=0.9), "compute"),               # the binding floor names it
    (ok(floor_ms=0.3), "latency"),                                     # 3.3x the only floor
    (ok(floor_ms=0.1, compute_floor_ms=0.1), "latency"),
    (ok(), "unknown"),
    (EvalResult.failure("x", Reason.BUILD_ERROR, "nvcc"), "rejected"),
])
def test_bottleneck_reads_the_verdict(result, expected):
    assert bottleneck(result) == expected


def test_category_comes_from_the_tag_or_the_first_parent():
    fit = lambda r: r.speedup
    seed = Candidate(source="s")
    idea = Candidate(source="a", idea="[Memory] float4 loads", parent_ids=(seed.id,))
    tune = Candidate(source="b", idea="tune BLOCK=256", parent_ids=(idea.id,), operator="tune")
    odd = Candidate(source="c", idea="[magic] something", parent_ids=(seed.id,))
    merge = Candidate(source="d", idea="merge of both", parent_ids=(idea.id, odd.id))
    archive = Archive.rebuild({c.id: c for c in (seed, idea, tune, odd, merge)}, {}, fit)
    assert [archive.category[c.id] for c in (seed, idea, tune, odd, merge)] == \
        ["seed", "memory", "memory", "other", "merge"]
    assert tagged_category("no tag") is None


def test_elites_are_the_fittest_per_cell_earliest_on_a_tie_never_rejected():
    fit = lambda r: r.speedup
    seed = Candidate(source="s")
    a = Candidate(source="a", idea="[memory] A", parent_ids=(seed.id,))
    b = Candidate(source="b", idea="[memory] B", parent_ids=(seed.id,))
    c = Candidate(source="c", idea="[memory] C", parent_ids=(seed.id,))
    d = Candidate(source="d", idea="[compute] D", parent_ids=(seed.id,))
    results = {seed.id: ok(seed.id, 1.0), a.id: ok(a.id, 0.5), b.id: ok(b.id, 0.5),
               c.id: ok(c.id, 0.6),
               d.id: EvalResult.failure(d.id, Reason.LOWER_PRECISION, "fp16")}
    archive = Archive.rebuild({x.id: x for x in (seed, a, b, c, d)}, results, fit)
    assert len(archive) == 2                                 # (seed, unknown), (memory, unknown)
    assert archive.elites[("memory", "unknown")][0] == a     # a and b tie: the earlier one
    assert archive.niche(d.id) == ("compute", "rejected")
    assert ("compute", "rejected") not in archive.elites


def test_inspirations_come_from_other_lineages_and_rotate_by_call():
    fit = lambda r: r.speedup
    seed = Candidate(source="s")
    a = Candidate(source="a", idea="[memory] A", parent_ids=(seed.id,))
    a2 = Candidate(source="a2", idea="[compute] A2", parent_ids=(a.id,))
    b = Candidate(source="b", idea="[async] B", parent_ids=(seed.id,))
    c = Candidate(source="c", idea="[dtypes] C", parent_ids=(seed.id,))
    cands = {x.id: x for x in (seed, a, a2, b, c)}
    results = {x.id: ok(x.id, ms) for x, ms in ((seed, 1.0), (a, 0.5), (a2, 0.4), (b, 0.8),
                                                (c, 0.9))}
    archive = Archive.rebuild(cands, results, fit)
    lineage = LineageIndex(cands, results, fit)
    got = archive.inspirations([a.id], lineage, n=2, offset=0)
    assert [x.id for x, _ in got] == [b.id, c.id]            # not a2 (a's child), not the seed
    assert [x.id for x, _ in archive.inspirations([a.id], lineage, n=2, offset=1)] == \
        [c.id, b.id]
    assert archive.inspirations([seed.id], lineage) == []    # everything descends from it


def ind(name, speed):
    return SimpleNamespace(candidate=SimpleNamespace(id=name), fitness=SpeedupFitness((speed,)))


def test_sel_niches_keeps_each_niches_best_first_then_the_fastest():
    pop = [ind("t1", 5.0), ind("t2", 4.9), ind("t3", 4.8), ind("m", 2.0), ind("c", 1.0)]
    niche = {"t1": "tune", "t2": "tune", "t3": "tune", "m": "memory", "c": "compute"}
    out = sel_niches(pop, 4, niche=lambda i: niche[i.candidate.id])
    assert [i.candidate.id for i in out] == ["t1", "m", "c", "t2"]
    assert sel_niches(pop, 2, niche=lambda i: "one") == tools.selBest(pop, 2)


class ComputeIdea:
    """A user mutation whose children carry a [compute] idea and run as fast as their parent."""

    name = "compute_idea"

    def __call__(self, parent, ctx):
        source = parent.source + f"# compute variant {ctx.generation}.{ctx.call_index}\n"
        return [ctx.child(source, idea="[compute] reorder the reduction", parents=[parent],
                          operator=self.name)]


def crowd_run(tmp_path, name, select=None):
    cfg = RunConfig(run_dir=str(tmp_path / name), search=SearchConfig(
        population_size=3, offspring_per_generation=6, generations=5, seed=2))
    evo = Evolution(problem(tmp_path), cfg, mutations=[TuneMutation(), ComputeIdea()],
                    evaluator=FakeEvaluator())
    if select is not None:
        evo.toolbox.register("select", select)
    result = evo.run()
    store = RunStore(result.run_dir)
    category = Archive.rebuild(store.candidates(), store.results(), lambda r: r.speedup).category
    return [[category[i] for i in g["population"]] for g in store.generations()]


def test_selection_keeps_another_technique_among_the_tune_variants(tmp_path):
    diverse = crowd_run(tmp_path, "niches")
    plain = crowd_run(tmp_path, "best", select=tools.selBest)     # a user's own select
    assert all({"seed", "compute"} <= set(pop) for pop in diverse[1:]), diverse
    # fastest-only selection lets the tune variants of the best crowd one technique out
    assert any(len(set(pop)) == 1 for pop in plain[1:]), plain
