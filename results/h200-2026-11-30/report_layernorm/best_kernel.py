# evokernel: best kernel of run run_layernorm for problem layernorm
# candidate 6ed72fe272f14258, generation 3, operator tune; speedup 16.112x over eager (8.3555 ms -> 0.5186 ms, 369% of floor)
# idea: tune BLOCK=128, CHUNK=2048
# check it: evokernel check layernorm best_kernel.py
"""Seed kernel for layernorm: two-pass statistics per (row, chunk) block, a per-row combine, then
an elementwise normalize + affine kernel."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, "
           "torch::Tensor bias, double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>

constexpr int BLOCK = 128;    // tune: 64 128 256 512 1024
constexpr int CHUNK = 2048;   // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 128; // tune: 128 256 512 1024
// Tree reduction in shared memory over all BLOCK threads (any BLOCK >= 1); every thread gets
// the result. `sh` holds BLOCK floats.
__device__ float block_reduce_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// Two passes over the chunk: its sum, then sum((x - chunk_mean)^2) (stable on offset data).
__global__ void ln_chunk_stats_kernel(const float* __restrict__ x, int64_t N, int64_t nchunks,
                                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK];
    const int64_t b = blockIdx.x;
    const int64_t r = b / nchunks, c = b % nchunks;
    const int64_t start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK) s += xc[i];
    const float sum = block_reduce_sum(s, sh);
    const float mean = sum / (float)n;
    float q = 0.0f;
    for (int i = threadIdx.x; i < n; i += BLOCK) {
        const float d = xc[i] - mean;
        q = fmaf(d, d, q);
    }
    const float m2 = block_reduce_sum(q, sh);
    if (threadIdx.x == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

// One block per row. mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2]
// (exact decomposition of sum((x - mean)^2)); rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void ln_combine_kernel(const float* __restrict__ chunk_sum,
                                  const float* __restrict__ chunk_m2, int64_t N, int64_t nchunks,
                                  float eps, float* __restrict__ mean_out,
                                  float* __restrict__ rstd_out) {
    __shared__ float sh[BLOCK];
    const int64_t r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_reduce_sum(s, sh) / (float)N;
    float q = 0.0f;
    for (int64_t c = threadIdx.x; c < nchunks; c += BLOCK) {
        const int64_t rest = N - c * CHUNK;
        const float n_c = (float)(rest < CHUNK ? rest : CHUNK);
        const float d = cs[c] / n_c - mean;
        q += cm[c] + n_c * d * d;
    }
    const float m2 = block_reduce_sum(q, sh);
    if (threadIdx.x == 0) {
        const float var = m2 / (float)N;
        mean_out[r] = mean;
        rstd_out[r] = 1.0f / sqrtf(var + eps);
    }
}

// y = (x - mean[r]) * rstd[r] * weight[i] + bias[i], for row r and flat index i within the row.
// 2D grid: y over rows, x over the row; grid-stride loops in both, so any grid size is correct.
__global__ void ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                    const float* __restrict__ rstd,
                                    const float* __restrict__ weight,
                                    const float* __restrict__ bias, float* __restrict__ y,
                                    int64_t rows, int64_t N) {
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const float m = mean[r], rs = rstd[r];
        const float* xr = x + r * N;
        float* yr = y + r * N;
        for (int64_t i = (int64_t)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
             i += (int64_t)gridDim.x * EW_BLOCK) {
            yr[i] = (xr[i] - m) * rs * weight[i] + bias[i];
        }
    }
}

torch::Tensor layernorm_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                             double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "layernorm_cuda: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                bias.scalar_type() == at::kFloat, "layernorm_cuda: tensors must be float32");
    TORCH_CHECK(weight.sizes() == bias.sizes(), "layernorm_cuda: weight and bias shapes differ");
    TORCH_CHECK(x.dim() >= weight.dim(), "layernorm_cuda: x has fewer dims than normalized_shape");
    const int64_t off = x.dim() - weight.dim();
    for (int64_t d = 0; d < weight.dim(); ++d)
        TORCH_CHECK(x.size(off + d) == weight.size(d),
                    "layernorm_cuda: trailing dims of x must equal normalized_shape");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    auto y = torch::empty_like(x);
    const int64_t N = weight.numel();
    if (x.numel() == 0) return y;
    TORCH_CHECK(N > 0, "layernorm_cuda: empty normalized_shape");
    const int64_t rows = x.numel() / N;
    const int64_t nchunks = (N + CHUNK - 1) / CHUNK;
    TORCH_CHECK(rows * nchunks < (1LL << 31), "layernorm_cuda: too many (row, chunk) blocks");

    auto fopts = x.options();
    auto chunk_sum = torch::empty({rows * nchunks}, fopts);
    auto chunk_m2 = torch::empty({rows * nchunks}, fopts);
    auto mean = torch::empty({rows}, fopts);
    auto rstd = torch::empty({rows}, fopts);
    auto stream = at::cuda::getCurrentCUDAStream();

    ln_chunk_stats_kernel<<<(unsigned)(rows * nchunks), BLOCK, 0, stream>>>(
        x.data_ptr<float>(), N, nchunks, chunk_sum.data_ptr<float>(), chunk_m2.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    ln_combine_kernel<<<(unsigned)rows, BLOCK, 0, stream>>>(
        chunk_sum.data_ptr<float>(), chunk_m2.data_ptr<float>(), N, nchunks, (float)eps,
        mean.data_ptr<float>(), rstd.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const dim3 ew_grid((unsigned)std::min<int64_t>((N + EW_BLOCK - 1) / EW_BLOCK, 1LL << 30),
                       (unsigned)std::min<int64_t>(rows, 65535));
    ln_normalize_kernel<<<ew_grid, EW_BLOCK, 0, stream>>>(
        x.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
        weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(
    name="layernorm_seed",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["layernorm_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.layernorm_cuda(x, self.ln.weight, self.ln.bias, self.ln.eps)
