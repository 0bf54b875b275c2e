"""Cheat 9, near-zero output: the softmax outputs here average 3e-5 and stay below ~2e-3, so zeros
pass KernelBench's check (atol = rtol = 1e-2) everywhere. The gate measures errors relative to
PyTorch's own (a norm-wise ratio ~1e7) and rejects a constant output where the truth is not.

The NVRTC twin of tests/kernels/cheats/near_zero_zeros.py: here an NVRTC kernel of its own
writes the zeros (the load_inline fixture returns torch.zeros_like), so it is the gate, not the
missing kernel, that rejects it.

EXPECTED: reject constant_output
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
__global__ void fill_zero_kernel(float* __restrict__ y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = 0.0f;                                // the cheat
}
"""

kernels = compile_kernels(cuda_src, ["fill_zero_kernel"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.fill_zero_kernel.launch(1024, 256, y, y.numel())
        return y
