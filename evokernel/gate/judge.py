"""The precision gate and the output anti-cheat checks (docs/architecture.md, "The evaluation, as stages").

Device-agnostic: the same code runs on CPU tensors (tests) and in a GPU worker. The worker, which
has already imported the problem module, does::

    ref = GateReference.build(module, config.gate, "cuda", declared=problem.distributions)
    model_new, gate_ref = ref.prepare_candidate(candidate_module.ModelNew)
    outcome = gate_candidate(gate_ref, model_new, source=candidate.source)
    result = outcome.to_eval_result(candidate.id)

The reference (``Model`` in strict FP32), its float64 truth, and every input set are computed once
per problem and reused for every candidate; a candidate always runs on fresh clones. This module
judges a candidate (gate_candidate, GateOutcome); building the reference side (GateReference,
GateSet, align_parameters, perturb_constant_parameters) lives in evokernel.gate.reference and is
re-exported here. The maths and thresholds live in evokernel.gate.maths; running candidate code
(strict FP32, poisoned free memory, launch checks, profiling) in evokernel.gate.run; the source
scan in evokernel.gate.scan.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from evokernel.gate import maths as gm
from evokernel.gate import unwritten
from evokernel.gate.reference import (PERTURB_SPREAD, GateReference, GateSet, align_parameters,
                                      perturb_constant_parameters)
from evokernel.gate.run import is_strict_fp32, run_candidate, strict_fp32
from evokernel.records import ErrorCheck, EvalResult, Reason, Verdict
from evokernel.gate.scan import scan_source

# The reference side (evokernel.gate.reference) and strict FP32 (evokernel.gate.run) are
# re-exported, so ``from evokernel.gate.judge import GateReference, strict_fp32`` keeps working.
__all__ = ["LP_SCAN_FAMILIES", "GateOutcome", "gate_candidate", "numbers",
           "PERTURB_SPREAD", "GateReference", "GateSet", "align_parameters",
           "perturb_constant_parameters", "is_strict_fp32", "strict_fp32"]

#: Source-scan families that mean a lower-precision format is used somewhere (evokernel.gate.scan).
LP_SCAN_FAMILIES = ("fp16", "bf16", "fp8", "tf32", "autocast", "mathmode")


@dataclass(frozen=True)
class GateOutcome:
    """The gate's verdict on one candidate.

    ``checks`` holds one ErrorCheck per (distribution, seed) that got as far as the error
    ratios; ``distribution``/``seed`` and the ratios are those of the deciding check (the
    failing one, or the worst one when it passed). ``flags`` are the source scan's flags
    (evokernel.gate.scan) plus the gate's own ("lower_precision:fp16", "accumulation_error", ...).
    ``log`` holds a traceback when the candidate raised.
    """

    passed: bool
    reason: Reason
    detail: str
    checks: tuple[ErrorCheck, ...] = ()
    distribution: str | None = None
    seed: int | None = None
    norm_error_ratio: float | None = None
    max_error_ratio: float | None = None
    flags: tuple[str, ...] = ()
    tolerance_factor: float | None = None
    log: str = ""

    def to_eval_result(self, candidate_id: str, **kw: Any) -> EvalResult:
        """An EvalResult carrying this outcome (times etc. can be passed in ``kw``)."""
        return EvalResult(candidate_id=candidate_id,
                          verdict=Verdict.ACCEPT if self.passed else Verdict.REJECT,
                          reason=self.reason, detail=self.detail, distribution=self.distribution,
                          seed=self.seed, norm_error_ratio=self.norm_error_ratio,
                          max_error_ratio=self.max_error_ratio,
                          tolerance_factor=self.tolerance_factor, checks=self.checks,
                          flags=self.flags, log=self.log, **kw)


def gate_candidate(ref: GateReference, model_new: torch.nn.Module,
                   source: str | None = None) -> GateOutcome:
    """Run ``model_new`` on fresh clones of every cached input set and judge it.

    Per set, in this order of precedence: the candidate raised (RUNTIME_ERROR, OUT_OF_MEMORY,
    CUDA_FAULT; the caller must discard a worker after CUDA_FAULT), left a failed launch
    unchecked (SILENT_FAILURE), switched TF32 on (LOWER_PRECISION), modified its inputs
    (INPUT_MUTATION), returned something other than plain dense tensors (LAZY_OUTPUT,
    SHAPE_MISMATCH, DTYPE_MISMATCH), returned the previous call's buffer or an output it never
    wrote (RESULT_REUSE: every element still holds the gate's poison), wrote only part of it
    (PARTIAL_OUTPUT: some elements hold the poison), NaN/Inf (NON_FINITE), a constant
    (CONSTANT_OUTPUT), or the output of an earlier set (CACHED_OUTPUT). Then both error ratios
    must be <= ``tolerance_factor``; the first set where they are not ends the gate with its
    cause named (_Judge.classify). Sets run in order, "problem" first. A candidate that passes
    every set is re-run on the first (NONDETERMINISTIC if the re-run fails the same test).
    A rejection of a candidate that kept its own parameters (GateReference.parameter_note)
    says so in its detail. Never raises for a bad candidate.
    """
    outcome = _gate(ref, model_new, source)
    note = ref.parameter_note(model_new)
    if note and not outcome.passed:
        outcome = dataclasses.replace(outcome, detail=f"{outcome.detail}; note: {note}")
    return outcome


def _gate(ref: GateReference, model_new: torch.nn.Module, source: str | None) -> GateOutcome:
    judge = _Judge(ref, ref.config.tolerance_factor, scan_source(source) if source else ())
    accumulation = False
    for index in range(len(ref.sets)):
        failure = judge.evaluate(model_new, index)
        if failure is not None:
            return failure
        if not judge.checks[-1].passed:
            outcome = judge.classify(judge.checks[-1])
            if not outcome.passed:
                return outcome
            accumulation = True
    worst = max(judge.checks, key=lambda c: max(c.norm_ratio, c.max_ratio))
    if accumulation:
        outcome = judge.outcome(True, Reason.OK, "accepted with FP32 accumulation error (<= "
                                f"{gm.ACCUMULATION_BOUND:g}x PyTorch's, accumulation_error="
                                "accept)", worst, extra_flags=("accumulation_error",))
    else:
        outcome = judge.outcome(True, Reason.OK, "passed", worst)
    return judge.determinism(model_new, outcome)


# --- helpers -------------------------------------------------------------------------------------

def _fmt(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if math.isinf(x) else f"{x:.3g}")


def numbers(distribution: str, seed: int, norm_ratio: float | None, max_ratio: float | None,
            tolerance_factor: float) -> str:
    """The standard tail of every detail string: where, both ratios, and tolerance_factor."""
    return (f"on {distribution} seed {seed}: norm ratio {_fmt(norm_ratio)}, max ratio "
            f"{_fmt(max_ratio)} (tolerance_factor {tolerance_factor:g})")


class _Judge:
    """State of one gate_candidate call: checks so far, fingerprints, the first outputs."""

    def __init__(self, ref: GateReference, tolerance_factor: float, scan: tuple[str, ...]):
        self.ref, self.tolerance_factor, self.scan = ref, tolerance_factor, scan
        self.checks: list[ErrorCheck] = []
        self.fingerprints: list[tuple[tuple[float, ...], tuple[float, ...]]] = []
        self.previous: tuple[torch.Tensor, ...] | None = None
        self.first: tuple[torch.Tensor, ...] | None = None
        self.lp: tuple[str, str, int] | None = None   # (format, text, set index) once found
        self.lp_tried = False
        self.partial: dict[int, str] = {}              # set index -> partial-output finding
        self.scan_lp = tuple(f for f in scan if f.split(":")[0] in LP_SCAN_FAMILIES)

    def outcome(self, passed: bool, reason: Reason, what: str, check: ErrorCheck | None = None,
                where: tuple[str, int] | None = None, ratios: tuple[float | None, ...] = (None,
                None), extra_flags: tuple[str, ...] = (), log: str = "") -> GateOutcome:
        if check is not None:
            where, ratios = (check.distribution, check.seed), (check.norm_ratio, check.max_ratio)
        dist, seed = where if where else (None, None)
        detail = f"{what}; {numbers(dist, seed, *ratios, self.tolerance_factor)}"
        if not passed and self.scan:
            detail += f"; source scan: {', '.join(self.scan)}"
        return GateOutcome(passed, reason, detail, tuple(self.checks), dist, seed, ratios[0],
                           ratios[1], tuple(dict.fromkeys([*self.scan, *extra_flags])),
                           self.tolerance_factor, log)

    def evaluate(self, model_new: torch.nn.Module, index: int) -> GateOutcome | None:
        """Run on set ``index``; append its ErrorCheck; return an outcome only for a failure
        that ends the gate at once (everything except an error ratio over tolerance_factor)."""
        gs = self.ref.sets[index]
        where = (gs.distribution, gs.seed)
        run = run_candidate(model_new, gs.inputs, self.ref.device,
                             [t.numel() * dt.itemsize for t, dt in zip(gs.truths, gs.dtypes)])
        if run.error is not None:
            return self.outcome(False, run.error[0], run.error[1], where=where, log=run.log)
        if run.tf32_switched:
            return self.outcome(False, Reason.LOWER_PRECISION, "the candidate switched TF32 on "
                                "while running", where=where, extra_flags=("tf32:runtime",))
        outs, problem = run.outputs, None
        if len(outs) != len(gs.truths) or isinstance(run.raw, torch.Tensor) == \
                self.ref.multi_output:
            problem = (Reason.SHAPE_MISMATCH, f"returned {gm.describe(run.raw)}, the reference "
                       f"{len(gs.truths)} tensor(s)")
        for o, t, dt in zip(outs, gs.truths, gs.dtypes):
            problem = problem or gm.check_output_form(o, t.shape, dt, self.ref.output_device)
        check = None if problem else self._check(gs, outs)
        ratios = (check.norm_ratio, check.max_ratio) if check else (None, None)
        mutated = gm.inputs_modified(gs.inputs, run.inputs)
        if mutated:
            return self.outcome(False, Reason.INPUT_MUTATION, mutated, where=where, ratios=ratios)
        if problem:
            return self.outcome(False, problem[0], problem[1], where=where)
        if self.previous is not None and any(
                o.untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
                for o in outs for p in self.previous if o.numel() and p.numel()):
            return self.outcome(False, Reason.RESULT_REUSE, "the output is the previous call's "
                                "output buffer, overwritten in place", where=where, ratios=ratios)
        self.previous = outs
        bad_output = self._content_problem(gs, outs, where, ratios)
        if bad_output is not None:
            return bad_output
        fp = (tuple(gm.fingerprint(o) for o in outs), gs.fingerprints)
        for j, (ofp, tfp) in enumerate(self.fingerprints):
            if ofp == fp[0] and tfp != fp[1]:
                old = self.ref.sets[j]
                return self.outcome(False, Reason.CACHED_OUTPUT, "the output equals the output "
                                    f"for {old.distribution} seed {old.seed} (different inputs)",
                                    where=where, ratios=ratios)
        self.fingerprints.append(fp)
        self.checks.append(check)
        if index == 0:
            self.first = tuple(o.detach().clone() for o in outs)
        if not check.passed:
            found = self._partial(gs, outs)
            if found:
                self.partial[index] = found
            elif not self.lp_tried:
                self.lp_tried = True
                self.lp = self._lower_precision(index, outs)
        return None

    def _content_problem(self, gs: GateSet, outs: tuple[torch.Tensor, ...], where: tuple[str, int],
                         ratios: tuple[float | None, float | None]) -> GateOutcome | None:
        """The checks of an output's content, in this order: never written (all, or partly:
        the poison pattern), NaN/Inf where the truth is finite, constant where the truth is not.
        Returns the first failure's outcome, or None."""
        never_written = [unwritten.count_poison(o) for o in outs]
        total = sum(o.numel() for o in outs)
        if sum(never_written) and sum(never_written) == total:
            return self.outcome(False, Reason.RESULT_REUSE, "the output was never written: it "
                                "holds the pattern the gate wrote into freed memory before the "
                                "call (an output that relies on stale memory, e.g. a freed "
                                "reference output)", where=where, ratios=ratios)
        if sum(never_written):
            return self.outcome(False, Reason.PARTIAL_OUTPUT,
                                f"{sum(never_written)} of {total} output elements were never "
                                "written (they hold the gate's poison pattern)", where=where,
                                ratios=ratios)
        bad = sum(int((~torch.isfinite(o)).sum()) for o in outs)
        if bad:
            note = self._problem_note(gs)
            return self.outcome(False, Reason.NON_FINITE, f"{bad} NaN/Inf output elements where "
                                "the truth is finite" + note, where=where, ratios=ratios,
                                extra_flags=(f"unstable:{gs.distribution}",) if note else ())
        if any(o.numel() > 1 and not s.constant and bool((o == o.reshape(-1)[0]).all())
               for o, s in zip(outs, gs.stats)):
            return self.outcome(False, Reason.CONSTANT_OUTPUT, "constant output where the truth "
                                "is not", where=where, ratios=ratios)
        return None

    def _partial(self, gs: GateSet, outs: tuple[torch.Tensor, ...]) -> str:
        """gate_math.partial_output on each output, with the gate's element-wise bound."""
        for o, t, s, (_, rm) in zip(outs, gs.truths, gs.stats, gs.reference_errors):
            tol = self.tolerance_factor * max(rm, gm.unit_roundoff(o.dtype) * s.max_abs)
            found = unwritten.partial_output(o, t, tol)
            if found:
                return found
        return ""

    def _check(self, gs: GateSet, outs: tuple[torch.Tensor, ...]) -> ErrorCheck:
        """The ErrorCheck of ``outs`` on ``gs``: the output with the worst ratio speaks."""
        best = None
        for o, t, s, (rn, rm) in zip(outs, gs.truths, gs.stats, gs.reference_errors):
            cn, cm = gm.error_stats(o, t, t_norm=s.norm)
            nr, mr = gm.ratios(cn, cm, rn, rm, o.dtype, s.max_abs)
            c = ErrorCheck(gs.distribution, gs.seed, cn, cm, rn, rm, nr, mr,
                           passed=nr <= self.tolerance_factor and mr <= self.tolerance_factor)
            if best is None or max(nr, mr) > max(best.norm_ratio, best.max_ratio):
                best = c
        return best

    def _lower_precision(self, index: int, outs: tuple[torch.Tensor, ...]
                         ) -> tuple[str, str, int] | None:
        """gate_math.lower_precision_match on the output with the largest error of set
        ``index`` (FP32 outputs only); the rounded-input truths are computed here, on demand."""
        gs = self.ref.sets[index]
        k = 0 if len(outs) == 1 else max(range(len(outs)), key=lambda i: gm.error_stats(
            outs[i], gs.truths[i], t_norm=gs.stats[i].norm)[0])
        if gs.dtypes[k] != torch.float32:
            return None
        lp = {}
        for name in gm.LP_TRUTHS:
            truths = self.ref.lower_precision_truths(index, name)
            lp[name] = None if truths is None else truths[k]
        prefer = tuple(f.split(":")[0] for f in self.scan if f.split(":")[0] in gm.LP_FORMATS)
        match = gm.lower_precision_match(outs[k], gs.truths[k], gs.stats[k].norm, lp,
                                         gs.representable if k == 0 else {}, prefer)
        return None if match is None else (*match, index)

    def _problem_note(self, gs: GateSet) -> str:
        ok = [c for c in self.checks if c.distribution == "problem"]
        return ("; it passes on problem (unstable on this distribution)" if ok and all(
            self.ok(c) for c in ok) and gs.distribution != "problem" else "")

    def ok(self, check: ErrorCheck) -> bool:
        """Within tolerance, or within ACCUMULATION_BOUND under accumulation_error="accept" (for a
        candidate with no lower-precision match and no lower-precision format in its source)."""
        return check.passed or (self.ref.config.accumulation_error == "accept" and self.lp is None
                                and not self.scan_lp and not self.partial
                                and max(check.norm_ratio, check.max_ratio)
                                <= gm.ACCUMULATION_BOUND)

    def classify(self, check: ErrorCheck) -> GateOutcome:
        """Name the cause of ``check``'s ratio failure, in this order: PARTIAL_OUTPUT (right on
        some slices, wholly wrong on others, gate_math.partial_output); LOWER_PRECISION (it
        matched a rounded-input truth, gate_math.lower_precision_match; or, with no match, the
        source scan found a lower-precision format: a partial lowering such as one operand in
        FP16, or an FP16 hi/lo split that loses FP16's range); UNSTABLE_DISTRIBUTION (a
        distribution other than "problem", after every "problem" set passed); else
        ACCUMULATION_ERROR when both ratios <= gate_math.ACCUMULATION_BOUND (a passing outcome
        under accumulation_error="accept"), WRONG_FUNCTION beyond it."""
        index = next((i for i, s in enumerate(self.ref.sets)
                      if (s.distribution, s.seed) == (check.distribution, check.seed)), None)
        if index in self.partial:
            return self.outcome(False, Reason.PARTIAL_OUTPUT, self.partial[index], check,
                                extra_flags=("partial_output",))
        if self.lp is not None:
            fmt, text, _ = self.lp
            return self.outcome(False, Reason.LOWER_PRECISION, text, check,
                                extra_flags=(f"lower_precision:{fmt}",))
        if self.scan_lp:
            fmts = ", ".join(self.scan_lp)
            return self.outcome(False, Reason.LOWER_PRECISION, "no rounded-input truth matches, "
                                f"but the source uses lower-precision formats ({fmts}): precision "
                                "is lowered in part of the computation (one operand, an "
                                "intermediate, or an FP16 hi/lo split that loses FP16's range)",
                                check, extra_flags=("lower_precision:scan",))
        problem = [c for c in self.checks if c.distribution == "problem"]
        if check.distribution != "problem" and problem and all(self.ok(c) for c in problem):
            best = max(problem, key=lambda c: max(c.norm_ratio, c.max_ratio))
            return self.outcome(False, Reason.UNSTABLE_DISTRIBUTION,
                                f"passes on problem (norm ratio {_fmt(best.norm_ratio)}, max ratio "
                                f"{_fmt(best.max_ratio)}) but fails on {check.distribution}",
                                check, extra_flags=(f"unstable:{check.distribution}",))
        if self.ok(check):
            return self.outcome(True, Reason.OK, "FP32 accumulation error accepted", check)
        if max(check.norm_ratio, check.max_ratio) <= gm.ACCUMULATION_BOUND:
            return self.outcome(False, Reason.ACCUMULATION_ERROR, "FP32 accumulation error: "
                                f"over tolerance_factor but within {gm.ACCUMULATION_BOUND:g}x "
                                "PyTorch's error, no lower-precision match", check)
        return self.outcome(False, Reason.WRONG_FUNCTION, "error beyond "
                            f"{gm.ACCUMULATION_BOUND:g}x PyTorch's and no lower-precision match",
                            check)

    def determinism(self, model_new: torch.nn.Module, passed: GateOutcome) -> GateOutcome:
        """Re-run on the first set's inputs (fresh clones). NONDETERMINISTIC when the re-run
        fails the gate's own test: NaN, a constant, or an error ratio over tolerance_factor. That
        bound is the tolerance itself, so atomics-order differences (a few roundings, far
        inside tolerance_factor x PyTorch's error) pass, with the flag
        "nondeterministic_within_rounding" when the runs differ bitwise. Anti-cheat failures
        on the re-run keep their own reason."""
        gs, first, n = self.ref.sets[0], self.first, len(self.checks)
        again = self.evaluate(model_new, 0)
        rerun = self.checks[n] if len(self.checks) > n else None
        self.checks = self.checks[:n]
        if again is not None and again.reason not in (Reason.NON_FINITE, Reason.CONSTANT_OUTPUT):
            return again
        if again is None:
            diff = max((float((a.double() - b.double()).abs().max()) if a.numel() else 0.0)
                       for a, b in zip(first, self.previous))
            if self.ok(rerun):
                flags = (*passed.flags, *(("nondeterministic_within_rounding",) if diff else ()))
                return dataclasses.replace(passed, flags=tuple(dict.fromkeys(flags)))
            why, ratios = f"max |run1 - run2| = {_fmt(diff)}", (rerun.norm_ratio, rerun.max_ratio)
        else:
            why, ratios = again.detail.split(";")[0], (None, None)
        return self.outcome(False, Reason.NONDETERMINISTIC, "a second run on the same inputs "
                            f"fails ({why})", where=(gs.distribution, gs.seed), ratios=ratios)
