"""The GPU evaluation worker: the only process that runs problem and candidate code.

Started by evokernel.engine.handle as ``python -m evokernel.engine.worker IN_FD OUT_FD`` with an environment
that holds no API keys (LLM-written code is untrusted) and ``CUDA_VISIBLE_DEVICES`` set to its
one GPU. It receives pickled messages on IN_FD and answers on OUT_FD:

    {"kind": "setup", "problem": {...}, "config": RunConfig dict, "arch": "9.0"}
        -> {"kind": "ready", "info": {...device, baselines, floor...}} | {"kind": "setup_error"}
    {"kind": "eval", "candidate": Candidate dict}
        -> {"kind": "result", "result": EvalResult dict, "fatal": bool}

After a sticky CUDA error (illegal address, misaligned access, ...) it answers with
``fatal: True`` and exits, so the next candidate runs in a fresh process and is never blamed.
Anything the candidate prints goes to the worker's log file, not to the protocol pipes.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from multiprocessing.connection import Connection

from evokernel.engine import protocol
from evokernel.engine.tamper import Tamper
from typing import Any

from evokernel.config import EvalConfig, RunConfig
from evokernel.records import Candidate, EvalResult, Reason, Verdict


def _tail(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def classify_exception(exc: BaseException) -> tuple[Reason, bool]:
    """Map an exception raised by candidate code to (reason, fatal).

    fatal is True for sticky CUDA errors (gate_run.STICKY_ERRORS), after which this process must
    not run anything else. Only the first line of a message is read: PyTorch appends advice
    mentioning "device-side assertions" to every CUDA error. A launch-configuration error (too
    much shared memory, a bad grid: gate_run.LAUNCH_ERRORS) leaves the context usable.
    """
    import torch
    from evokernel.gate.run import _text, is_launch_error, is_sticky
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in _text(exc):
        return Reason.OUT_OF_MEMORY, False
    if is_launch_error(exc) and not is_sticky(exc):
        return Reason.RUNTIME_ERROR, False
    if is_sticky(exc) or "cuda error" in _text(exc) or "cudaerror" in _text(exc):
        return Reason.CUDA_FAULT, True
    return Reason.RUNTIME_ERROR, False


class Session:
    """One problem's state in this worker: reference, cached truths, baselines and floor, the
    reference's main kernels (for the reference-fallback check) and its outputs on the timing
    sets (for the spot checks of timed outputs)."""

    def __init__(self, problem: dict[str, Any], config: EvalConfig, arch: str):
        import torch
        from evokernel.timing import floor as floor_mod
        from evokernel.gate.judge import strict_fp32
        from evokernel.gate.reference import GateReference
        from evokernel.problem import exec_module
        from evokernel.timing.interleaved import L2Flusher
        from evokernel.engine.device_sheet import device_sheet

        self.config, self.arch = config, arch
        self.device = torch.device("cuda", 0)
        torch.cuda.set_device(self.device)
        self.problem_name = problem["name"]
        self.module = exec_module(problem["source"], f"evokernel_problem_{problem['name']}",
                                  problem["path"])
        declared = tuple(problem["distributions"]) if problem.get("distributions") else None
        with strict_fp32():
            self.ref = GateReference.build(self.module, config.gate, self.device, declared)
        self.timing_inputs = self.ref.timing_input_sets(3)
        self.flusher = L2Flusher(self.device)
        if config.timing.hide_host_ms > 0:      # compiled and launched now: fails at set-up
            from evokernel.timing.spin import DeviceSpin
            DeviceSpin.get(self.device, config.timing.hide_host_ms)
        self.peaks = floor_mod.measure_peaks(self.device, config.cache_path)
        inputs = self.timing_inputs[0]
        with strict_fp32(), torch.no_grad():
            outputs = self.ref.model(*inputs)
        params = list(self.ref.model.parameters()) + list(self.ref.model.buffers())
        self.flops = floor_mod.count_flops(self.ref.model, inputs)
        self.min_bytes = floor_mod.min_bytes(list(inputs) + params, outputs)
        self.floor_ms, self.bound = floor_mod.floor_ms(self.flops, self.min_bytes, self.peaks)
        del outputs
        # A respawned worker reuses its first incarnation's torch.compile time, so every
        # candidate of a run is compared with the same baseline measurement.
        self.compile_ms = (problem["compile_ms"] if problem.get("compile_ms") is not None
                           else self._compile_baseline(problem["source"]) if config.measure_compile
                           else None)
        self.reference_kernels, self.main_kernels = self._profile_reference()
        self._expected: dict[int, list[tuple[Any, ...]]] = {}
        self.tamper = Tamper(watch_spin=config.timing.hide_host_ms > 0)
        props = torch.cuda.get_device_properties(self.device)
        self.info = {**device_sheet(props, self.peaks, arch),   # the GPU sheet of the prompts
            "device": props.name, "sm_count": props.multi_processor_count,
            "l2_mb": round(props.L2_cache_size / 2**20, 1),
            "total_memory_gb": round(props.total_memory / 2**30, 1),
            "shared_mem_per_block_optin_kb": getattr(props, "shared_memory_per_block_optin", 0)
            // 1024,
            "capability": f"{props.major}.{props.minor}", "arch": arch,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "copy_gbs": self.peaks.copy_gbs, "fp32_tflops": self.peaks.fp32_tflops,
            "tf32_tflops": self.peaks.tf32_tflops, "bf16_tflops": self.peaks.bf16_tflops,
            "flops": self.flops, "min_bytes": self.min_bytes, "floor_ms": self.floor_ms,
            "floor_bound": self.bound, "compile_ms": self.compile_ms,
            "skipped_distributions": dict(self.ref.skipped),
            "perturbed_parameters": list(self.ref.perturbed),
            "reference_main_kernels": (None if self.main_kernels is None
                                       else list(self.main_kernels)),
        }

    def _profile_reference(self) -> tuple[list[tuple[str, float]] | None,
                                          tuple[str, ...] | None]:
        """The kernels of one reference call on timing set 0 (after a warm-up call) and the
        main ones among them (evokernel.gate.fallback.main_kernels); (None, None) when the profiler
        is unavailable, which turns the reference-fallback check off (flag
        "profiler_unavailable" on every candidate)."""
        import torch
        from evokernel.gate.fallback import main_kernels
        from evokernel.gate.judge import strict_fp32
        from evokernel.gate.run import profile_kernels
        inputs = self.timing_inputs[0]
        try:
            with strict_fp32(), torch.no_grad():
                self.ref.model(*inputs)
                kernels = profile_kernels(lambda: self.ref.model(*inputs), self.device)
        except Exception:  # noqa: BLE001 -- no profile: the check is skipped, not the problem
            print("profiling the reference failed:\n" + traceback.format_exc(), flush=True)
            return None, None
        if not kernels:
            return None, None
        return kernels, main_kernels(kernels)

    def _expected_outputs(self, gate_ref: Any) -> list[tuple[Any, ...]]:
        """PyTorch's strict-FP32 outputs on each timing set, from ``gate_ref``'s model (the one
        the candidate is judged against), computed once per reference."""
        import torch
        from evokernel.gate.judge import strict_fp32
        key = id(gate_ref)
        if key not in self._expected:
            outs = []
            with strict_fp32(), torch.no_grad():
                for inputs in self.timing_inputs:
                    raw = gate_ref.model(*inputs)
                    raw = (raw,) if isinstance(raw, torch.Tensor) else tuple(raw)
                    outs.append(tuple(o.detach().clone() for o in raw))
            self._expected[key] = outs
        return self._expected[key]

    def _compile_baseline(self, problem_source: str) -> float | None:
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
        """Gate then time one candidate. Returns (result, fatal)."""
        t0 = time.perf_counter()
        try:
            result = self._evaluate(cand)
            fatal = result.reason is Reason.CUDA_FAULT   # the gate caught a sticky error
        except Exception as e:
            reason, fatal = classify_exception(e)
            result = EvalResult.failure(cand.id, reason, f"{type(e).__name__}: {e}"[:2000],
                                        log=_tail(traceback.format_exc()))
        tampered = self.tamper.check()   # always: restores timers, and blames the right one
        if tampered and result.reason not in (Reason.TIMER_TAMPERING, Reason.THREADS):
            result = EvalResult.failure(cand.id, tampered[0], tampered[1], log=result.log)
        if not fatal:
            # The context was healthy before this candidate; if it is broken now, this
            # candidate broke it (an asynchronous fault that surfaced late), not the next one.
            broken = _context_error(self.device)
            if broken is not None:
                fatal = True
                result = EvalResult.failure(
                    cand.id, Reason.CUDA_FAULT, f"the CUDA context is broken after this "
                    f"candidate: {broken}"[:2000], log=result.log)
        return _with(result, eval_s=time.perf_counter() - t0), fatal

    def _evaluate(self, cand: Candidate) -> EvalResult:
        """Gate, kernel check, timing, then the checks on the timed calls, in this order (the
        first that fires names the reason): the gate (evokernel.gate.judge); timer patches or threads
        (TIMER_TAMPERING, THREADS); the profiled kernels (REFERENCE_FALLBACK,
        NO_KERNEL_LAUNCHED; evokernel.gate.fallback, policy GateConfig.reference_fallback); after
        timing, tampering again, work outside the timed stream (SIDE_STREAM), inputs changed
        by the timed calls (INPUT_MUTATION), timed outputs that are not the outputs for their
        inputs (CACHED_OUTPUT: spot checks, then a replay with the input contents rotated
        under the same tensors), and a time below the physical floor (IMPOSSIBLE_SPEED)."""
        import torch
        from evokernel.build.cache import load_candidate
        from evokernel.timing.floor import impossible
        from evokernel.gate.judge import gate_candidate, strict_fp32
        from evokernel.gate.scan import scan_source
        from evokernel.timing.interleaved import side_stream_suspect, time_interleaved

        flags = scan_source(cand.source)
        try:
            module = load_candidate(cand.source, f"evokernel_cand_{cand.id}",
                                    self.config.cache_path, self.arch)
            if not hasattr(module, "ModelNew"):
                return EvalResult.failure(cand.id, Reason.NO_CODE,
                                          "the module defines no ModelNew", flags=flags)
            model_new, gate_ref = self.ref.prepare_candidate(module.ModelNew)
        except Exception as e:
            reason, fatal = classify_exception(e)
            if reason is Reason.RUNTIME_ERROR:
                reason = Reason.LOAD_ERROR
            if fatal:
                raise
            return EvalResult.failure(cand.id, reason, f"{type(e).__name__}: {e}"[:2000],
                                      log=_tail(traceback.format_exc()), flags=flags)
        with strict_fp32(), torch.no_grad():
            outcome = gate_candidate(gate_ref, model_new, cand.source)
        common = dict(checks=outcome.checks, norm_error_ratio=outcome.norm_error_ratio,
                      max_error_ratio=outcome.max_error_ratio,
                      tolerance_factor=self.config.gate.tolerance_factor,
                      distribution=outcome.distribution, seed=outcome.seed,
                      floor_ms=self.floor_ms, compile_ms=self.compile_ms,
                      flags=tuple(dict.fromkeys(tuple(flags) + tuple(outcome.flags))))
        tampered = self.tamper.check()
        if tampered:
            return EvalResult.failure(cand.id, tampered[0], tampered[1], **common)
        if not outcome.passed:
            return EvalResult.failure(cand.id, outcome.reason, outcome.detail,
                                      log=outcome.log, **common)
        kernel_reason, kernel_detail, kernel_flags = self._kernel_check(
            model_new, cand.source, gate_ref, outcome.checks)
        common["flags"] = tuple(dict.fromkeys(common["flags"] + kernel_flags))
        if kernel_reason is Reason.CACHED_OUTPUT or (
                kernel_reason is not None and self.config.gate.reference_fallback == "reject"):
            return EvalResult.failure(cand.id, kernel_reason, kernel_detail, **common)
        tampered = self.tamper.check()
        if tampered:
            return EvalResult.failure(cand.id, tampered[0], tampered[1], **common)

        sets = self.timing_inputs
        n = len(sets)
        mine = [_clone_inputs(s) for s in sets]       # the candidate's own copies of the sets
        kept: dict[int, Any] = {}                     # latest timed output per set

        def timed_candidate(i: int) -> Any:
            out = model_new(*mine[i % n])
            kept[i % n] = out
            return out

        t_time = time.perf_counter()
        with strict_fp32(), torch.no_grad():
            stats = time_interleaved(
                {"reference": lambda i: self.ref.model(*sets[i % n]),
                 "candidate": timed_candidate},
                self.config.timing, device=self.device, flush=self.flusher)
        ref_ms, cand_ms = stats["reference"].median_ms, stats["candidate"].median_ms
        timed = dict(common, reference_ms=ref_ms, candidate_ms=cand_ms,
                     time_s=time.perf_counter() - t_time)
        tampered = self.tamper.check()
        if tampered:
            return EvalResult.failure(cand.id, tampered[0], tampered[1], **timed)
        if side_stream_suspect(stats["candidate"]):
            host = stats["candidate"].host_median_ms
            return EvalResult.failure(
                cand.id, Reason.SIDE_STREAM,
                f"CUDA events saw {cand_ms:.4f} ms but the whole device, synchronized, was busy "
                f"for {host:.4f} ms: work runs outside the timed stream", **timed)
        mutated = next((f"timing set {k}: {why}" for k, why in
                        ((k, _modified(sets[k], mine[k])) for k in range(n)) if why), "")
        if mutated:
            return EvalResult.failure(cand.id, Reason.INPUT_MUTATION, "the timed calls modified "
                                      f"their inputs ({mutated})", **timed)
        expected = self._expected_outputs(gate_ref)
        tol = _spot_tolerance(outcome.checks, expected)
        stale = _stale(kept, expected, tol, "the output of the last timed call on timing set")
        kept.clear()
        if not stale:
            stale = self._replay(model_new, mine, expected, tol)
        if stale:
            return EvalResult.failure(cand.id, Reason.CACHED_OUTPUT, stale, **timed)
        if impossible(cand_ms, self.floor_ms):
            return EvalResult.failure(
                cand.id, Reason.IMPOSSIBLE_SPEED,
                f"{cand_ms:.4f} ms is below the physical floor {self.floor_ms:.4f} ms "
                f"({self.bound}-bound: {self.flops:.3g} FLOP, {self.min_bytes:.3g} bytes)", **timed)
        detail = (f"accepted: norm ratio {outcome.norm_error_ratio:.3g}, max ratio "
                  f"{outcome.max_error_ratio:.3g} (factor {self.config.gate.tolerance_factor:g}); "
                  f"reference {ref_ms:.4f} ms, candidate {cand_ms:.4f} ms "
                  f"(95% CI {stats['candidate'].ci_low_ms:.4f}-{stats['candidate'].ci_high_ms:.4f},"
                  f" {stats['candidate'].trials} trials)")
        if outcome.detail and "accumulation" in outcome.detail:
            detail += "; " + outcome.detail
        if kernel_reason is not None:
            detail += f"; flagged ({kernel_reason.value}): {kernel_detail}"
        return EvalResult(candidate_id=cand.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                          detail=detail, **timed)

    def _kernel_check(self, model_new: Any, source: str, gate_ref: Any, checks: Any
                      ) -> tuple[Reason | None, str, tuple[str, ...]]:
        """Profile one candidate call on a fresh clone of timing set 0 (contents the gate never
        showed it) and judge its kernels against the reference's main kernels
        (evokernel.gate.fallback.judge_kernels). The call's output is checked first: a wrong one
        came from a cache (CACHED_OUTPUT), and launched no kernel for a reason of its own.
        Returns (reason or None, detail, flags)."""
        import torch
        from evokernel.gate.fallback import judge_kernels
        from evokernel.gate.judge import strict_fp32
        from evokernel.gate.run import profile_kernels
        inputs = _clone_inputs(self.timing_inputs[0])
        got: list[Any] = []

        def call() -> None:
            got.append(model_new(*inputs))
        with strict_fp32(), torch.no_grad():
            if self.main_kernels is None:
                kernels = None
                call()
                torch.cuda.synchronize(self.device)
            else:
                kernels = profile_kernels(call, self.device)
        if got:
            expected = self._expected_outputs(gate_ref)
            stale = _stale({0: got[0]}, expected, _spot_tolerance(checks, expected),
                           "the output of a call on new inputs (timing set")
            if stale:
                return Reason.CACHED_OUTPUT, stale.replace("set 0 is", "set 0) is", 1), ()
        if kernels is None:
            return None, "", ("profiler_unavailable",)
        verdict = judge_kernels(kernels, self.main_kernels, source)
        return verdict.reason, verdict.detail, verdict.flags

    def _replay(self, model_new: Any, mine: list[list], expected: list[tuple[Any, ...]],
                tol: float) -> str:
        """Rotate the contents of the candidate's timing sets under the same tensors (set k's
        tensors receive set k+1's values: same data_ptr, id and shape), call the candidate on
        each, and compare with PyTorch's output for the new contents. A cache keyed on any of
        those returns the old output. Returns "" or what was stale."""
        import torch
        from evokernel.gate.judge import strict_fp32
        n = len(mine)
        if n < 2:
            return ""
        with torch.no_grad():
            for k in range(n):
                for dst, src in zip(_tensors(mine[k]), _tensors(self.timing_inputs[(k + 1) % n])):
                    dst.copy_(src)
        torch.cuda.synchronize(self.device)
        outs = {}
        with strict_fp32(), torch.no_grad():
            for k in range(n):
                outs[k] = model_new(*mine[k])
        torch.cuda.synchronize(self.device)
        shifted = [expected[(k + 1) % n] for k in range(n)]
        return _stale(outs, shifted, tol, "after the contents of the timing sets were rotated "
                      "under the same tensors, the output on timing set")


def _tensors(x: Any) -> list:
    """The tensors in ``x`` (a tensor or nested lists/tuples), in order."""
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def _clone_inputs(inputs: Any) -> Any:
    from evokernel.gate import maths as gm
    return gm.map_tensors(inputs, lambda t: t.clone())


def _modified(original: Any, copy: Any) -> str:
    from evokernel.gate import maths as gm
    return gm.inputs_modified(original, copy)


def _spot_tolerance(checks: Any, expected: list[tuple[Any, ...]]) -> float:
    """gate_math.spot_tolerance from the gate's checks on the problem's own distribution."""
    import torch
    from evokernel.gate import maths as gm
    pairs = [(c.candidate_norm_error, c.reference_norm_error) for c in checks
             if c.distribution == "problem"] or [
        (c.candidate_norm_error, c.reference_norm_error) for c in checks]
    dtype = next((o.dtype for outs in expected for o in outs if isinstance(o, torch.Tensor)),
                 torch.float32)
    return gm.spot_tolerance(pairs, dtype)


def _stale(outputs: dict[int, Any], expected: list[tuple[Any, ...]], tol: float,
           what: str) -> str:
    """"" when every output in ``outputs`` (set index -> a forward's return) is within ``tol``
    (relative, gate_math.relative_distance) of ``expected[index]``; else a description naming
    the set, the distance, and the set whose expected output it matches, if any."""
    import torch
    from evokernel.gate import maths as gm
    for k, raw in sorted(outputs.items()):
        outs = (raw,) if isinstance(raw, torch.Tensor) else tuple(raw)
        if len(outs) != len(expected[k]):
            return f"{what} {k} has {len(outs)} outputs, not {len(expected[k])}"
        for i, (o, e) in enumerate(zip(outs, expected[k])):
            d = gm.relative_distance(o, e)
            if d > tol:
                match = next((j for j, exp in enumerate(expected) if j != k and len(exp) > i
                              and gm.relative_distance(o, exp[i]) <= tol), None)
                also = (f"; it is the output for timing set {match}" if match is not None
                        else "")
                return (f"{what} {k} is {d:.3g} (relative) from PyTorch's output on its inputs, "
                        f"allowed {tol:.3g}{also}: timed calls return outputs computed for other "
                        "inputs")
    return ""


def _context_error(device: Any) -> str | None:
    """None if the CUDA context still works (synchronize and a tiny kernel), else the error."""
    import torch
    try:
        torch.cuda.synchronize(device)
        probe = torch.ones(1, device=device) + 1
        if probe.item() != 2.0:
            return "a probe kernel computed 1 + 1 wrong"
        return None
    except Exception as e:  # sticky errors re-raise on every call
        return f"{type(e).__name__}: {e}"


def _with(result: EvalResult, **changes: Any) -> EvalResult:
    import dataclasses
    return dataclasses.replace(result, **changes)


def main(argv: list[str]) -> int:
    conn_in = Connection(int(argv[1]), writable=False)
    conn_out = Connection(int(argv[2]), readable=False)
    session: Session | None = None
    while True:
        try:
            msg = protocol.recv(conn_in)
        except (EOFError, OSError, protocol.ProtocolError):
            return 0
        kind = msg.get("kind")
        if kind == "setup":
            try:
                config = RunConfig.from_dict(msg["config"]).evaluation
                session = Session(msg["problem"], config, msg["arch"])
                protocol.send(conn_out, {"kind": "ready", "info": session.info})
            except Exception:
                protocol.send(conn_out, {"kind": "setup_error",
                                         "error": _tail(traceback.format_exc())})
                return 2
        elif kind == "eval":
            if session is None:
                protocol.send(conn_out, {"kind": "setup_error", "error": "eval before setup"})
                return 2
            cand = Candidate.from_dict(msg["candidate"])
            result, fatal = session.evaluate(cand)
            sys.stdout.flush()
            protocol.send(conn_out, {"kind": "result", "result": result.to_dict(), "fatal": fatal})
            if fatal:
                os._exit(3)  # the CUDA context is gone; never run another candidate here
        elif kind == "stop":
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
