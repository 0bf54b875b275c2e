"""Legitimate: vectorized elementwise sigmoid, 1 / (1 + expf(-x)) in FP32, with 16-byte float4
loads and stores in a grid-stride loop, a scalar kernel for a tail that is not a multiple of 4,
and a scalar grid-stride fallback when the data pointer is not 16-byte aligned.

EXPECTED: accept ok
PROBLEM: tests/kernels/suite/problems/sigmoid.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor sigmoid_vec4(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;  // tune: 128 256 512

__device__ __forceinline__ float op(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void sigmoid_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                 int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * BLOCK) {
        float4 v = x[i];
        v.x = op(v.x);
        v.y = op(v.y);
        v.z = op(v.z);
        v.w = op(v.w);
        y[i] = v;
    }
}

__global__ void sigmoid_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t start, int64_t n) {
    for (int64_t i = start + (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * BLOCK) {
        y[i] = op(x[i]);
    }
}

torch::Tensor sigmoid_vec4(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "sigmoid_vec4: float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return y;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    auto stream = at::cuda::getCurrentCUDAStream();
    const bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        sigmoid_vec4_kernel<<<(unsigned)std::min<int64_t>((n4 + BLOCK - 1) / BLOCK, 8192), BLOCK, 0,
                           stream>>>(reinterpret_cast<const float4*>(xp),
                                     reinterpret_cast<float4*>(yp), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    const int64_t rest = n - n4 * 4;
    if (rest > 0) {
        sigmoid_scalar_kernel<<<(unsigned)std::min<int64_t>((rest + BLOCK - 1) / BLOCK, 8192),
            BLOCK, 0,
                             stream>>>(xp, yp, n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

module = load_inline(name="suite_sigmoid_float4", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["sigmoid_vec4"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.sigmoid_vec4(x)
