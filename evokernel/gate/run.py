"""Running candidate code for the gate: strict FP32 (evokernel.precision), fresh input clones, poisoned free memory,
launch-error checks and exceptions as named reasons (the GPU trace of one call is
evokernel.gate.trace).

evokernel.gate.judge judges what these functions return; nothing here decides a verdict beyond naming
why a call itself failed. Device-agnostic where it can be: on the CPU there is nothing to poison,
synchronize or profile.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

import torch

from evokernel.gate import maths as gm
from evokernel.gate import unwritten
from evokernel.precision import is_strict_fp32, strict_fp32
from evokernel.records import Reason

#: CUDA errors that a bad launch configuration returns at once and that leave the context usable
#: (cudaErrorInvalidValue, cudaErrorInvalidConfiguration, cudaErrorLaunchOutOfResources,
#: cudaErrorInvalidDeviceFunction / NoKernelImageForDevice, cudaErrorSymbolNotFound), as
#: lower-case substrings of their messages. Raised inside forward they are a RUNTIME_ERROR;
#: pending after forward returned (nobody checked the launch) they are a SILENT_FAILURE.
#: The driver API's names of the same errors are how cuda.core's CUDAError spells them (NVRTC
#: candidates, evokernel.nvrtc: a launch with a missing argument raised
#: CUDA_ERROR_INVALID_VALUE on the H200 and the context survived, results/h200-2026-12-01-s5).
LAUNCH_ERRORS = ("invalid argument", "invalid configuration argument",
                 "too many resources requested", "no kernel image is available",
                 "invalid device function", "named symbol not found",
                 "cuda_error_invalid_value", "cuda_error_launch_out_of_resources",
                 "cuda_error_no_binary_for_gpu", "cuda_error_not_found")

#: Errors after which the CUDA context is unusable (the worker must exit), lower case; and their
#: driver API names (cuda.core).
STICKY_ERRORS = ("illegal memory access", "misaligned address", "unspecified launch failure",
                 "device-side assert", "illegal instruction",
                 "invalid program counter", "uncorrectable", "cuda error: unknown error",
                 "launch timed out", "cuda_error_illegal_address",
                 "cuda_error_misaligned_address", "cuda_error_launch_failed",
                 "cuda_error_assert", "cuda_error_illegal_instruction", "cuda_error_invalid_pc",
                 "cuda_error_hardware_stack_error", "cuda_error_ecc_uncorrectable",
                 "cuda_error_launch_timeout", "cuda_error_unknown")


@dataclass(frozen=True)
class Run:
    """One candidate call: its raw return, outputs as a tuple, the input clones it got; or the
    reason it failed (``error``) with a traceback tail (``log``)."""

    raw: Any = None
    outputs: tuple = ()
    inputs: tuple = ()
    error: tuple[Reason, str] | None = None
    log: str = ""
    tf32_switched: bool = False


def run_candidate(model_new: torch.nn.Module, inputs: tuple[Any, ...], device: torch.device,
                  out_nbytes: list[int]) -> Run:
    """Call ``model_new`` on fresh clones of ``inputs`` under strict_fp32 and no_grad, after
    poisoning free allocator memory (CUDA), then synchronize the whole device (so work on side
    streams has finished) and launch one tiny kernel of PyTorch's own, whose launch check
    surfaces a launch error the candidate left unchecked.

    Failures become a reason, never an exception: raised inside forward, exception_reason's;
    raised by the synchronize or the probe after forward returned, CUDA_FAULT for a sticky error
    and SILENT_FAILURE for a launch error nobody checked (too much shared memory, a bad grid).
    """
    clones = gm.map_tensors(inputs, lambda t: t.clone())
    try:
        poison_free_memory(device, out_nbytes)
        with strict_fp32(), torch.no_grad():
            raw = model_new(*clones)
            switched = not is_strict_fp32()
    except Exception as e:  # noqa: BLE001 -- any failure of candidate code is data
        return Run(error=(exception_reason(e), f"{type(e).__name__}: {str(e)[:500]}"),
                   log=traceback_tail(e))
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
            _launch_probe(device)
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {str(e)[:500]}"
            if is_launch_error(e) and not is_sticky(e):
                return Run(error=(Reason.SILENT_FAILURE, "a kernel launch failed and forward "
                                  f"returned anyway (the error was never checked): {msg}"),
                           log=traceback_tail(e))
            return Run(error=(Reason.CUDA_FAULT, msg), log=traceback_tail(e))
    outs = tuple(raw) if isinstance(raw, (tuple, list)) else (raw,)
    return Run(raw, outs, clones, None, "", switched)


def _launch_probe(device: torch.device) -> None:
    """Launch one small ATen kernel: its C10_CUDA_KERNEL_LAUNCH_CHECK reads (and clears) the
    thread's last CUDA error, so a launch error the candidate left pending raises here."""
    torch.empty(1, device=device).fill_(1.0)


