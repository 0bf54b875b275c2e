"""What a problem set is made of and gives (evokernel.engine.problem_set and its Dask
counterpart, evokernel.cluster.problem_set): the jobs going in, the outcomes coming out."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult


@dataclasses.dataclass(frozen=True)
class ProblemJob:
    """A problem and the candidates to judge against it (any number, in order)."""

    problem: Problem
    candidates: tuple[Candidate, ...]


@dataclasses.dataclass
class ProblemOutcome:
    """What one problem gave: ``results`` in its candidates' order (empty when ``error``, the
    set-up failure, is set), the worker's ``info`` (device, reference_ms, floors), the GPU
    index it ran on, its wall seconds from its turn to its last verdict (a set-up made ahead
    is not in it), and where its GPU's time went, in seconds (``steps_s``): "start" (set-up at
    its turn, with the worker's spawn where not done ahead) or "start_ahead" (set-up while an
    earlier problem waited for a build), "ahead" (setting up later problems while this one
    waited), "build_wait" (the rest of that wait), "verdicts" (gating and timing), "close"
    (ending its worker); and ``timeline_s``, seconds since the set's builds were submitted:
    "turn" (its turn began), "built" (its last build ended), "done" (its last verdict)."""

    problem: str
    results: list[EvalResult]
    info: dict[str, Any]
    device: int | str | None = None
    error: str | None = None
    wall_s: float = 0.0
    steps_s: dict[str, float] = dataclasses.field(default_factory=dict)
    timeline_s: dict[str, float] = dataclasses.field(default_factory=dict)


#: ``on_result(problem_name, result)``, called from the GPU threads as each verdict is ready.
OnProblemResult = Callable[[str, EvalResult], None]
