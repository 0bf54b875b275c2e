"""evokernel: DEAP evolves CUDA kernels; an LLM proposes them; a strict FP32 gate judges them.

Importing evokernel has no side effects: it imports neither torch nor litellm. Names are loaded
on first use::

    from evokernel import Evolution, RunConfig, SearchConfig, load_problem
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Evolution": "evokernel.search.evolution", "RunResult": "evokernel.search.evolution",
    "GenerationStats": "evokernel.search.evolution",
    "RunConfig": "evokernel.config", "SearchConfig": "evokernel.config",
    "EvalConfig": "evokernel.config", "GateConfig": "evokernel.config",
    "TimingConfig": "evokernel.config", "LLMConfig": "evokernel.config",
    "Candidate": "evokernel.records", "EvalResult": "evokernel.records",
    "Reason": "evokernel.records", "Verdict": "evokernel.records",
    "Problem": "evokernel.problem", "load_problem": "evokernel.problem",
    "load_problems": "evokernel.problem",
    "RunStore": "evokernel.runs.store",
    "CudaEvaluator": "evokernel.engine.evaluator",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'evokernel' has no attribute {name!r}")