def poison_free_memory(device: torch.device, out_nbytes: list[int]) -> None:
    """CUDA only: allocate blocks the size of each output (4 each, so best-fit reuse of any
    same-size cached block is covered) and one large block (4x all outputs, at least 64 MiB,
    at most a quarter of the device), fill them with gate_math.POISON_WORD (a NaN in every
    floating format, with a payload no arithmetic produces), free them. An output the candidate
    allocates but never writes (torch::empty) then reads as that pattern, not as stale correct
    values, and the gate can tell "never written" from "computed NaN"."""
    if device.type != "cuda":
        return
    cap = torch.cuda.get_device_properties(device).total_memory // 4
    sizes = [n for n in out_nbytes for _ in range(4)] + [max(64 << 20, 4 * sum(out_nbytes))]
    blocks = []
    try:
        for n in sizes:
            blocks.append(torch.full((max(1, min(n, cap) // 4),), unwritten.POISON_WORD,
                                     dtype=torch.int32, device=device))
    except torch.cuda.OutOfMemoryError:
        pass
    del blocks
    torch.cuda.synchronize(device)


def error_text(e: BaseException) -> str:
    """The exception's type and the first line of its message, lower case. Only the first line:
    PyTorch appends advice to every CUDA error ("Compile with `TORCH_USE_CUDA_DSA` to enable
    device-side assertions"), which must not read as a device-side assert."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}".lower()


def is_launch_error(e: BaseException) -> bool:
    """A CUDA launch-configuration error (LAUNCH_ERRORS): the context stays usable."""
    text = error_text(e)
    return ("cuda" in text or "accelerator" in text) and any(s in text for s in LAUNCH_ERRORS)


def is_sticky(e: BaseException) -> bool:
    """A CUDA error after which the context is unusable (STICKY_ERRORS)."""
    return any(s in error_text(e) for s in STICKY_ERRORS)


def exception_reason(e: BaseException) -> Reason:
    """The reason for an exception raised by candidate code: OUT_OF_MEMORY; RUNTIME_ERROR for a
    launch-configuration error (the context survives it); CUDA_FAULT for any other CUDA error;
    RUNTIME_ERROR otherwise."""
    oom = tuple(c for c in (getattr(torch, "OutOfMemoryError", None),
                            getattr(torch.cuda, "OutOfMemoryError", None)) if c)
    if oom and isinstance(e, oom):
        return Reason.OUT_OF_MEMORY
    if is_launch_error(e) and not is_sticky(e):
        return Reason.RUNTIME_ERROR
    accel = getattr(torch, "AcceleratorError", None)
    msg = str(e)
    if (accel is not None and isinstance(e, accel)) or is_sticky(e) or any(s in msg for s in (
            "CUDA error", "illegal memory access", "device-side assert", "cudaError",
            "unspecified launch failure")):
        return Reason.CUDA_FAULT
    return Reason.RUNTIME_ERROR


def traceback_tail(e: BaseException, limit: int = 4000) -> str:
    """The last ``limit`` characters of ``e``'s formatted traceback."""
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))[-limit:]
