"""Cheat 8, lower precision (FP16 arithmetic): SiLU computed in half2 (__floats2half2_rn, h2exp,
__h2div) and widened back to FP32 on the store. Twice the elements per instruction, and every
output value is an FP16 value: ~2^-11 relative error where PyTorch's FP32 has ~2^-24.

The NVRTC twin of tests/kernels/cheats/lower_precision_fp16_silu.py (evokernel.nvrtc): the same
cheat, its kernel compiled with NVRTC (<cuda_fp16.h> from the toolkit) and launched from Python.

EXPECTED: reject lower_precision
PROBLEM: tests/kernels/problems/silu.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
#include <cuda_fp16.h>

__global__ void silu_half2_kernel(const float2* __restrict__ x, float2* __restrict__ y,
                                  long long n2) {
    const __half2 one = __float2half2_rn(1.0f);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n2;
         i += (long long)gridDim.x * blockDim.x) {
        const float2 v = x[i];
        const __half2 h = __floats2half2_rn(v.x, v.y);
        const __half2 r = __h2div(h, __hadd2(one, h2exp(__hneg2(h))));
        y[i] = __half22float2(r);
    }
}
"""

kernels = compile_kernels(cuda_src, ["silu_half2_kernel"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.numel() % 2 == 0):
            raise ValueError("silu_half2: float32 CUDA tensor with an even number of elements")
        x = x.contiguous()
        y = torch.empty_like(x)
        n2 = x.numel() // 2
        kernels.silu_half2_kernel.launch(min((n2 + 255) // 256, 8192), 256, x, y, n2)
        return y
