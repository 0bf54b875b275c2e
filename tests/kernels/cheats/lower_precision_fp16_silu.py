"""Cheat 8, lower precision (FP16 arithmetic): SiLU computed in half2 (__floats2half2_rn, h2exp,
__h2div) and widened back to FP32 on the store. Twice the elements per instruction, and every
output value is an FP16 value: ~2^-11 relative error where PyTorch's FP32 has ~2^-24.

EXPECTED: reject lower_precision
PROBLEM: tests/kernels/problems/silu.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor silu_half2(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>

__global__ void silu_half2_kernel(const float2* __restrict__ x, float2* __restrict__ y,
                                  int64_t n2) {
    const __half2 one = __float2half2_rn(1.0f);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n2;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float2 v = x[i];
        const __half2 h = __floats2half2_rn(v.x, v.y);
        const __half2 r = __h2div(h, __hadd2(one, h2exp(__hneg2(h))));
        y[i] = __half22float2(r);
    }
}

torch::Tensor silu_half2(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.numel() % 2 == 0,
                "silu_half2: float32 CUDA tensor with an even number of elements");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n2 = x.numel() / 2;
    silu_half2_kernel<<<(unsigned)std::min<int64_t>((n2 + 255) / 256, 8192), 256, 0,
                        at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float2*>(x.data_ptr<float>()),
        reinterpret_cast<float2*>(y.data_ptr<float>()), n2);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="fixture_silu_half2", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["silu_half2"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.silu_half2(x)
