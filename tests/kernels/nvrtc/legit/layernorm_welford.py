"""Legitimate: Welford LayerNorm. Each thread runs Welford's update over its strided elements; the
(count, mean, M2) triples are merged with Chan's formula through warp shuffles, then across warps in
shared memory. One pass over the data for the statistics, numerically stable on offset data.

The NVRTC twin of tests/kernels/legit/layernorm_welford.py (evokernel.nvrtc): the same variant,
its kernel compiled with NVRTC and launched from Python.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/layernorm_small.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 512;   // tune: 256 512 1024
constexpr int WARPS = BLOCK / 32;

struct Stats { float n, mean, m2; };

// Chan et al.: combine the statistics of two disjoint sets.
__device__ __forceinline__ Stats combine(Stats a, Stats b) {
    const float n = a.n + b.n;
    if (n == 0.0f) return a;
    const float d = b.mean - a.mean, f = b.n / n;
    return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
}

__global__ void ln_welford_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, float* __restrict__ y, long long n,
                                  float eps) {
    __shared__ Stats sh[WARPS];
    __shared__ float mean_sh, rstd_sh;
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    Stats s = {0.0f, 0.0f, 0.0f};
    for (long long i = threadIdx.x; i < n; i += BLOCK) {
        const float v = xr[i];
        s.n += 1.0f;
        const float d = v - s.mean;
        s.mean += d / s.n;
        s.m2 = fmaf(d, v - s.mean, s.m2);
    }
    for (int o = 16; o > 0; o >>= 1) {
        Stats t = {__shfl_down_sync(0xffffffffu, s.n, o), __shfl_down_sync(0xffffffffu, s.mean, o),
                   __shfl_down_sync(0xffffffffu, s.m2, o)};
        s = combine(s, t);
    }
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        Stats t = sh[0];
        for (int k = 1; k < WARPS; ++k) t = combine(t, sh[k]);
        mean_sh = t.mean;
        rstd_sh = 1.0f / sqrtf(t.m2 / t.n + eps);
    }
    __syncthreads();
    const float mean = mean_sh, rstd = rstd_sh;
    for (long long i = threadIdx.x; i < n; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}
"""

kernels = compile_kernels(cuda_src, ["ln_welford_kernel"])
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
        kernels.ln_welford_kernel.launch(x.numel() // n, BLOCK, x, w, b, y, n, float(self.ln.eps))
        return y
