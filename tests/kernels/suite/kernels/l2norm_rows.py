"""Legitimate: row L2 normalization in FP32, one block per row: pass 1 sums the squares (fmaf
into per-thread float partials, float4 loads when the rows are 16-byte aligned) with a
warp-shuffle tree that gives every thread the total; pass 2 divides each element by sqrtf of it
(exact division; an all-zero row gives NaN, like x / torch.norm(x)).

EXPECTED: accept ok
PROBLEM: tests/kernels/suite/problems/l2norm_rows.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor l2norm_rows(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 512;  // tune: 256 512 1024

// Warp-shuffle tree, then one warp over the per-warp sums; every thread gets the total.
__device__ float block_sum_all(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (BLOCK >> 5) ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// One block per row; vec4 is set only when both bases are 16-byte aligned and cols % 4 == 0.
__global__ void l2norm_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t cols, bool vec4) {
    __shared__ float sh[BLOCK / 32];
    const float* xr = x + (int64_t)blockIdx.x * cols;
    float* yr = y + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    if (vec4) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = cols / 4;
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) {
            const float4 v = xv[i];
            s = fmaf(v.x, v.x, s);
            s = fmaf(v.y, v.y, s);
            s = fmaf(v.z, v.z, s);
            s = fmaf(v.w, v.w, s);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s = fmaf(xr[i], xr[i], s);
    }
    const float norm = sqrtf(block_sum_all(s, sh));
    if (vec4) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        float4* yv = reinterpret_cast<float4*>(yr);
        const int64_t n4 = cols / 4;
        for (int64_t i = threadIdx.x; i < n4; i += BLOCK) {
            float4 v = xv[i];
            v.x = v.x / norm;
            v.y = v.y / norm;
            v.z = v.z / norm;
            v.w = v.w / norm;
            yv[i] = v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = xr[i] / norm;
    }
}

torch::Tensor l2norm_rows(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2,
                "l2norm_rows: x must be a 2D float32 CUDA tensor");
    x = x.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    TORCH_CHECK(rows <= 0x7fffffff, "l2norm_rows: too many rows");
    auto y = torch::empty_like(x);
    if (rows == 0 || cols == 0) return y;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(yp) % 16 == 0;
    l2norm_rows_kernel<<<(unsigned)rows, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        xp, yp, cols, vec4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="suite_l2norm_rows", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["l2norm_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.l2norm_rows(x)
