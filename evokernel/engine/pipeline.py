"""The evaluation as a list of named stages, run in order by the GPU worker
(evokernel.engine.session).

A candidate's evaluation is a :class:`Trial`: the candidate, and what the stages found so far
(the loaded model, the gate's outcome, the timing statistics, the fields its EvalResult will
carry). Each stage reads the trial, adds to it, and either lets the candidate go on (returns
None) or ends the evaluation with a verdict (returns an EvalResult). The first stage that returns
a verdict names the reason; a candidate that passes every stage is accepted by the last one.

Adding a check or a timing method is adding one stage to a list (``DEFAULT_STAGES`` in
evokernel.engine.stages); ``docs/architecture.md`` lists the stages in order with what each reads,
sets and can return.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from evokernel.records import Candidate, EvalResult, Reason


class WorkerState(Protocol):
    """What the stages read of the worker's per-problem state (evokernel.engine.session.Session):
    the evaluation config and GPU arch, the device, the GateReference, its timing input sets and
    the fresh input sets no candidate has seen,
    the L2 flusher, the floors and baselines, the reference's traced kernels and its main kernels
    (None: no profiler),
    the tamper checker, and PyTorch's own outputs on the timing sets."""

    config: Any
    arch: str
    device: Any
    ref: Any
    timing_inputs: list
    fresh_inputs: list
    flusher: Any
    floor_ms: float
    compute_floor_ms: float | None
    min_bytes: int
    peaks: Any
    compile_ms: float | None
    reference_kernels: list[tuple[str, float]] | None
    main_kernels: tuple[str, ...] | None
    tamper: Any

    def expected_outputs(self, gate_ref: Any, fresh: bool = False) -> list[tuple[Any, ...]]: ...


@dataclass
class Trial:
    """One candidate's evaluation in progress: mutable, private to one worker call.

    Attributes:
        candidate: the candidate being evaluated.
        flags: flags found so far (source scan, gate, kernel check, ...), in order, each once.
        fields: EvalResult fields gathered so far (error checks and ratios, floor, baselines,
            times, kernels), passed to every verdict.
        model_new: the candidate's ``ModelNew`` instance, once loaded.
        gate_ref: the GateReference the candidate is judged against (its parameters aligned).
        outcome: the gate's GateOutcome, once gated.
        flagged: a kernel-check finding kept as a flag (policy "flag"): (reason, detail).
        stats: name -> TimingStats of the timing stage ("reference", "candidate", probes).
        timed_inputs: the candidate's own copies of the timing input sets, as timed.
        timed_outputs: the last timed output per timing set index.
    """

    candidate: Candidate
    flags: tuple[str, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    model_new: Any = None
    gate_ref: Any = None
    outcome: Any = None
    flagged: tuple[Reason, str] | None = None
    stats: dict[str, Any] | None = None
    timed_inputs: list = field(default_factory=list)
    timed_outputs: dict[int, Any] = field(default_factory=dict)

    def add_flags(self, flags: Sequence[str]) -> None:
        """Append ``flags`` (keeping order, each once) to the trial and to its EvalResult."""
        self.flags = tuple(dict.fromkeys((*self.flags, *flags)))
        self.fields["flags"] = self.flags

    def reject(self, reason: Reason, detail: str, **extra: Any) -> EvalResult:
        """A rejection carrying every field gathered so far (``extra`` overrides)."""
        return EvalResult.failure(self.candidate.id, reason, detail,
                                  **{**self.fields, "flags": self.flags, **extra})

    def result(self, **changes: Any) -> EvalResult:
        """An EvalResult of the fields gathered so far with ``changes`` (verdict, reason, ...)."""
        return EvalResult(candidate_id=self.candidate.id,
                          **{**self.fields, "flags": self.flags, **changes})


class Stage(Protocol):
    """One step of the evaluation. ``name`` is shown in docs and logs; calling it returns None
    (go on) or the candidate's EvalResult (stop). A stage may raise for a fault of the candidate's
    (a CUDA error, a crash of its code): the session turns that into a verdict."""

    name: str

    def __call__(self, session: WorkerState, trial: Trial) -> EvalResult | None: ...


def run_stages(stages: Sequence[Stage], session: WorkerState, trial: Trial) -> EvalResult:
    """Run ``stages`` in order on ``trial``; the first verdict ends the evaluation.

    Raises: ValueError if every stage let the candidate go on (the list must end with a stage
        that always returns a verdict, such as evokernel.engine.stages.Accept).
    """
    for stage in stages:
        verdict = stage(session, trial)
        if verdict is not None:
            return verdict
    raise ValueError(f"no stage of {[s.name for s in stages]} gave a verdict")


def with_fields(result: EvalResult, **changes: Any) -> EvalResult:
    """``result`` with ``changes`` (a frozen dataclass's replace)."""
    return dataclasses.replace(result, **changes)
