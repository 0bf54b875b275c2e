"""Run stores for the show / report / export / suite tests: the recorded H200 run, and small
ones built here with a crossover, a rejection and a candidate still being evaluated."""
from __future__ import annotations

from pathlib import Path

from evokernel.config import RunConfig, SearchConfig
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason, Verdict
from evokernel.runs.store import RunStore

#: A real search on the H200 (softmax, scripted LLM); see tests/fixtures/README.md.
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "run_mock_llm"

SOURCE = ("import torch\nimport torch.nn as nn\n\nCUDA = '''// {tag}'''\n\n\n"
          "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")


def kernel(tag: str, idea: str, parents: tuple[Candidate, ...] = (), operator: str = "idea",
           generation: int = 0) -> Candidate:
    return Candidate(source=SOURCE.format(tag=tag), idea=idea,
                     parent_ids=tuple(p.id for p in parents), operator=operator,
                     generation=generation)


def accepted(c: Candidate, candidate_ms: float, reference_ms: float = 2.0) -> EvalResult:
    return EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      reference_ms=reference_ms, candidate_ms=candidate_ms, floor_ms=0.25,
                      norm_error_ratio=1.5, max_error_ratio=2.5, tolerance_factor=16.0)


def build_crossover_run(run_dir: Path, *, pending: bool = True) -> dict[str, Candidate]:
    """seed (1.0x) -> a (idea, 2.0x) and c (tune, 1.25x); b = crossover(a, c) (4.0x, the best);
    r rejected for lower precision; p still pending (no verdict) when ``pending``.
    Generations 0 and 1 are complete; generation 2 is not (a run still going).

    Speedups are reference_ms / candidate_ms with reference_ms = 2.0.
    """
    prob = Problem(name="toy", path=run_dir.parent / "toy.py", source="# reference\n")
    store = RunStore.create(run_dir, RunConfig(run_dir=str(run_dir),
                                               search=SearchConfig(generations=3)), prob)
    store.set_meta("device", {"device": "Fake GPU", "torch": "9.9", "cuda": "99.0",
                              "capability": "9.0", "sm_count": 1, "floor_ms": 0.25,
                              "floor_bound": "memory", "compile_ms": 1.0})
    seed = kernel("seed", "seed kernel (round-0 port)", operator="seed")
    a = kernel("a", "[memory] use float4 loads | vectorize", (seed,), generation=1)
    c = kernel("c", "tune BLOCK=512", (seed,), operator="tune", generation=1)
    r = kernel("r", "[precision] compute in fp16", (seed,), generation=1)
    b = kernel("b", "merge a's loads with c's block size", (a, c), operator="crossover",
               generation=2)
    p = kernel("p", "[loops] unroll by 4", (b,), generation=2)
    for cand in (seed, a, c, r, b) + ((p,) if pending else ()):
        store.add_candidate(cand)
    store.add_result(accepted(seed, 2.0))
    store.add_result(accepted(a, 1.0))
    store.add_result(accepted(c, 1.6))
    store.add_result(EvalResult.failure(r.id, Reason.LOWER_PRECISION, "fp16",
                                        norm_error_ratio=300.0, max_error_ratio=250.0,
                                        tolerance_factor=16.0))
    store.end_generation(0, [seed.id], seed.id, 1.0, 1, 1)
    store.end_generation(1, [a.id, c.id, seed.id], a.id, 2.0, 2, 3)
    store.add_result(accepted(b, 0.5))
    store.close()
    return {"seed": seed, "a": a, "c": c, "r": r, "b": b, "p": p}


def files_state(folder: Path) -> dict[str, bytes]:
    """Every file's bytes under ``folder`` (to check that reading a run changes nothing)."""
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*"))
            if f.is_file()}
