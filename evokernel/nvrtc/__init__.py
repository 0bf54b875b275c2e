"""The NVRTC candidate form: CUDA source compiled at run time with NVRTC, launched from Python.

A candidate of this form is still a KernelBench-style module with ``class ModelNew``; instead
of building a PyTorch extension with ``torch.utils.cpp_extension.load_inline`` (nvcc, the host
compiler and PyTorch's C++ headers: about 30 s of CPU per candidate on the H200), it compiles
its CUDA source with NVRTC in well under a second and launches the kernels on PyTorch's current
stream with tensors' data pointers::

    from evokernel.nvrtc import compile_kernels

    kernels = compile_kernels(cuda_source, ["softmax_row"])

    class ModelNew(nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            kernels.softmax_row.launch(x.shape[0], 256, x, y, x.shape[0], x.shape[1])
            return y

Why NVIDIA's cuda-python (``cuda.core``, ``cuda.bindings``) and not CuPy's ``RawModule``: it
is NVIDIA's own Python API for NVRTC and the driver, already on the GPU image (cuda.core 1.2.0
beside PyTorch 2.11 on the H200), it compiles to a cubin without a GPU or a driver (so the CPU
build step compiles ahead without importing torch), it needs no host compiler and no PyTorch
headers, and ``cuda.core`` launches on any stream that implements ``__cuda_stream__``, which
PyTorch's do. CuPy would add a second GPU array library and memory pool to every worker. The
compile itself goes through ``cuda.bindings.nvrtc`` (evokernel.nvrtc.program: cuda.core's own
command line and the same cubin, without its ~0.5 s import in each build worker); loading and
launching through ``cuda.core``.

What evokernel adds (``compile_kernels``, ``Kernel.launch``): the arch of the GPU in use (never
the candidate's), the build cache keyed like load_inline builds (evokernel.nvrtc.compiler), each
kernel's parameter types read from the compiler, so a launch with the wrong argument count or
types is rejected by name before it reaches the driver (evokernel.nvrtc.signature), and NVRTC's
errors at the kernel file's line. The engine recognizes the form by the call
(evokernel.build.forms) and applies the same gate, timing, anti-cheat and fault isolation.

Importing this package imports neither torch nor cuda.core.
"""
from evokernel.nvrtc.errors import KernelArgumentError, NvrtcCompileError
from evokernel.nvrtc.runtime import Kernel, Kernels, compile_kernels, configure, warm_up

__all__ = ["compile_kernels", "configure", "warm_up", "Kernel", "Kernels", "KernelArgumentError",
           "NvrtcCompileError"]
