# evokernel: best kernel of run layernorm for problem layernorm
# candidate d96df0c49265975d, generation 1, operator idea; speedup 37.583x over eager (8.0812 ms -> 0.2150 ms, 167% of floor)
# idea: [memory] Make ln_chunk_stats_kernel read x only once by holding the whole chunk in registers: BLOCK=256 threads each load CHUNK/(4*BLOCK) float4 values (8 for CHUNK=8192) with __ldcg into a register array, then compute the sum and sum((x-mean_c)^2) from those registers with warp-shuffle plus 8-slot shared-memory reductions. Make the normalize pass walk the rows and chunks in reverse of the stats pass (last row first, last column block first) so that the ~50 MiB of x still in the 60 MiB L2 is hit instead of re-fetched from HBM. Cutting the stats pass from 2x256 MiB of L1/L2 traffic to one coalesced 128-bit stream and turning ~20% of the normalize reads into L2 hits should save roughly 30-40 us on top of the normalize rewrite.
# check it: evokernel check layernorm results/h200-2026-12-02-s11/frontier/layernorm/best.py
"""LayerNorm, NVRTC form, three kernels:
1. ln_stats_*: block (chunk c, row r) in chunk-major launch order. Each of its SBLOCK threads loads
   SV4 float4 of the chunk once (__ldcg) into registers. It then computes the chunk sum and
   sum((x - chunk_mean)^2) from the registers (warp-shuffle + per-warp shared slots), so it is
   still two-pass and stable on offset data.
2. ln_combine_kernel: per row, exact merge of the chunk (sum, M2) pairs -> mean, rstd.
3. ln_normalize_*: one block per column tile, launched last tile first. Weight/bias sit in
   registers while the block walks all rows, last row first. The first tiles it reads are the
   chunks the stats pass read last (still in L2). Its loads and stores are marked evict-first, so
   the stream does not push those lines out of L2."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int SBLOCK = 512;     // tune: 128 256 512 1024
constexpr int SV4 = 8;          // tune: 2 4 8 16
constexpr int CHUNK = SBLOCK * SV4 * 4;
constexpr int CBLOCK = 256;     // tune: 64 128 256 512 1024
constexpr int EW_BLOCK = 256;   // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4;   // tune: 1 2 4 8

// Block-wide sum for NT threads (NT a multiple of 32): warp shuffle, then every thread sums the
// NT/32 per-warp partials in shared memory (same order everywhere, so all threads agree).
// `sh` holds NT/32 floats and must not be reused by the caller without a barrier.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = 0.0f;
#pragma unroll
    for (int w = 0; w < NT / 32; ++w) r += sh[w];
    return r;
}

// Block b -> chunk c = b / rows, row r = b % rows (chunk-major, so the last chunks of every row
// are the last data read and are what stays in L2 for the normalize pass).
template <bool VEC>
__device__ __forceinline__ void stats_impl(const float* __restrict__ x, long long N,
                                           long long rows, long long nchunks,
                                           float* __restrict__ chunk_sum,
                                           float* __restrict__ chunk_m2, float* sh_s,
                                           float* sh_q) {
    const long long b = blockIdx.x;
    const long long c = b / rows;
    const long long r = b - c * rows;
    const long long start = c * (long long)CHUNK;
    const int n = (N - start < (long long)CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const int tid = threadIdx.x;

    float v[SV4][4];
#pragma unroll
    for (int k = 0; k < SV4; ++k) {
        const int e = (k * SBLOCK + tid) * 4;
        if (VEC) {
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (e < n) t = __ldcg(reinterpret_cast<const float4*>(xc + e));
            v[k][0] = t.x; v[k][1] = t.y; v[k][2] = t.z; v[k][3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[k][j] = (e + j < n) ? __ldcg(xc + e + j) : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < SV4; ++k) s += (v[k][0] + v[k][1]) + (v[k][2] + v[k][3]);
    const float sum = block_sum<SBLOCK>(s, sh_s);
    const float mean = sum / (float)n;

    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < SV4; ++k) {
        const int e = (k * SBLOCK + tid) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (e + j < n) {
                const float d = v[k][j] - mean;
                q = fmaf(d, d, q);
            }
        }
    }
    const float m2 = block_sum<SBLOCK>(q, sh_q);
    if (tid == 0) {
        chunk_sum[r * nchunks + c] = sum;
        chunk_m2[r * nchunks + c] = m2;
    }
}

__global__ void __launch_bounds__(SBLOCK)
ln_stats_vec(const float* __restrict__ x, long long N, long long rows, long long nchunks,
             float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh_s[SBLOCK / 32];
    __shared__ float sh_q[SBLOCK / 32];
    stats_impl<true>(x, N, rows, nchunks, chunk_sum, chunk_m2, sh_s, sh_q);
}

__global__ void __launch_bounds__(SBLOCK)
ln_stats_scalar(const float* __restrict__ x, long long N, long long rows, long long nchunks,
                float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh_s[SBLOCK / 32];
    __shared__ float sh_q[SBLOCK / 32];
    stats_impl<false>(x, N, rows, nchunks, chunk_sum, chunk_m2, sh_s, sh_q);
}

// One block per row. mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2]
// (exact decomposition of sum((x - mean)^2)); rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void __launch_bounds__(CBLOCK)
ln_combine_kernel(const float* __restrict__ chunk_sum, const float* __restrict__ chunk_m2,
                  long long N, long long nchunks, float eps, float* __restrict__ mean_out,
                  float* __restrict__ rstd_out) {
    __shared__ float sh_s[CBLOCK / 32];
    __shared__ float sh_q[CBLOCK / 32];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += CBLOCK) s += cs[c];
    const float mean = block_sum<CBLOCK>(s, sh_s) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += CBLOCK) {
        const long long rest = N - c * (long long)CHUNK;
        const float n_c = (float)(rest < (long long)CHUNK ? rest : (long long)CHUNK);
        const float d = cs[c] / n_c - mean;
        q += cm[c] + n_c * d * d;
    }
    const float m2 = block_sum<CBLOCK>(q, sh_q);
    if (threadIdx.x == 0) {
        const float var = m2 / (float)N;
        mean_out[r] = mean;
        rstd_out[r] = 1.0f / sqrtf(var + eps);
    }
}

// Block b handles column tile t = gridDim.x - 1 - b (last tile first): columns
// [t*EW_BLOCK*4, (t+1)*EW_BLOCK*4), 4 consecutive columns per thread, for every row from the
// last to the first. weight/bias are loaded once into registers and reused for all rows.
template <bool VEC>
__device__ __forceinline__ void normalize_impl(const float* __restrict__ x,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ rstd,
                                               const float* __restrict__ w,
                                               const float* __restrict__ bias,
                                               float* __restrict__ y, long long rows,
                                               long long N) {
    const long long t = (long long)gridDim.x - 1 - (long long)blockIdx.x;
    const long long e = (t * EW_BLOCK + threadIdx.x) * 4;
    if (e >= N) return;

    float wv[4], bv[4];
    if (VEC) {
        const float4 a = __ldcs(reinterpret_cast<const float4*>(w + e));
        const float4 c = __ldcs(reinterpret_cast<const float4*>(bias + e));
        wv[0] = a.x; wv[1] = a.y; wv[2] = a.z; wv[3] = a.w;
        bv[0] = c.x; bv[1] = c.y; bv[2] = c.z; bv[3] = c.w;
    } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            wv[j] = (e + j < N) ? __ldcs(w + e + j) : 0.0f;
            bv[j] = (e + j < N) ? __ldcs(bias + e + j) : 0.0f;
        }
    }

    for (long long r0 = rows - 1; r0 >= 0; r0 -= ROW_UNROLL) {
        float xv[ROW_UNROLL][4];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const long long r = r0 - u;
#pragma unroll
            for (int j = 0; j < 4; ++j) xv[u][j] = 0.0f;
            if (r >= 0) {
                const float* xr = x + r * N + e;
                if (VEC) {
                    const float4 a = __ldcs(reinterpret_cast<const float4*>(xr));
                    xv[u][0] = a.x; xv[u][1] = a.y; xv[u][2] = a.z; xv[u][3] = a.w;
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (e + j < N) xv[u][j] = __ldcs(xr + j);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const long long r = r0 - u;
            if (r >= 0) {
                const float m = __ldg(mean + r);
                const float rs = __ldg(rstd + r);
                float o[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) o[j] = fmaf((xv[u][j] - m) * rs, wv[j], bv[j]);
                float* yr = y + r * N + e;
                if (VEC) {
                    __stcs(reinterpret_cast<float4*>(yr), make_float4(o[0], o[1], o[2], o[3]));
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (e + j < N) __stcs(yr + j, o[j]);
                }
            }
        }
    }
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec(const float* __restrict__ x, const float* __restrict__ mean,
                 const float* __restrict__ rstd, const float* __restrict__ w,
                 const float* __restrict__ bias, float* __restrict__ y, long long rows,
                 long long N) {
    normalize_impl<true>(x, mean, rstd, w, bias, y, rows, N);
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar(const float* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const float* __restrict__ w,
                    const float* __restrict__ bias, float* __restrict__ y, long long rows,
                    long long N) {
    normalize_impl<false>(x, mean, rstd, w, bias, y, rows, N);
}
"""

kernels = compile_kernels(cuda_src, ["ln_stats_vec", "ln_stats_scalar", "ln_combine_kernel",
                                     "ln_normalize_vec", "ln_normalize_scalar"])
SBLOCK, SV4, CBLOCK, EW_BLOCK = (int(kernels.constant(n))
                                 for n in ("SBLOCK", "SV4", "CBLOCK", "EW_BLOCK"))
CHUNK = SBLOCK * SV4 * 4
TILE = EW_BLOCK * 4


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
        ntiles = (n + TILE - 1) // TILE
        if ntiles >= 1 << 31 or rows >= 1 << 31:
            raise ValueError("layernorm: normalized size or row count too large")
        vec = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
               and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)

        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=torch.float32)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)

        stats = kernels.ln_stats_vec if vec else kernels.ln_stats_scalar
        stats.launch(rows * nchunks, SBLOCK, x, n, rows, nchunks, chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, CBLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        norm = kernels.ln_normalize_vec if vec else kernels.ln_normalize_scalar
        norm.launch(ntiles, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
