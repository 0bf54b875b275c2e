"""The stages of a candidate's evaluation in the GPU worker, in order (``DEFAULT_STAGES``).

Each stage is a small class with a ``name``; calling it with the session and the trial returns
None (the candidate goes on) or its EvalResult (evokernel.engine.pipeline). In order:

=============  ==========================================================  =====================
stage          what it does                                                 reasons it can return
=============  ==========================================================  =====================
load           scan the source, import the module (its extension built, its  no_code, load_error,
               NVRTC kernels compiled), make ``ModelNew``                   build_error (NVRTC)
gate           the precision gate on every input set (evokernel.gate)       (records the outcome)
tamper         timers patched, threads or processes started, evokernel's    timer_tampering,
               own code changed (evokernel.engine.tamper)                   threads
gate_verdict   the gate's verdict                                           the gate's reasons
kernels        one traced call on new inputs: its output, all its work on    cached_output,
               its own stream before a marker (GPU times), whose kernels    side_stream,
               did the work (evokernel.gate.fallback)                       reference_fallback,
                                                                            no_kernel_launched
tamper         as above
time           reference, candidate and an empty call interleaved          (records the times)
               (evokernel.timing.interleaved)
tamper         as above
side_stream    whole-device time over the event time, against the empty     (a flag only)
               call's and the reference's measured beside it
inputs         the timed calls left their inputs alone                      input_mutation
outputs        timed outputs are the outputs for their inputs; a replay     cached_output
               with the contents rotated under the same tensors
fresh          one call on each of three input sets never seen: right       cached_output
               outputs, and not far slower than on the timing sets
floor          faster than the memory floor allows                          impossible_speed
accept         the accepted result and its detail                           ok
=============  ==========================================================  =====================
"""
from __future__ import annotations

import time
from typing import Any

import torch

from evokernel.build import cache as build_cache
from evokernel.engine import outputs as out
from evokernel.engine.faults import classify_exception, load_detail, load_log
from evokernel.engine.pipeline import Stage, Trial, WorkerState
from evokernel.gate import fallback, trace
from evokernel.gate import maths as gm
from evokernel.gate import run as gate_run
from evokernel.gate.judge import gate_candidate
from evokernel.gate.scan import scan_source
from evokernel.records import EvalResult, KernelTime, Reason, Verdict
from evokernel.timing.floor import IMPOSSIBLE_MARGIN, impossible
from evokernel.timing.clocks import default_clock
from evokernel.timing.interleaved import host_quiet, side_stream_suspect, time_interleaved


class Load:
    """Scan the source (flags only), import the candidate module (its load_inline extension or
    NVRTC cubins from the build cache; evokernel.nvrtc, configured by the Session, compiles a
    missing one), and make ``ModelNew`` with the reference's parameters (GateReference.
    prepare_candidate). NO_CODE without ``ModelNew``; BUILD_ERROR for an NVRTC compile error;
    LOAD_ERROR when the import or the constructor raises; a sticky CUDA error is raised."""

    name = "load"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        t.add_flags(scan_source(t.candidate.source))
        try:
            module = build_cache.load_candidate(t.candidate.source,
                                                f"evokernel_cand_{t.candidate.id}",
                                                s.config.cache_path, s.arch)
            if not hasattr(module, "ModelNew"):
                return t.reject(Reason.NO_CODE, "the module defines no ModelNew")
            t.model_new, t.gate_ref = s.ref.prepare_candidate(module.ModelNew)
        except Exception as e:
            reason, fatal = classify_exception(e)
            if fatal:
                raise
            if reason is Reason.RUNTIME_ERROR:
                reason = Reason.LOAD_ERROR
            return t.reject(reason, load_detail(e, t.candidate.source), log=load_log(e))
        return None


class Gate:
    """The precision gate (evokernel.gate.judge.gate_candidate) on every cached input set; records
    its outcome, error checks and ratios on the trial (the verdict comes in GateVerdict, after the
    tamper check, so that a patched timer is named before a gate failure it caused)."""

    name = "gate"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        with gate_run.strict_fp32(), torch.no_grad():
            outcome = gate_candidate(t.gate_ref, t.model_new, t.candidate.source)
        t.outcome = outcome
        t.fields.update(checks=outcome.checks, norm_error_ratio=outcome.norm_error_ratio,
                        max_error_ratio=outcome.max_error_ratio,
                        tolerance_factor=s.config.gate.tolerance_factor,
                        distribution=outcome.distribution, seed=outcome.seed,
                        floor_ms=s.floor_ms, compute_floor_ms=s.compute_floor_ms,
                        compile_ms=s.compile_ms)
        t.add_flags(outcome.flags)
        return None


