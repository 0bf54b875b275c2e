"""A cheap, deterministic stand-in for the CUDA evaluator, so the experiment scripts' logic runs
anywhere (CI, a laptop) with ``--evaluator fake``. Its numbers are NOT measurements.

Verdicts follow what the evaluator would say about the scripted LLM's replies:
- a reply whose SEARCH/REPLACE edits did not apply (Candidate.no_code_note): rejected,
  ``no_code``, with the failing block as the detail, as the real evaluator does;
- no ``class ModelNew`` in the source: rejected, ``no_code``;
- the scripted LLM's injected ``#error``: rejected, ``build_error`` (so repair is exercised);
- otherwise accepted, with a time from a fixed landscape over the kernel's ``// tune:`` constants
  (each (problem, name, value) gets a factor in [0.7, 1.3) from a hash) and a small per-source
  factor in [0.9, 1.1), so a search has something to climb and never the same answer twice.

``reference_ms`` and ``compile_ms`` are the H200 eager and torch.compile times of docs/architecture.md's table
for the five headline problems (1.0 ms elsewhere); ``floor_ms`` is a fifth of the eager time.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Sequence

from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason, Verdict
from evokernel.operators.tunables import find_tunables

#: (eager ms, torch.compile ms) measured on the H200 (docs/architecture.md, "Measurements the design relies on").
H200_BASELINES_MS = {"softmax": (1.064, 0.872), "layernorm": (8.14, 0.376),
                     "matmul": (2.712, 2.784), "conv2d": (1.098, 1.220),
                     "conv2d_relu_maxpool": (1.265, 1.340)}
BROKEN = "#error injected by the scripted LLM"


def _unit(*parts: str) -> float:
    """A number in [0, 1) fixed by ``parts``."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return int(digest[:12], 16) / float(1 << 48)


class FakeEvaluator:
    """Evaluator protocol (evokernel.engine.evaluator.Evaluator) without a GPU; see the module doc.

    Args:
        problem: the problem whose candidates it judges (its name picks the baselines).
    """

    def __init__(self, problem: Problem):
        self.problem = problem
        self.reference_ms, self.compile_ms = H200_BASELINES_MS.get(problem.name, (1.0, 1.0))
        self.info: dict[str, Any] = {"device": "fake evaluator (no GPU; numbers are not "
                                               "measurements)", "torch": "-", "cuda": "-"}
        self.evaluated: list[str] = []

    def evaluate(self, candidates: Sequence[Candidate],
                 on_result: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
        out = []
        for c in candidates:
            r = self.judge(c)
            self.evaluated.append(c.id)
            if on_result is not None:
                on_result(r)
            out.append(r)
        return out

    def judge(self, c: Candidate) -> EvalResult:
        if c.no_code_note is not None:
            return EvalResult.failure(c.id, Reason.NO_CODE, c.no_code_note)
        if "class ModelNew" not in c.source:
            return EvalResult.failure(c.id, Reason.NO_CODE, "no ModelNew (fake evaluator)")
        if BROKEN in c.source:
            return EvalResult.failure(c.id, Reason.BUILD_ERROR, "error: #error injected",
                                      log="kernel.cu(3): error: #error injected by the "
                                          "scripted LLM")
        speed = 0.9 + 0.2 * _unit("source", c.source)
        for t in find_tunables(c.source):
            speed *= 0.7 + 0.6 * _unit(self.problem.name, t.name, t.value)
        return EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                          detail="fake evaluator", reference_ms=self.reference_ms,
                          candidate_ms=self.reference_ms / speed, compile_ms=self.compile_ms,
                          floor_ms=self.reference_ms / 5, norm_error_ratio=1.0,
                          max_error_ratio=1.0, tolerance_factor=16.0)

    def close(self) -> None:
        pass
