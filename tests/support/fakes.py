"""Test doubles: a fake evaluator whose speedups come from a kernel's tunable constants."""
from __future__ import annotations

import re
from typing import Sequence

from evokernel.records import Candidate, EvalResult, Reason, Verdict

KERNEL = '''import torch
import torch.nn as nn

CUDA = """
constexpr int BLOCK = 128;  // tune: 32 64 128 256 512 1024
constexpr int UNROLL = 1;   // tune: 1 2 4 8
"""


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


class Interrupt(Exception):
    """Stands in for kill -9 in the middle of a generation."""


class FakeEvaluator:
    """Speedup = BLOCK/128 * (1 + UNROLL/10); BLOCK=1024 is "rejected" (lower precision).

    Counts every evaluation so tests can check nothing is evaluated twice; ``die_after`` raises
    Interrupt after that many evaluations, to simulate a killed run.
    """

    info = {"device": "fake GPU", "torch": "x", "cuda": "y"}

    def __init__(self, die_after: int | None = None):
        self.evaluated: list[str] = []
        self.die_after = die_after

    def evaluate(self, candidates: Sequence[Candidate], on_result=None) -> list[EvalResult]:
        out = []
        for c in candidates:
            if self.die_after is not None and len(self.evaluated) >= self.die_after:
                raise Interrupt()
            self.evaluated.append(c.id)
            r = self._judge(c)
            if on_result:
                on_result(r)
            out.append(r)
        return out

    def _judge(self, c: Candidate) -> EvalResult:
        block = re.search(r"BLOCK = (\d+)", c.source)
        unroll = re.search(r"UNROLL = (\d+)", c.source)
        if not block or "class ModelNew" not in c.source:
            return EvalResult.failure(c.id, Reason.NO_CODE, "no kernel")
        b, u = int(block[1]), int(unroll[1]) if unroll else 1
        if b == 1024:
            return EvalResult.failure(c.id, Reason.LOWER_PRECISION, "fp16 (fake)",
                                      norm_error_ratio=300.0, max_error_ratio=280.0,
                                      tolerance_factor=16.0)
        ms = 1.0 / (b / 128 * (1 + u / 10))
        return EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                          reference_ms=1.1, candidate_ms=ms, norm_error_ratio=1.0,
                          max_error_ratio=1.0, tolerance_factor=16.0)

    def close(self) -> None:
        pass
