"""The data that crosses module boundaries: candidates and their evaluation results.

Both are frozen dataclasses that round-trip through JSON (``to_dict`` / ``from_dict``), because the
run store keeps them and evaluation workers send them across process boundaries.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any


#: The first line of a no-code candidate whose reply's edits did not apply to its parent
#: (evokernel.operators.parsing.code_from_reply): the prefix, then why (the failing block and
#: the reason), then the reply as it came. The evaluators reject it as ``no_code`` with that
#: reason as the detail.
NO_CODE_NOTE = "# evokernel no code: "
#: Ends the ``detail`` of a batch-mode request whose imported reply its operator cannot use (an
#: ideas reply with no readable ideas; evokernel.llm.batch_import): a failed call, though stored.
UNUSABLE_REPLY = "(imported; unusable)"


def source_id(source: str) -> str:
    """A candidate's id: the first 16 hex digits of the SHA-256 of its source text."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    """One kernel proposal: a Python module defining ``ModelNew`` (KernelBench format).

    Attributes:
        source: the whole module text; its CUDA is built with ``load_inline``.
        idea: the natural-language optimization idea it implements ("" for the seed kernel).
        parent_ids: ids of the candidates it was derived from.
        operator: name of the operator that produced it ("seed", "tune", "idea", ...).
        generation: the generation it was produced in (0 for the seed kernel).
    """

    source: str
    idea: str = ""
    parent_ids: tuple[str, ...] = ()
    operator: str = "seed"
    generation: int = 0

    @property
    def id(self) -> str:
        return source_id(self.source)

    @property
    def no_code_note(self) -> str | None:
        """Why this candidate holds no code (its first line after NO_CODE_NOTE), or None."""
        if not self.source.startswith(NO_CODE_NOTE):
            return None
        return self.source[len(NO_CODE_NOTE):].split("\n", 1)[0].strip() or "no code"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["parent_ids"] = list(self.parent_ids)
        d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Candidate":
        return cls(source=d["source"], idea=d.get("idea", ""),
                   parent_ids=tuple(d.get("parent_ids", ())), operator=d.get("operator", "seed"),
                   generation=int(d.get("generation", 0)))


class Verdict(str, Enum):
    ACCEPT = "accept"
    REJECT = "reject"


class Reason(str, Enum):
    """Why a candidate got its verdict. Every rejection carries exactly one of these."""

    OK = "ok"
    # The proposal itself.
    NO_CODE = "no_code"                      # the LLM reply held no usable code
    # Build and load.
    BUILD_ERROR = "build_error"              # nvcc / host compiler failed; log kept
    BUILD_TIMEOUT = "build_timeout"
    LOAD_ERROR = "load_error"                # module import or ModelNew(...) raised
    # Running.
    RUNTIME_ERROR = "runtime_error"          # forward raised a Python / launch error
    TIMEOUT = "timeout"                      # hang: the worker was killed
    CUDA_FAULT = "cuda_fault"                # sticky CUDA error (illegal address, ...)
    WORKER_CRASH = "worker_crash"            # the worker process died (segfault, abort)
    OUT_OF_MEMORY = "out_of_memory"
    SILENT_FAILURE = "silent_failure"        # a launch failed unchecked and forward returned
    # Output form.
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    LAZY_OUTPUT = "lazy_output"              # not a plain dense torch.Tensor with real storage
    NON_FINITE = "non_finite"                # NaN/Inf where the truth is finite
    CONSTANT_OUTPUT = "constant_output"      # constant where the truth is not
    PARTIAL_OUTPUT = "partial_output"        # right on some slices, unwritten or wrong on others
    # Precision (see evokernel.gate.judge).
    LOWER_PRECISION = "lower_precision"      # output matches a TF32/FP16/BF16-input truth
    ACCUMULATION_ERROR = "accumulation_error"
    UNSTABLE_DISTRIBUTION = "unstable_distribution"
    WRONG_FUNCTION = "wrong_function"
    NONDETERMINISTIC = "nondeterministic"    # same inputs, different outputs beyond rounding
    # Anti-cheat.
    INPUT_MUTATION = "input_mutation"
    RESULT_REUSE = "result_reuse"
    CACHED_OUTPUT = "cached_output"
    SIDE_STREAM = "side_stream"
    THREADS = "threads"
    TIMER_TAMPERING = "timer_tampering"
    REFERENCE_FALLBACK = "reference_fallback"
    NO_KERNEL_LAUNCHED = "no_kernel_launched"
    IMPOSSIBLE_SPEED = "impossible_speed"    # faster than the physical floor


@dataclass(frozen=True)
class ErrorCheck:
    """Errors of one output against the float64 truth, on one input distribution and seed.

    ``*_norm_error`` is ||x - t||_2 / ||t||_2; ``*_max_error`` is max |x - t| (absolute, in the
    output's units). ``reference_*`` is PyTorch's own strict-FP32 (TF32 off) error on the same
    inputs; the ratios divide the candidate's error by it (with a floor, see evokernel.gate.judge).
    """

    distribution: str
    seed: int
    candidate_norm_error: float
    candidate_max_error: float
    reference_norm_error: float
    reference_max_error: float
    norm_ratio: float
    max_ratio: float
    passed: bool


@dataclass(frozen=True)
class KernelTime:
    """One GPU kernel (or copy) of a profiled candidate call (torch.profiler, CUPTI).

    name: the demangled kernel name; stream: the CUDA stream id the profiler reports (7 is the
    default stream on an H200 with torch 2.11); gpu_us: its device time in microseconds, summed
    over ``launches`` launches of the same name on the same stream; own: True when the kernel
    is the candidate's (not PyTorch's, cuBLAS's or cuDNN's; evokernel.gate.fallback).
    """

    name: str
    stream: int
    gpu_us: float
    launches: int = 1
    own: bool = True


@dataclass(frozen=True)
class KernelResources:
    """What ``ptxas -v`` reports for one compiled kernel (per-thread registers, spill bytes, and
    per-block shared memory and stack, all in bytes except registers)."""

    name: str
    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0


@dataclass(frozen=True)
class PrecisionFinding:
    """Machine instructions below FP32 in one compiled kernel, found by the SASS audit
    (evokernel.build.sass: ``cuobjdump --dump-sass`` of the built extension).

    kernel: the (demangled) kernel name; opcode: the SASS opcode with its modifiers, e.g.
    "HMMA.16816.F32" or "F2FP.F16.F32.PACK_AB"; kind: "tensor_core" (HMMA, HGMMA, IMMA, ...),
    "conversion" (to a narrower format), "half_arith" (packed FP16/BF16 arithmetic such as
    HFMA2) or "widen" (FP16/BF16 data widened to FP32, a sign that half data exists);
    precision: the narrow format ("fp16", "bf16", "tf32", "fp8", "int8", "int4", "b1");
    count: how many such instructions the kernel holds (static count, not executions).
    """

    kernel: str
    opcode: str
    kind: str
    precision: str
    count: int = 1


@dataclass(frozen=True)
class KernelProfile:
    """A few Nsight Compute metrics of one kernel of a profiled candidate call
    (evokernel.engine.ncu; ``ncu --clock-control none``), merged over its ``launches``.

    duration_us: GPU time, summed over launches (``gpu__time_duration.sum``); the percentages
    are duration-weighted means over launches: dram_throughput_pct
    (``dram__throughput.avg.pct_of_peak_sustained_elapsed``), achieved_occupancy_pct
    (``sm__warps_active.avg.pct_of_peak_sustained_active``), sm_throughput_pct
    (``sm__throughput.avg.pct_of_peak_sustained_elapsed``), l2_hit_rate_pct
    (``lts__t_sector_hit_rate.pct``); None when ncu did not report the metric.
    """

    name: str
    launches: int = 1
    duration_us: float | None = None
    dram_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    sm_throughput_pct: float | None = None
    l2_hit_rate_pct: float | None = None


@dataclass(frozen=True)
class EvalResult:
    """The verdict on one candidate, with the numbers behind it.

    Times are medians in milliseconds of interleaved trials with an L2 flush before each
    (evokernel.timing.interleaved). ``reference_ms`` is PyTorch eager with TF32 off, ``compile_ms`` is
    ``torch.compile`` (default mode), ``floor_ms`` the memory floor: the problem's minimum bytes
    over the measured copy bandwidth, the one physical bound (evokernel.timing.floor).
    ``compute_floor_ms`` is the reference algorithm's FLOPs over the measured FP32 rate: a
    compute reference shown beside it, never a reason to reject (a kernel may do less work).
    ``kernels`` holds the per-kernel GPU times of one profiled call; ``resources`` the
    ``ptxas -v`` report of the candidate's kernels, when known; ``profile`` a few Nsight Compute
    metrics per kernel when the run profiles (``--profile``; evokernel.engine.ncu);
    ``precision_audit`` the below-FP32 instructions the SASS audit found in the candidate's
    built extension (evidence beside the gate's numbers, which decide; evokernel.build.sass).
    Error ratios are the worst over all checks; ``tolerance_factor`` is the bound they must meet.
    ``eval_s`` is the wall seconds the GPU worker spent on the candidate (load, gate, anti-cheat
    checks, timing); ``time_s`` the part of it in the timing loop (reference and candidate
    interleaved, warm-up included), None when the candidate was not timed.
    """

    candidate_id: str
    verdict: Verdict
    reason: Reason
    detail: str = ""
    distribution: str | None = None
    seed: int | None = None
    norm_error_ratio: float | None = None
    max_error_ratio: float | None = None
    tolerance_factor: float | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    compile_ms: float | None = None
    floor_ms: float | None = None
    compute_floor_ms: float | None = None
    build_s: float | None = None
    eval_s: float | None = None
    time_s: float | None = None
    checks: tuple[ErrorCheck, ...] = ()
    flags: tuple[str, ...] = ()
    log: str = ""                       # compiler output or traceback tail, when there is one
    kernels: tuple[KernelTime, ...] = ()
    resources: tuple[KernelResources, ...] = ()
    profile: tuple[KernelProfile, ...] = ()
    precision_audit: tuple[PrecisionFinding, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPT

    @property
    def speedup(self) -> float:
        """reference_ms / candidate_ms for an accepted candidate; 0.0 otherwise (never NaN)."""
        if not self.accepted or not self.reference_ms or not self.candidate_ms:
            return 0.0
        s = self.reference_ms / self.candidate_ms
        return s if math.isfinite(s) else 0.0

    @property
    def compile_speedup(self) -> float:
        """compile_ms / candidate_ms for an accepted candidate; 0.0 when unknown (never NaN)."""
        if not self.accepted or not self.compile_ms or not self.candidate_ms:
            return 0.0
        s = self.compile_ms / self.candidate_ms
        return s if math.isfinite(s) and s > 0 else 0.0

    @property
    def pct_of_floor(self) -> float | None:
        """candidate_ms as a percentage of floor_ms, the memory floor: 100 means the kernel moves
        its minimum bytes at the measured copy bandwidth."""
        if not self.candidate_ms or not self.floor_ms:
            return None
        return 100.0 * self.candidate_ms / self.floor_ms

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["verdict"] = self.verdict.value
        d["reason"] = self.reason.value
        d["checks"] = [dataclasses.asdict(c) for c in self.checks]
        d["flags"] = list(self.flags)
        d["kernels"] = [dataclasses.asdict(k) for k in self.kernels]
        d["resources"] = [dataclasses.asdict(r) for r in self.resources]
        d["profile"] = [dataclasses.asdict(p) for p in self.profile]
        d["precision_audit"] = [dataclasses.asdict(p) for p in self.precision_audit]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EvalResult":
        d = dict(d)
        d["verdict"] = Verdict(d["verdict"])
        d["reason"] = Reason(d["reason"])
        d["checks"] = tuple(ErrorCheck(**c) for c in d.get("checks", ()))
        d["flags"] = tuple(d.get("flags", ()))
        d["kernels"] = tuple(KernelTime(**k) for k in d.get("kernels", ()))
        d["resources"] = tuple(KernelResources(**r) for r in d.get("resources", ()))
        d["profile"] = tuple(KernelProfile(**p) for p in d.get("profile", ()))
        d["precision_audit"] = tuple(PrecisionFinding(**p)
                                     for p in d.get("precision_audit", ()))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def failure(cls, candidate_id: str, reason: Reason, detail: str, **kw: Any) -> "EvalResult":
        """A rejection with no numbers (build error, crash, timeout, ...)."""
        return cls(candidate_id=candidate_id, verdict=Verdict.REJECT, reason=reason,
                   detail=detail, **kw)
