"""What a fault of candidate code means for the worker: the reason it names and whether the CUDA
context survives it."""
from __future__ import annotations

from evokernel.gate.run import error_text, is_launch_error, is_sticky
from evokernel.records import Reason


def classify_exception(exc: BaseException) -> tuple[Reason, bool]:
    """Map an exception raised by candidate code to (reason, fatal).

    fatal is True for sticky CUDA errors (gate_run.STICKY_ERRORS), after which this process must
    not run anything else. Only the first line of a message is read: PyTorch appends advice
    mentioning "device-side assertions" to every CUDA error. A launch-configuration error (too
    much shared memory, a bad grid: gate_run.LAUNCH_ERRORS) leaves the context usable.
    """
    import torch
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in error_text(exc):
        return Reason.OUT_OF_MEMORY, False
    if is_launch_error(exc) and not is_sticky(exc):
        return Reason.RUNTIME_ERROR, False
    if is_sticky(exc) or "cuda error" in error_text(exc) or "cudaerror" in error_text(exc):
        return Reason.CUDA_FAULT, True
    return Reason.RUNTIME_ERROR, False


def tail(text: str, n: int = 4000) -> str:
    """The last ``n`` characters of ``text``, marked with "..." when cut."""
    return text if len(text) <= n else "..." + text[-n:]
