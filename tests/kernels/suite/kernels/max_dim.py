"""Legitimate: row maxima in FP32, one block per row: per-thread running maxima (float4 loads when
the rows are 16-byte aligned, scalar loads otherwise), a warp-shuffle tree and one warp over the
per-warp maxima. NaN propagates (a row holding NaN gives NaN, like torch.amax); an empty row is
an error, as in torch.amax.

EXPECTED: accept ok
PROBLEM: tests/kernels/suite/problems/max_dim.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor amax_rows(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;  // tune: 128 256 512

// The larger of a and b; NaN wins over everything.
__device__ __forceinline__ float nan_max(float a, float b) {
    return (a != a || a > b) ? a : b;
}

// Warp-shuffle tree, then one warp over the per-warp maxima; thread 0 gets the result.
__device__ float block_max(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = -INFINITY;
    if (warp == 0) {
        v = lane < (BLOCK >> 5) ? sh[lane] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_down_sync(0xffffffffu, v, o));
    }
    return v;
}

// One block per row; vec4 is set only when the base is 16-byte aligned and cols % 4 == 0.
__global__ void amax_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                 int64_t cols, bool vec4) {
    __shared__ float sh[BLOCK / 32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float m = -INFINITY;
    if (vec4) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = cols / 4;
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) {
            const float4 v = xv[i];
            m = nan_max(m, nan_max(nan_max(v.x, v.y), nan_max(v.z, v.w)));
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = nan_max(m, xr[i]);
    }
    const float r = block_max(m, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = r;
}

torch::Tensor amax_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2,
                "amax_rows: x must be a 2D float32 CUDA tensor");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    TORCH_CHECK(cols > 0, "amax_rows: cannot reduce over an empty dimension");
    TORCH_CHECK(rows <= 0x7fffffff, "amax_rows: too many rows");
    auto y = torch::empty({rows}, x.options());
    if (rows == 0) return y;
    const float* xp = x.data_ptr<float>();
    const bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
    amax_rows_kernel<<<(unsigned)rows, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, y.data_ptr<float>(), cols, vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="suite_max_dim_rows", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["amax_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.amax_rows(x)
