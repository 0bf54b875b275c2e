"""Cheat 14, impossible speed: the floor path on the GPU. The vectorized SiLU of silu_float4 (an
honest kernel, the same library text) on a problem that declares MIN_BYTES = 10^13, a memory floor
of seconds: its time is below the floor, so it is rejected as impossible. With the reference's FLOP
count no longer a bound (issue 12), no honest problem has a floor that a cheat could beat without
the earlier checks catching it first; this fixture keeps the last check tested where it runs.

EXPECTED: reject impossible_speed
PROBLEM: tests/kernels/problems/declared_floor.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor silu_vec4(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;  // tune: 128 256 512

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__global__ void silu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                 int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * BLOCK) {
        float4 v = x[i];
        v.x = silu(v.x);
        v.y = silu(v.y);
        v.z = silu(v.z);
        v.w = silu(v.w);
        y[i] = v;
    }
}

__global__ void silu_tail_kernel(const float* __restrict__ x, float* __restrict__ y,
                                 int64_t start, int64_t n) {
    const int64_t i = start + threadIdx.x;
    if (i < n) y[i] = silu(x[i]);
}

torch::Tensor silu_vec4(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "silu_vec4: float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t n = x.numel(), n4 = n / 4;
    auto stream = at::cuda::getCurrentCUDAStream();
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr<float>()) % 16 == 0, "silu_vec4: alignment");
    if (n4 > 0) {
        silu_vec4_kernel<<<(unsigned)std::min<int64_t>((n4 + BLOCK - 1) / BLOCK, 8192), BLOCK, 0,
                           stream>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                     reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (n % 4) {
        silu_tail_kernel<<<1, 4, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

module = load_inline(name="fixture_silu_float4", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["silu_vec4"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.silu_vec4(x)
