"""Cheat 10, unstable algorithm: one-pass LayerNorm statistics, var = E[x^2] - E[x]^2 (clamped at
0, as real kernels do), from per-thread sums reduced with warp shuffles. FP32 throughout and fine
on N(0, 1) inputs, but on the offset distribution (mean 1000, std 0.1) E[x^2] ~ 1e6 loses the
variance (0.01) to cancellation. The gate names the distribution it fails on.

The NVRTC twin of tests/kernels/cheats/unstable_layernorm_one_pass.py (evokernel.nvrtc): the
same cheat, its kernel compiled with NVRTC and launched from Python.

EXPECTED: reject unstable_distribution
PROBLEM: tests/kernels/problems/layernorm_small.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
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
                                   long long n, float eps) {
    __shared__ float sh[32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float s = 0.0f, q = 0.0f;
    for (long long i = threadIdx.x; i < n; i += BLOCK) {
        const float v = xr[i];
        s += v;
        q = fmaf(v, v, q);
    }
    const float mean = block_sum(s, sh) / (float)n;
    const float var = fmaxf(block_sum(q, sh) / (float)n - mean * mean, 0.0f);  // the flaw
    const float rstd = 1.0f / sqrtf(var + eps);
    for (long long i = threadIdx.x; i < n; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}
"""

kernels = compile_kernels(cuda_src, ["ln_one_pass_kernel"])
BLOCK = kernels.constant("BLOCK")


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32):
            raise ValueError("layernorm: x must be float32 CUDA")
        x, w, b = x.contiguous(), self.ln.weight.contiguous(), self.ln.bias.contiguous()
        n = w.numel()
        if not (n > 0 and x.numel() % n == 0 and b.numel() == n):
            raise ValueError("layernorm: bad shapes")
        y = torch.empty_like(x)
        kernels.ln_one_pass_kernel.launch(x.numel() // n, BLOCK, x, w, b, y, n, float(self.ln.eps))
        return y
