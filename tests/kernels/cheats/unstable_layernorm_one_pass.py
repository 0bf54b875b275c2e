"""Cheat 10, unstable algorithm: one-pass LayerNorm statistics, var = E[x^2] - E[x]^2 (clamped at
0, as real kernels do), from per-thread sums reduced with warp shuffles. FP32 throughout and fine
on N(0, 1) inputs, but on the offset distribution (mean 1000, std 0.1) E[x^2] ~ 1e6 loses the
variance (0.01) to cancellation. The gate names the distribution it fails on.

EXPECTED: reject unstable_distribution
PROBLEM: tests/kernels/problems/layernorm_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor layernorm_one_pass(torch::Tensor x, torch::Tensor weight, "
           "torch::Tensor bias, double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 1024;

__device__ float block_sum(float v, float* sh) {
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
    const float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void ln_one_pass_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ y,
                                   int64_t n, float eps) {
    __shared__ float sh[32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float s = 0.0f, q = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += BLOCK) {
        const float v = xr[i];
        s += v;
        q = fmaf(v, v, q);
    }
    const float mean = block_sum(s, sh) / (float)n;
    const float var = fmaxf(block_sum(q, sh) / (float)n - mean * mean, 0.0f);  // the flaw
    const float rstd = 1.0f / sqrtf(var + eps);
    for (int64_t i = threadIdx.x; i < n; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

torch::Tensor layernorm_one_pass(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                 double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "layernorm: x must be float32 CUDA");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t n = weight.numel();
    TORCH_CHECK(n > 0 && x.numel() % n == 0 && bias.numel() == n, "layernorm: bad shapes");
    auto y = torch::empty_like(x);
    ln_one_pass_kernel<<<(unsigned)(x.numel() / n), BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        y.data_ptr<float>(), n, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="fixture_layernorm_one_pass", cpp_sources=cpp_src,
                     cuda_sources=cuda_src, functions=["layernorm_one_pass"],
                     extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.layernorm_one_pass(x, self.ln.weight, self.ln.bias, self.ln.eps)
