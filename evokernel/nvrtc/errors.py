"""The errors of the NVRTC candidate form. A candidate that raises one is rejected with a named
reason (the worker's Load stage: Reason.BUILD_ERROR for a compile error; the gate: RUNTIME_ERROR
for a bad launch); none of them leaves the CUDA context unusable."""
from __future__ import annotations

from evokernel.errors import EvokernelError


class NvrtcCompileError(EvokernelError):
    """NVRTC rejected a candidate's CUDA source, or the call to ``compile_kernels`` was bad
    (an unknown option, a kernel name that is not a ``__global__`` function of the source).

    Attributes:
        log: NVRTC's compilation log (or what was wrong with the call).
        errors: the errors as "LINE: error: message" lines, LINE being the line of the CUDA
            source (1-based); evokernel.nvrtc.compiler.locate maps them to the kernel file's.
        source: the CUDA source that was compiled.
    """

    def __init__(self, message: str, *, log: str = "", errors: tuple[str, ...] = (),
                 source: str = ""):
        super().__init__(message)
        self.log, self.errors, self.source = log, tuple(errors), source


class KernelArgumentError(EvokernelError, TypeError):
    """A launch's arguments or configuration do not fit the kernel (count, types, a tensor not on
    the GPU, a grid or block of the wrong shape). Raised before the driver is called."""