class Tamper:
    """TIMER_TAMPERING or THREADS when the candidate patched timers, started threads or
    processes, or changed evokernel's own code since the last check (undone here)."""

    name = "tamper"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        tampered = s.tamper.check()
        return t.reject(*tampered) if tampered else None


class GateVerdict:
    """The gate's rejection, with its reason and detail, when it did not pass."""

    name = "gate_verdict"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        o = t.outcome
        return None if o.passed else t.reject(o.reason, o.detail, log=o.log)


class Kernels:
    """Trace one candidate call on a fresh clone of timing set 0 (contents the gate never showed
    it; evokernel.gate.trace) and judge it:

    * its output first: a wrong one came from a cache (CACHED_OUTPUT);
    * SIDE_STREAM when a kernel or copy it launched was still running after a marker queued on
      its stream once it returned, or when it left another stream current: work the CUDA events
      on the timed stream would not see. The trace's times are the GPU's own, so host load
      cannot flip this verdict;
    * REFERENCE_FALLBACK or NO_KERNEL_LAUNCHED (evokernel.gate.fallback.judge_kernels) reject
      under GateConfig.reference_fallback = "reject"; under "flag" they are kept as a flag.

    Records the per-kernel GPU times (``EvalResult.kernels``). Without a profiler the checks are
    skipped, with the flag "profiler_unavailable" (the timing stage's side-stream signal stays).
    """

    name = "kernels"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        inputs = out.clone_inputs(s.timing_inputs[0])
        got: list[Any] = []

        def call() -> None:
            got.append(t.model_new(*inputs))
        with gate_run.strict_fp32(), torch.no_grad():
            if s.main_kernels is None:
                traced = None
                call()
                torch.cuda.synchronize(s.device)
            else:
                traced = trace.trace_call(call, s.device)
        if got:
            expected = s.expected_outputs(t.gate_ref)
            stale = out.stale_outputs({0: got[0]}, expected,
                                      out.spot_tolerance(t.outcome.checks, expected),
                                      "the output of a call on new inputs (timing set")
            if stale:
                return t.reject(Reason.CACHED_OUTPUT, stale.replace("set 0 is", "set 0) is", 1))
        if traced is None:
            t.add_flags(("profiler_unavailable",))
            return None
        verdict = fallback.judge_kernels(traced.kernels, s.reference_kernels, t.candidate.source)
        t.fields["kernels"] = kernel_times(traced, verdict.own)
        t.add_flags(verdict.flags + (() if traced.held else ("trace_unheld",)))
        late = side_stream_detail(traced)
        if late:
            return t.reject(Reason.SIDE_STREAM, late)
        if verdict.reason is None:
            return None
        if s.config.gate.reference_fallback == "reject":
            return t.reject(verdict.reason, verdict.detail)
        t.flagged = (verdict.reason, verdict.detail)
        return None


def kernel_times(traced: trace.CallTrace, own: tuple[str, ...]) -> tuple[KernelTime, ...]:
    """The traced call's activities summed per (name, stream), in first-launch order."""
    rows: dict[tuple[str, int], list[float]] = {}
    for a in traced.activities:
        row = rows.setdefault((a.name, a.stream), [0.0, 0])
        row[0] += a.gpu_us
        row[1] += 1
    own_set = set(own)
    return tuple(KernelTime(name, stream, round(us, 3), int(n), name in own_set)
                 for (name, stream), (us, n) in rows.items())


def side_stream_detail(traced: trace.CallTrace) -> str:
    """"" when all of the traced call's work ran on its stream before the marker; else what ran
    outside it."""
    late = traced.late()
    if late:
        worst = max(late, key=lambda a: a.end_us)
        return (f"{len(late)} kernel(s) or copies the call launched were still running after it "
                f"returned and a marker on its stream had started: {fallback.function_name(worst.name)}"
                f" on stream {worst.stream} ended {worst.end_us - traced.marker_start_us:.1f} us "
                "after the marker (work outside the timed stream: the CUDA events would not see "
                "it)")
    if traced.stream_changed:
        return ("the call left another CUDA stream current: work after it would not be on the "
                "timed stream")
    return ""


