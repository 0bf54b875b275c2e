"""Legitimate: online softmax (running max and rescaled running sum in one pass over the row, as in
FlashAttention), merged across a warp with shuffles and across warps in shared memory, then a
second pass that writes. A different order and grouping of the FP32 sums than PyTorch's.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor softmax_online(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cmath>

constexpr int BLOCK = 512;  // tune: 128 256 512 1024
constexpr int WARPS = BLOCK / 32;

// Merge two (max, sum of exp(x - max)) pairs.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    const float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__global__ void softmax_online_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      int64_t cols) {
    __shared__ float shm[WARPS], shs[WARPS];
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY, s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) {
        const float v = xr[i];
        if (v > m) {
            s = (m == -INFINITY ? 0.0f : s * expf(m - v)) + 1.0f;
            m = v;
        } else {
            s += expf(v - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { shm[warp] = m; shs[warp] = s; }
    __syncthreads();
    m = shm[0];
    s = shs[0];
    for (int w = 1; w < WARPS; ++w) merge(m, s, shm[w], shs[w]);
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
}

torch::Tensor softmax_online(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2,
                "softmax_online: x must be a 2D float32 CUDA tensor");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    if (x.numel() == 0) return y;
    softmax_online_kernel<<<(unsigned)x.size(0), BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="fixture_softmax_online_warp", cpp_sources=cpp_src,
                     cuda_sources=cuda_src, functions=["softmax_online"],
                     extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.softmax_online(x)
