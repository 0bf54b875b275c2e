"""The GPU worker's per-problem state (``Session``): the reference and its float64 truths, the
timing input sets, the floor and baselines, the reference's kernel profile; and the stages every
candidate goes through (evokernel.engine.stages), run by ``Session.evaluate``.
"""
from __future__ import annotations

import time
import traceback
from typing import Any

from loguru import logger

from evokernel.config import EvalConfig
from evokernel.engine.faults import classify_exception, tail
from evokernel.engine.outputs import context_error
from evokernel.engine.pipeline import Stage, Trial, run_stages, with_fields
from evokernel.engine.predraw import FRESH_FIRST_SEED, TIMING_FIRST_SEED, TIMING_SETS, Predrawn
from evokernel.engine.stages import DEFAULT_STAGES
from evokernel.engine.tamper import Tamper
from evokernel.records import Candidate, EvalResult, Reason


class SetupClock:
    """Wall seconds of each named step of a set-up, in order (``steps``: name -> s), so a slow
    set-up says where its time went (issue 16: set-up is most of a problem set's GPU time)."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        """Close step ``name``: the seconds since the previous lap (or the clock's start)."""
        now = time.perf_counter()
        self.steps[name] = round(now - self._t, 4)
        self._t = now


def _made_ahead(problem: dict[str, Any], predrawn: Predrawn | None) -> tuple[Any, Any, Any]:
    """The problem's module, and how its model is made and its input sets are drawn: by
    ``predrawn`` when it was made for this problem (evokernel.engine.predraw), else the module
    run now, make_model and draw_inputs. Returns (module, make, draw)."""
    from evokernel.gate.distributions import draw_inputs
    from evokernel.gate.reference import make_model
    from evokernel.problem import exec_module
    if predrawn is not None and predrawn.matches(problem):
        return predrawn.module, predrawn.make, predrawn.draw
    return exec_module(problem["source"], f"evokernel_problem_{problem['name']}",
                       problem["path"]), make_model, draw_inputs


class Session:
    """One problem's state in this worker: reference, cached truths, baselines and floor, the
    reference's main kernels (for the reference-fallback check) and its outputs on the timing
    sets (for the spot checks of timed outputs); and the stages a candidate goes through
    (evokernel.engine.stages.DEFAULT_STAGES).

    ``predrawn``: the problem's module and input sets made before the set-up by a worker
    started ahead (evokernel.engine.predraw); the same values as drawn here, sooner.

    Raises (at construction): whatever setting up the problem raises (a bad problem, no GPU, a
    spin that cannot run); the worker reports it as a set-up error."""

    #: The stages every candidate goes through, in order.
    stages: tuple[Stage, ...] = DEFAULT_STAGES

    def __init__(self, problem: dict[str, Any], config: EvalConfig, arch: str,
                 predrawn: Predrawn | None = None):
        import torch
        from evokernel.gate import trace
        from evokernel.gate.judge import strict_fp32
        from evokernel.gate.reference import GateReference
        from evokernel.timing import floor as floor_mod
        from evokernel.timing.clocks import L2Flusher

        clock = SetupClock()
        self.config, self.arch = config, arch
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        self.problem_name = problem["name"]
        self.module, make, draw = _made_ahead(problem, predrawn)
        clock.lap("problem_module")
        declared = tuple(problem["distributions"]) if problem.get("distributions") else None
        with strict_fp32():
            self.ref = GateReference.build(self.module, config.gate, self.device, declared,
                                           draw=draw, make=make)
        clock.lap("gate_reference")
        self.timing_inputs = self.ref.timing_input_sets(TIMING_SETS, TIMING_FIRST_SEED)
        # Input sets no candidate call sees before the fresh-input check (stages.Fresh).
        self.fresh_inputs = self.ref.timing_input_sets(TIMING_SETS, FRESH_FIRST_SEED)
        self.predrawn = ({"sets": predrawn.used, "s": round(predrawn.seconds, 4)}
                         if predrawn is not None else None)
        clock.lap("timing_inputs")
        self.flusher = L2Flusher(self.device)
        # three laps, once "timing_tools" (0.67 s on the H200, session 21): which part is slow
        clock.lap("l2_flusher")
        if config.timing.hide_host_ms > 0:      # compiled and launched now: fails at set-up
            from evokernel.timing.spin import DeviceSpin
            DeviceSpin.get(self.device, config.timing.hide_host_ms)
        clock.lap("spin_kernel")
        trace.prepare(self.device)              # the marker kernel, compiled before any candidate
        clock.lap("trace_kernels")
        self.peaks = floor_mod.measure_peaks(self.device, config.cache_path)
        clock.lap("peaks")
        self._set_floors(problem["path"])
        clock.lap("floors")
        # A respawned worker reuses its first incarnation's torch.compile time, so every
        # candidate of a run is compared with the same baseline measurement.
        self.compile_ms = (problem["compile_ms"] if problem.get("compile_ms") is not None
                           else self.compile_baseline(problem["source"]) if config.measure_compile
                           else None)
        clock.lap("compile_baseline")
        self.reference_kernels, self.main_kernels = self._profile_reference()
        clock.lap("profile_reference")
        self.reference_ms = self._time_reference()
        clock.lap("time_reference")
        self._expected: dict[tuple[int, bool], list[tuple[Any, ...]]] = {}
        from evokernel import nvrtc
        nvrtc.configure(config.cache_path, arch)   # before the snapshot: the Load stage's own
        self._warm_nvrtc()                          # likewise: a first use loads libraries
        clock.lap("nvrtc_warm_up")
        self.tamper = Tamper(watch_spin=config.timing.hide_host_ms > 0)   # call changes nothing
        self.info = self._info()
        clock.lap("info")
        self.info["setup_steps_s"] = clock.steps

    @staticmethod
    def _warm_nvrtc() -> None:
        """nvrtc.warm_up, or a log line where NVRTC or cuda.core is missing or broken (then only
        NVRTC candidates fail, each with its own error; load_inline ones are unaffected)."""
        from evokernel import nvrtc
        try:
            nvrtc.warm_up()
        except Exception as e:                     # noqa: BLE001 - reported, not fatal
            logger.warning("NVRTC warm-up failed ({}: {}); NVRTC candidates may fail",
                           type(e).__name__, e)

    def _set_floors(self, path: str) -> None:
        """The memory floor (the one bound), the FP32 compute floor (information) and which of
        the two is larger, from the reference's FLOPs and its minimum bytes (or the problem's
        own ``MIN_BYTES``). Raises: ProblemError for a ``MIN_BYTES`` that is not a positive
        integer."""
        import torch
        from evokernel.errors import ProblemError
        from evokernel.gate.judge import strict_fp32
        from evokernel.timing import floor as floor_mod
        inputs = self.timing_inputs[0]
        with strict_fp32(), torch.no_grad():
            outputs = self.ref.model(*inputs)
        params = list(self.ref.model.parameters()) + list(self.ref.model.buffers())
        self.flops = floor_mod.count_flops(self.ref.model, inputs)
        declared = getattr(self.module, "MIN_BYTES", None)
        if declared is not None and (isinstance(declared, bool) or not isinstance(declared, int)
                                     or declared <= 0):
            raise ProblemError(f"{path}: MIN_BYTES must be a positive integer, got {declared!r}")
        self.min_bytes = declared or floor_mod.min_bytes(list(inputs) + params, outputs)
        dtype = next((o.dtype for o in ((outputs,) if isinstance(outputs, torch.Tensor)
                                        else outputs) if isinstance(o, torch.Tensor)
                      and o.is_floating_point()), torch.float32)
        self.floor_ms = floor_mod.memory_floor_ms(self.min_bytes, self.peaks)
        try:
            self.compute_floor_ms: float | None = floor_mod.compute_floor_ms(
                self.flops, self.peaks, dtype)
        except ValueError:                      # a dtype with no measured rate
            self.compute_floor_ms = None
        self.bound = floor_mod.bound(self.floor_ms, self.compute_floor_ms or 0.0)

    def _time_reference(self) -> float:
        """The reference's median time (ms) alone at set-up, the same way a candidate's is
        timed: the baseline against which the handle watches the interleaved reference times
        for drift (evokernel.engine.gpu_share)."""
        import torch
        from evokernel.gate.judge import strict_fp32
        from evokernel.timing.interleaved import time_interleaved
        sets = self.timing_inputs
        with strict_fp32(), torch.no_grad():
            stats = time_interleaved({"reference": lambda i: self.ref.model(*sets[i % len(sets)])},
                                     self.config.timing, device=self.device, flush=self.flusher)
        return stats["reference"].median_ms

    def _info(self) -> dict[str, Any]:
        """What the parent and the prompts learn about the device, the problem's floors and
        baselines, and the reference's kernels."""
        import torch
        from evokernel.engine.device_sheet import device_sheet
        props = torch.cuda.get_device_properties(self.device)
        p = self.peaks
        return {
            **device_sheet(props, p, self.arch),
            "device": props.name, "uuid": str(getattr(props, "uuid", "") or ""),
            "sm_count": props.multi_processor_count,
            "l2_mb": round(props.L2_cache_size / 2**20, 1),
            "total_memory_gb": round(props.total_memory / 2**30, 1),
            "shared_mem_per_block_optin_kb": getattr(props, "shared_memory_per_block_optin", 0)
            // 1024,
            "capability": f"{props.major}.{props.minor}", "arch": self.arch,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "copy_gbs": p.copy_gbs, "read_gbs": p.read_gbs, "write_gbs": p.write_gbs,
            "bandwidth_gbs": p.bandwidth_gbs, "fp32_tflops": p.fp32_tflops,
            "tf32_tflops": p.tf32_tflops, "bf16_tflops": p.bf16_tflops,
            "flops": self.flops, "min_bytes": self.min_bytes, "floor_ms": self.floor_ms,
            "compute_floor_ms": self.compute_floor_ms, "floor_bound": self.bound,
            "compile_ms": self.compile_ms, "reference_ms": self.reference_ms,
            "predrawn": self.predrawn,
            "skipped_distributions": dict(self.ref.skipped),
            "perturbed_parameters": list(self.ref.perturbed),
            "reference_main_kernels": (None if self.main_kernels is None
                                       else list(self.main_kernels)),
        }

    def _profile_reference(self) -> tuple[list[tuple[str, float]] | None,
                                          tuple[str, ...] | None]:
        """The kernels of one traced reference call on timing set 0 (after a warm-up call) and the
        main ones among them (evokernel.gate.fallback.main_kernels); (None, None) when the profiler
        is unavailable, which turns the reference-fallback check off (flag
        "profiler_unavailable" on every candidate)."""
        import torch
        from evokernel.gate import trace
        from evokernel.gate.fallback import main_kernels
        from evokernel.gate.judge import strict_fp32
        inputs = self.timing_inputs[0]
        try:
            with strict_fp32(), torch.no_grad():
                self.ref.model(*inputs)
                traced = trace.trace_call(lambda: self.ref.model(*inputs), self.device)
        except Exception:  # noqa: BLE001 -- no profile: the check is skipped, not the problem
            print("profiling the reference failed:\n" + traceback.format_exc(), flush=True)
            return None, None
        kernels = traced.kernels if traced is not None else []
        if not kernels:
            return None, None
        return kernels, main_kernels(kernels)

    def expected_outputs(self, gate_ref: Any, fresh: bool = False) -> list[tuple[Any, ...]]:
        """PyTorch's strict-FP32 outputs on each timing set (or, with ``fresh``, each fresh
        input set), from ``gate_ref``'s model (the one the candidate is judged against),
        computed once per reference."""
        import torch
        from evokernel.gate.judge import strict_fp32
        key = (id(gate_ref), fresh)
        if key not in self._expected:
            outs = []
            with strict_fp32(), torch.no_grad():
                for inputs in (self.fresh_inputs if fresh else self.timing_inputs):
                    raw = gate_ref.model(*inputs)
                    raw = (raw,) if isinstance(raw, torch.Tensor) else tuple(raw)
                    outs.append(tuple(o.detach().clone() for o in raw))
            self._expected[key] = outs
        return self._expected[key]

    def compile_baseline(self, problem_source: str) -> float | None:
        """torch.compile (default mode) median ms, timed interleaved with eager (TF32 off), from
        the cache when this problem, GPU, torch/CUDA and settings were measured before
        (evokernel.timing.baselines)."""
        import torch
        from evokernel.timing import baselines
        key = baselines.baseline_key(problem_source, torch.cuda.get_device_name(self.device),
                                     torch.__version__, torch.version.cuda, self.config)
        return baselines.cached_compile_ms(
            self.config.cache_path, key,
            lambda: baselines.measure_compile_baseline(self.ref.model, self.timing_inputs,
                                                       self.config, self.device, self.flusher))

    def evaluate(self, cand: Candidate) -> tuple[EvalResult, bool]:
        """Run the stages on one candidate, then the checks that must follow any candidate.
        Returns (result, fatal): fatal when the CUDA context is gone and this process must not
        run anything else. Never raises for a bad candidate: an exception of its code becomes
        a reason (evokernel.engine.faults.classify_exception)."""
        t0 = time.perf_counter()
        try:
            result = self.judge(cand)
            fatal = result.reason is Reason.CUDA_FAULT   # the gate caught a sticky error
        except Exception as e:
            reason, fatal = classify_exception(e)
            result = EvalResult.failure(cand.id, reason, f"{type(e).__name__}: {e}"[:2000],
                                        log=tail(traceback.format_exc()))
        tampered = self.tamper.check()   # always: restores timers, and blames the right one
        if tampered and result.reason not in (Reason.TIMER_TAMPERING, Reason.THREADS):
            result = EvalResult.failure(cand.id, tampered[0], tampered[1], log=result.log)
        if not fatal:
            # The context was healthy before this candidate; if it is broken now, this
            # candidate broke it (an asynchronous fault that surfaced late), not the next one.
            broken = context_error(self.device)
            if broken is not None:
                fatal = True
                result = EvalResult.failure(
                    cand.id, Reason.CUDA_FAULT, f"the CUDA context is broken after this "
                    f"candidate: {broken}"[:2000], log=result.log)
        return with_fields(result, eval_s=time.perf_counter() - t0), fatal

    def judge(self, cand: Candidate) -> EvalResult:
        """The stages alone (``self.stages``, in order; the first verdict names the reason).
        Raises: what a stage raises for a fault of the candidate's code (see ``evaluate``)."""
        return run_stages(self.stages, self, Trial(candidate=cand))