class Time:
    """The reference and the candidate timed interleaved on the timing input sets (rotated per
    trial; the candidate gets its own copies, kept for the checks after timing), with an L2 flush
    and the settings of TimingConfig (evokernel.timing.interleaved.time_interleaved). Records
    reference_ms, candidate_ms and time_s. An empty call ("idle") is timed beside them, trial
    for trial, to calibrate the side-stream rule under the same host load."""

    name = "time"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        sets = s.timing_inputs
        n = len(sets)
        t.timed_inputs = [out.clone_inputs(x) for x in sets]
        mine, kept = t.timed_inputs, t.timed_outputs

        def timed_candidate(i: int) -> Any:
            result = t.model_new(*mine[i % n])
            kept[i % n] = result
            return result

        start = time.perf_counter()
        with gate_run.strict_fp32(), torch.no_grad():
            t.stats = time_interleaved(
                {"reference": lambda i: s.ref.model(*sets[i % n]), "candidate": timed_candidate},
                s.config.timing, device=s.device, flush=s.flusher,
                probes={"idle": lambda i: None})
        t.fields.update(reference_ms=t.stats["reference"].median_ms,
                        candidate_ms=t.stats["candidate"].median_ms,
                        time_s=time.perf_counter() - start)
        return None


class SideStream:
    """The timing loop's whole-device time against the CUDA events on the timed stream, compared
    with an empty call and the reference timed beside it (evokernel.timing.interleaved.
    side_stream_suspect): information, never a verdict. On a quiet host it shows side-stream work
    in calls the trace did not see (a candidate that behaves differently when traced,
    tests/kernels/limits/side_stream_profiler_aware.py: 17.85 ms against 0.0013 ms by events);
    but under host load a call's excess grew by milliseconds while the calls timed beside it
    looked quiet (results/h200-2026-12-01-s5/call3), so no threshold calibrated beside the
    measurement is safe from host load. The traced call (Kernels) decides; this stage adds the
    flag ``side_stream_suspect:...`` (host quiet) or ``side_stream_check_skipped:host_busy:...``."""

    name = "side_stream"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        c, idle, ref = t.stats["candidate"], t.stats.get("idle"), t.stats["reference"]
        calibrations = (idle, ref) if idle is not None else ()
        if calibrations and not host_quiet(*calibrations):
            t.add_flags((f"side_stream_check_skipped:host_busy:{excess_text(c, idle, ref)}",))
        elif side_stream_suspect(c, *calibrations):
            t.add_flags((f"side_stream_suspect:events {c.median_ms:.4f} ms, whole device "
                         f"{c.host_median_ms:.4f} ms; {excess_text(c, idle, ref)}",))
        return None


def excess_text(c: Any, idle: Any, ref: Any) -> str:
    """The lower and upper quartiles of each call's excess (whole-device less event ms)."""
    from evokernel.timing.interleaved import lower_quartile, upper_quartile
    parts = [(n, x) for n, x in (("candidate", c), ("empty call", idle), ("reference", ref))
             if x is not None]
    return "; ".join(f"{n} excess quartiles {lower_quartile(x.excess_ms):.4f}-"
                     f"{upper_quartile(x.excess_ms):.4f} ms" for n, x in parts)


class Inputs:
    """INPUT_MUTATION when a timed call changed its inputs (checksums of the candidate's copies
    against the originals)."""

    name = "inputs"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        sets, mine = s.timing_inputs, t.timed_inputs
        mutated = next((f"timing set {k}: {why}" for k, why in
                        ((k, gm.inputs_modified(sets[k], mine[k])) for k in range(len(sets)))
                        if why), "")
        if mutated:
            return t.reject(Reason.INPUT_MUTATION,
                            f"the timed calls modified their inputs ({mutated})")
        return None


class Outputs:
    """CACHED_OUTPUT when a timed output is not the output for its own inputs (spot checks of the
    last timed call per set), or when, after the contents of the timing sets are rotated under
    the same tensors, the candidate returns the old outputs (evokernel.engine.outputs)."""

    name = "outputs"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        expected = s.expected_outputs(t.gate_ref)
        tol = out.spot_tolerance(t.outcome.checks, expected)
        stale = out.stale_outputs(t.timed_outputs, expected, tol,
                                  "the output of the last timed call on timing set")
        t.timed_outputs.clear()
        if not stale:
            stale = out.replay_rotated(t.model_new, t.timed_inputs, s.timing_inputs, expected,
                                       tol, s.device)
        return t.reject(Reason.CACHED_OUTPUT, stale) if stale else None


#: Fresh-input check: a candidate this much slower on every fresh input set (the fastest of
#: its one call on each) than its timed median is returning work cached across calls:
#: CACHED_OUTPUT. An honest kernel takes the same time on new data of the same shapes; a cache
#: keyed on a sample of the contents (tests/kernels/cheats/cached_content_sample.py) returns a
#: copy for the timing sets it has seen, ~0.05 ms for a 4096^3 matmul whose GEMM takes ~2.7 ms
#: on an H200, and computes for real on each set it has not. The fastest call, not the median,
#: is compared: a cheat is slow on every fresh set, while a host preempted during a call (p90
#: 3.9 ms wake-ups under 16 busy loops, results/h200-2026-12-01-s5/call1) slows only that one.
FRESH_FACTOR = 2.0
FRESH_SLACK_MS = 0.05


