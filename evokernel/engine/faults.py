"""What a fault of candidate code means for the worker: the reason it names and whether the CUDA
context survives it."""
from __future__ import annotations

import traceback

from evokernel.gate.run import error_text, is_launch_error, is_sticky
from evokernel.nvrtc.compiler import locate
from evokernel.nvrtc.errors import NvrtcCompileError
from evokernel.records import Reason


def classify_exception(exc: BaseException) -> tuple[Reason, bool]:
    """Map an exception raised by candidate code to (reason, fatal).

    fatal is True for sticky CUDA errors (gate_run.STICKY_ERRORS), after which this process must
    not run anything else. Only the first line of a message is read: PyTorch appends advice
    mentioning "device-side assertions" to every CUDA error. A launch-configuration error (too
    much shared memory, a bad grid: gate_run.LAUNCH_ERRORS) leaves the context usable. An NVRTC
    compile error (evokernel.nvrtc) is BUILD_ERROR.
    """
    import torch
    if isinstance(exc, NvrtcCompileError):               # evokernel.nvrtc: NVRTC refused it
        return Reason.BUILD_ERROR, False
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


def load_detail(exc: BaseException, source: str) -> str:
    """The detail of a candidate whose import or constructor raised ``exc``: its type and
    message; for an NVRTC compile error, also its errors at the lines of the kernel file
    ``source`` ("line 57: error: ...", evokernel.nvrtc.compiler.locate). At most 2000
    characters."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, NvrtcCompileError) and exc.errors:
        text += "; at the kernel file's " + "; ".join(
            f"line {e}" for e in locate(exc.errors, exc.source, source)[:8])
    return text[:2000]


def load_log(exc: BaseException) -> str:
    """The log of a candidate whose import or constructor raised ``exc``: NVRTC's log for an
    NVRTC compile error, then the traceback; its tail (``tail``)."""
    head = exc.log + "\n" if isinstance(exc, NvrtcCompileError) and exc.log else ""
    return tail(head + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
