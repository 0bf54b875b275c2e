"""Legitimate: row means in FP32, one block per row: per-thread partial sums (float4 loads when the
rows are 16-byte aligned, scalar loads otherwise), a warp-shuffle tree and one warp over the
per-warp sums, then an exact division by the row length (an empty row gives NaN, like torch.mean).

EXPECTED: accept ok
PROBLEM: tests/kernels/suite/problems/mean_dim.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor mean_rows(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;  // tune: 128 256 512

// Warp-shuffle tree, then one warp over the per-warp sums; thread 0 gets the total.
__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < (BLOCK >> 5) ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;
}

// One block per row; vec4 is set only when the base is 16-byte aligned and cols % 4 == 0.
__global__ void mean_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                 int64_t cols, bool vec4) {
    __shared__ float sh[BLOCK / 32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    if (vec4) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = cols / 4;
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) {
            const float4 v = xv[i];
            s += (v.x + v.y) + (v.z + v.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += xr[i];
    }
    const float total = block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = total / (float)cols;
}

torch::Tensor mean_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2,
                "mean_rows: x must be a 2D float32 CUDA tensor");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    TORCH_CHECK(rows <= 0x7fffffff, "mean_rows: too many rows");
    auto y = torch::empty({rows}, x.options());
    if (rows == 0) return y;
    const float* xp = x.data_ptr<float>();
    const bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
    mean_rows_kernel<<<(unsigned)rows, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, y.data_ptr<float>(), cols, vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="suite_mean_dim_rows", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["mean_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.mean_rows(x)