class Fresh:
    """One call on each of the fresh input sets (drawn at set-up; no candidate call has seen
    them): CACHED_OUTPUT when an output is not PyTorch's for its inputs, or when the fastest of
    these calls is over FRESH_FACTOR times the timed median plus FRESH_SLACK_MS (the candidate is
    fast only on inputs it has seen: a cache keyed on their contents, which the rotations of the
    timing sets cannot expose). Each call is timed as a trial of the timing loop is."""

    name = "fresh"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        if not s.fresh_inputs:
            return None
        clock = default_clock(s.device, s.flusher, s.config.timing.hide_host_ms)
        got: dict[int, Any] = {}
        times = []
        with gate_run.strict_fp32(), torch.no_grad():
            for k, inputs in enumerate(s.fresh_inputs):      # inputs cloned before the trial
                times.append(clock.trial(lambda k=k, mine=out.clone_inputs(inputs):
                                         got.__setitem__(k, t.model_new(*mine)))[0])
        expected = s.expected_outputs(t.gate_ref, fresh=True)
        stale = out.stale_outputs(got, expected, out.spot_tolerance(t.outcome.checks, expected),
                                  "the output on fresh input set")
        if stale:
            return t.reject(Reason.CACHED_OUTPUT, stale)
        fresh_ms, timed_ms = min(times), t.fields["candidate_ms"]
        if fresh_ms > FRESH_FACTOR * timed_ms + FRESH_SLACK_MS:
            return t.reject(Reason.CACHED_OUTPUT,
                            f"{timed_ms:.4f} ms on the timing sets it had seen but {fresh_ms:.4f} "
                            f"ms at best on {len(times)} input sets it had not (over "
                            f"{FRESH_FACTOR:g}x + {FRESH_SLACK_MS} ms): it returns work cached "
                            "across calls")
        return None


class Floor:
    """IMPOSSIBLE_SPEED when the candidate is faster than the memory floor allows: its minimum
    bytes at the fastest rate this device moves bytes, less the stated margin
    (evokernel.timing.floor.impossible). The reference's FLOP count is never a reason: a kernel
    may legitimately do less arithmetic (structure, Winograd, FFT, Strassen-like schemes)."""

    name = "floor"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        cand_ms = t.fields["candidate_ms"]
        if not impossible(cand_ms, s.floor_ms):
            return None
        return t.reject(Reason.IMPOSSIBLE_SPEED,
                        f"{cand_ms:.4f} ms is below {IMPOSSIBLE_MARGIN:.0%} of the memory floor "
                        f"{s.floor_ms:.4f} ms ({s.min_bytes:.3g} bytes, each input element read "
                        f"once and each output element written once, at "
                        f"{s.peaks.bandwidth_gbs:.0f} GB/s, the fastest copy, read or write "
                        "measured on this device)")


class Accept:
    """The accepted result: both ratios, both times with the candidate's CI, and any flagged
    finding (policy "flag") or accumulation note. Always returns a verdict."""

    name = "accept"

    def __call__(self, s: WorkerState, t: Trial) -> EvalResult | None:
        o, c = t.outcome, t.stats["candidate"]
        detail = (f"accepted: norm ratio {o.norm_error_ratio:.3g}, max ratio "
                  f"{o.max_error_ratio:.3g} (tolerance_factor {s.config.gate.tolerance_factor:g}); "
                  f"reference {t.fields['reference_ms']:.4f} ms, candidate "
                  f"{t.fields['candidate_ms']:.4f} ms (95% CI {c.ci_low_ms:.4f}-"
                  f"{c.ci_high_ms:.4f}, {c.trials} trials)")
        if o.detail and "accumulation" in o.detail:
            detail += "; " + o.detail
        if t.flagged is not None:
            detail += f"; flagged ({t.flagged[0].value}): {t.flagged[1]}"
        return t.result(verdict=Verdict.ACCEPT, reason=Reason.OK, detail=detail)


#: The worker's stages, in order (see the module docstring).
DEFAULT_STAGES: tuple[Stage, ...] = (
    Load(), Gate(), Tamper(), GateVerdict(), Kernels(), Tamper(), Time(), Tamper(), SideStream(),
    Inputs(), Outputs(), Fresh(), Floor(), Accept())
