# evokernel: best kernel of run best_of_n-s0 for problem layernorm
# candidate 9fd210059d5743b5, generation 1, operator idea; speedup 35.696x over eager (8.0804 ms -> 0.2264 ms, 172% of floor)
# idea: Reshape the normalize kernel's grid so that each thread owns one column group instead of one (row, element) pair: a 1D grid of ceil(N/(4*EW_BLOCK)) blocks (4096 blocks of 256 threads for N=4,194,304), where each thread loads its float4 of weight and bias once into registers, then loops over all rows r (16 here, with mean[r]/rstd[r] staged in shared memory by the block up front, unrolled by 4 rows so 4 independent float4 loads of x are in flight) and writes y with float4 stores (scalar tail path when N % 4 != 0 or pointers are misaligned). Right now blockIdx.y walks rows, and the 32 MB of weight+bias is streamed again for each of the 16 rows while x evicts it from L2, adding about 512 MB of HBM traffic; this layout reads weight/bias only once, so the kernel moves just x in + y out (plus 32 MB), and the wider per-thread work removes the 64-bit grid-stride index math per element.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/best_of_n-s0/best.py
"""LayerNorm, NVRTC form: two-pass statistics per (row, chunk) block, a per-row combine, then a
column-owning normalize + affine kernel. In the normalize kernel each thread owns one float4
column group of the normalized row: it loads weight/bias for it once into registers and then walks
the rows (mean/rstd staged in shared memory per tile of rows, UNROLL rows' x loads in flight), so
weight and bias are read from HBM once instead of once per row. A scalar variant handles
N % 4 != 0 or misaligned pointers."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;    // tune: 64 128 256 512 1024
constexpr int CHUNK = 8192;   // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int UNROLL = 4;     // tune: 1 2 4 8
constexpr int ROW_TILE = 64;  // tune: 16 32 64 128 256

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
__global__ void ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
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
                                  const float* __restrict__ chunk_m2, long long N,
                                  long long nchunks, float eps, float* __restrict__ mean_out,
                                  float* __restrict__ rstd_out) {
    __shared__ float sh[BLOCK];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_reduce_sum(s, sh) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * CHUNK;
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

__device__ __forceinline__ float4 ln_apply4(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = fmaf((v.x - m) * rs, w.x, b.x);
    o.y = fmaf((v.y - m) * rs, w.y, b.y);
    o.z = fmaf((v.z - m) * rs, w.z, b.z);
    o.w = fmaf((v.w - m) * rs, w.w, b.w);
    return o;
}

// Vector path (N % 4 == 0, all pointers 16-byte aligned). Thread g = blockIdx.x*EW_BLOCK + tid
// owns float4 column group g of every row; blockIdx.y selects the row group
// [blockIdx.y*rows_per_group, min(rows, (blockIdx.y+1)*rows_per_group)).
__global__ void ln_normalize_vec4_kernel(const float* __restrict__ x,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd,
                                         const float* __restrict__ weight,
                                         const float* __restrict__ bias, float* __restrict__ y,
                                         long long rows, long long N, long long rows_per_group) {
    __shared__ float s_mean[ROW_TILE];
    __shared__ float s_rstd[ROW_TILE];
    const long long N4 = N >> 2;
    const long long g = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    const bool active = g < N4;
    float4 wv = make_float4(0.f, 0.f, 0.f, 0.f), bv = make_float4(0.f, 0.f, 0.f, 0.f);
    if (active) {
        wv = __ldg(reinterpret_cast<const float4*>(weight) + g);
        bv = __ldg(reinterpret_cast<const float4*>(bias) + g);
    }
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x) + g;
    float4* __restrict__ y4 = reinterpret_cast<float4*>(y) + g;
    const long long r0 = (long long)blockIdx.y * rows_per_group;
    long long r1 = r0 + rows_per_group;
    if (r1 > rows) r1 = rows;
    for (long long rt = r0; rt < r1; rt += ROW_TILE) {
        const int nt = (int)((r1 - rt) < ROW_TILE ? (r1 - rt) : ROW_TILE);
        __syncthreads();
        for (int k = threadIdx.x; k < nt; k += EW_BLOCK) {
            s_mean[k] = mean[rt + k];
            s_rstd[k] = rstd[rt + k];
        }
        __syncthreads();
        if (active) {
            int k = 0;
            for (; k + UNROLL <= nt; k += UNROLL) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = x4[(rt + k + u) * N4];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u)
                    y4[(rt + k + u) * N4] = ln_apply4(v[u], s_mean[k + u], s_rstd[k + u], wv, bv);
            }
            for (; k < nt; ++k) {
                const float4 v = x4[(rt + k) * N4];
                y4[(rt + k) * N4] = ln_apply4(v, s_mean[k], s_rstd[k], wv, bv);
            }
        }
    }
}

// Scalar path (any N, any alignment): same layout with one element per thread.
__global__ void ln_normalize_scalar_kernel(const float* __restrict__ x,
                                           const float* __restrict__ mean,
                                           const float* __restrict__ rstd,
                                           const float* __restrict__ weight,
                                           const float* __restrict__ bias, float* __restrict__ y,
                                           long long rows, long long N,
                                           long long rows_per_group) {
    __shared__ float s_mean[ROW_TILE];
    __shared__ float s_rstd[ROW_TILE];
    const long long g = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    const bool active = g < N;
    float wv = 0.f, bv = 0.f;
    if (active) {
        wv = __ldg(weight + g);
        bv = __ldg(bias + g);
    }
    const float* __restrict__ xg = x + g;
    float* __restrict__ yg = y + g;
    const long long r0 = (long long)blockIdx.y * rows_per_group;
    long long r1 = r0 + rows_per_group;
    if (r1 > rows) r1 = rows;
    for (long long rt = r0; rt < r1; rt += ROW_TILE) {
        const int nt = (int)((r1 - rt) < ROW_TILE ? (r1 - rt) : ROW_TILE);
        __syncthreads();
        for (int k = threadIdx.x; k < nt; k += EW_BLOCK) {
            s_mean[k] = mean[rt + k];
            s_rstd[k] = rstd[rt + k];
        }
        __syncthreads();
        if (active) {
            int k = 0;
            for (; k + UNROLL <= nt; k += UNROLL) {
                float v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = xg[(rt + k + u) * N];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u)
                    yg[(rt + k + u) * N] = fmaf((v[u] - s_mean[k + u]) * s_rstd[k + u], wv, bv);
            }
            for (; k < nt; ++k) {
                const float v = xg[(rt + k) * N];
                yg[(rt + k) * N] = fmaf((v - s_mean[k]) * s_rstd[k], wv, bv);
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_combine_kernel",
                                     "ln_normalize_vec4_kernel", "ln_normalize_scalar_kernel"])
BLOCK, CHUNK, EW_BLOCK = (kernels.constant(n) for n in ("BLOCK", "CHUNK", "EW_BLOCK"))

_SM_COUNT = {}


def _sm_count(device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.ln.weight, self.ln.bias
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() >= w.dim()
                and tuple(x.shape[x.dim() - w.dim():]) == tuple(w.shape)):
            raise ValueError("layernorm: x must be a float32 CUDA tensor whose trailing dims "
                             "are normalized_shape")
        if w.dtype != torch.float32 or b.dtype != torch.float32:
            raise ValueError("layernorm: weight and bias must be float32")
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        y = torch.empty_like(x)
        n = w.numel()
        if x.numel() == 0:
            return y
        rows = x.numel() // n
        nchunks = (n + CHUNK - 1) // CHUNK
        if rows * nchunks >= 1 << 31:
            raise ValueError("layernorm: too many (row, chunk) blocks")
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, chunk_sum,
                                             chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)

        vec = (n % 4 == 0) and all(t.data_ptr() % 16 == 0 for t in (x, y, w, b))
        cols = n // 4 if vec else n
        col_blocks = (cols + EW_BLOCK - 1) // EW_BLOCK
        if col_blocks >= 1 << 31:
            raise ValueError("layernorm: normalized size too large")
        # Split rows into groups only when the column blocks alone cannot fill the GPU.
        target_blocks = _sm_count(x.device) * 16
        want_groups = max(1, (target_blocks + col_blocks - 1) // col_blocks)
        row_groups = max(1, min(rows, want_groups, 65535))
        rows_per_group = (rows + row_groups - 1) // row_groups
        row_groups = (rows + rows_per_group - 1) // rows_per_group
        if row_groups > 65535:
            raise ValueError("layernorm: too many row groups")
        kern = kernels.ln_normalize_vec4_kernel if vec else kernels.ln_normalize_scalar_kernel
        kern.launch((col_blocks, row_groups), EW_BLOCK, x, mean, rstd, w, b, y, rows, n,
                    rows_per_group)
        return y
