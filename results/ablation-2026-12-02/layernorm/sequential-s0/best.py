# evokernel: best kernel of run sequential-s0 for problem layernorm
# candidate 92f72e5821f4c9e9, generation 3, operator idea; speedup 37.831x over eager (8.3349 ms -> 0.2203 ms, 171% of floor)
# idea: Rewrite ln_chunk_stats_kernel, which takes 78 us for 268 MB against a ~65 us read floor, as a register-resident float4 kernel. With BLOCK=256 and CHUNK=8192, each thread issues all of its CHUNK/(4*BLOCK)=8 float4 loads of the chunk up front (a compile-time unrolled array of float4 in registers, loaded with ld.global.nc.L1::no_allocate / __ldg, at index t + k*BLOCK so that every warp request is 512 B coalesced). It takes the chunk sum from those registers with a warp-shuffle reduce plus a 1-float-per-warp shared combine (replacing the 8-step __syncthreads tree), then computes the M2 term sum((v - chunk_mean)^2) from the same registers with fmaf, so x is never read a second time. Keep a scalar guarded path for the last partial chunk or N % 4 != 0, and let ln_combine_kernel accumulate its chunk sums and M2 in double before the final float mean/rstd; that path is cheap (3.8 us) and leaves the precision margin free for the tuner's larger CHUNK values.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/sequential-s0/best.py
"""LayerNorm, NVRTC form: two-pass statistics per (row, chunk) block, a per-row combine, then a
column-major float4 normalize + affine sweep (each thread owns 4 columns, holds their weight and
bias in registers and walks every row), with a scalar fallback for unaligned shapes."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;    // tune: 64 128 256 512 1024
constexpr int CHUNK = 8192;   // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4; // tune: 1 2 4 8
constexpr int SH_ROWS = 1024; // rows of mean/rstd staged in shared memory per tile
constexpr int MAX_VPT = 16;   // tune: 8 16 32

constexpr int C4 = CHUNK / 4;                         // float4s in a full chunk
constexpr int VPT = (C4 + BLOCK - 1) / BLOCK;         // float4s per thread in a full chunk
constexpr bool EXACT = (C4 % BLOCK) == 0;             // no per-thread bound check needed
constexpr bool IN_REGS = VPT <= MAX_VPT;              // whole chunk fits in registers
constexpr int RV = IN_REGS ? VPT : 1;                 // register array length
constexpr int NWARPS = (BLOCK + 31) / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Warp-shuffle reduction, then one float per warp in shared memory (BLOCK is a multiple of 32);
// every thread gets the result. `shw` holds NWARPS floats.
__device__ __forceinline__ float block_sum_fast(float v, float* shw) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) shw[wid] = v;
    __syncthreads();
    float r = (lane < NWARPS) ? shw[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();  // shw may be reused right after
    return r;
}

// Tree reduction in double over all BLOCK threads (any BLOCK >= 1); every thread gets the result.
// `sh` holds BLOCK doubles.
__device__ double block_reduce_sum_d(double v, double* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float sum4(float4 v) { return (v.x + v.y) + (v.z + v.w); }

__device__ __forceinline__ float sq4(float4 v, float m, float q) {
    float d = v.x - m; q = fmaf(d, d, q);
    d = v.y - m; q = fmaf(d, d, q);
    d = v.z - m; q = fmaf(d, d, q);
    d = v.w - m; q = fmaf(d, d, q);
    return q;
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// Statistics: chunk sum, then sum((x - chunk_mean)^2) (two-pass, stable on offset data).
// Full, 16-byte-aligned chunks (vec_ok) load the whole chunk once into registers as float4
// (index t + k*BLOCK: 512 B per warp request) and take both passes from the registers; when the
// chunk does not fit in MAX_VPT float4 per thread, both passes stream float4 from memory (the
// second hits L1/L2). Partial chunks or unaligned data use the scalar two-pass path.
__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks, int vec_ok,
                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float shw[NWARPS];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    float sum, m2;
    if (vec_ok && n == CHUNK) {
        const float4* x4 = reinterpret_cast<const float4*>(xc);
        if (IN_REGS) {
            float4 v[RV];
#pragma unroll
            for (int k = 0; k < RV; ++k) {
                const int idx = threadIdx.x + k * BLOCK;
                if (EXACT || idx < C4) v[k] = __ldg(x4 + idx);
                else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < RV; ++k) s += sum4(v[k]);
            sum = block_sum_fast(s, shw);
            const float mean = sum / (float)CHUNK;
            float q = 0.0f;
#pragma unroll
            for (int k = 0; k < RV; ++k) {
                const int idx = threadIdx.x + k * BLOCK;
                if (EXACT || idx < C4) q = sq4(v[k], mean, q);
            }
            m2 = block_sum_fast(q, shw);
        } else {
            float s = 0.0f;
            for (int i = threadIdx.x; i < C4; i += BLOCK) s += sum4(__ldg(x4 + i));
            sum = block_sum_fast(s, shw);
            const float mean = sum / (float)CHUNK;
            float q = 0.0f;
            for (int i = threadIdx.x; i < C4; i += BLOCK) q = sq4(__ldg(x4 + i), mean, q);
            m2 = block_sum_fast(q, shw);
        }
    } else {
        float s = 0.0f;
        for (int i = threadIdx.x; i < n; i += BLOCK) s += xc[i];
        sum = block_sum_fast(s, shw);
        const float mean = sum / (float)n;
        float q = 0.0f;
        for (int i = threadIdx.x; i < n; i += BLOCK) {
            const float d = xc[i] - mean;
            q = fmaf(d, d, q);
        }
        m2 = block_sum_fast(q, shw);
    }
    if (threadIdx.x == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

// One block per row, accumulated in double. mean = sum(chunk sums) / N;
// M2 = sum_c [M2_c + n_c (mean_c - mean)^2] (exact decomposition of sum((x - mean)^2));
// rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void ln_combine_kernel(const float* __restrict__ chunk_sum,
                                  const float* __restrict__ chunk_m2, long long N,
                                  long long nchunks, float eps, float* __restrict__ mean_out,
                                  float* __restrict__ rstd_out) {
    __shared__ double sh[BLOCK];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    double s = 0.0;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += (double)cs[c];
    const double mean = block_reduce_sum_d(s, sh) / (double)N;
    double q = 0.0;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * CHUNK;
        const double n_c = (double)(rest < CHUNK ? rest : CHUNK);
        const double d = (double)cs[c] / n_c - mean;
        q += (double)cm[c] + n_c * d * d;
    }
    const double m2 = block_reduce_sum_d(q, sh);
    if (threadIdx.x == 0) {
        const double var = m2 / (double)N;
        mean_out[r] = (float)mean;
        rstd_out[r] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

__device__ __forceinline__ float4 ln_affine4(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = fmaf((v.x - m) * rs, w.x, b.x);
    o.y = fmaf((v.y - m) * rs, w.y, b.y);
    o.z = fmaf((v.z - m) * rs, w.z, b.z);
    o.w = fmaf((v.w - m) * rs, w.w, b.w);
    return o;
}

// Column-major float4 sweep. Thread j owns columns [4j, 4j+4) of every row (N4 = N / 4 float4s
// per row; requires N % 4 == 0 and 16-byte aligned pointers, checked on the host). weight and
// bias for those columns are loaded once into registers; mean/rstd are staged in shared memory
// in tiles of SH_ROWS rows; rows are processed ROW_UNROLL at a time with all loads issued first.
__global__ void ln_normalize_vec4_kernel(const float* __restrict__ x,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd,
                                         const float* __restrict__ weight,
                                         const float* __restrict__ bias, float* __restrict__ y,
                                         long long rows, long long N4) {
    __shared__ float sh_m[SH_ROWS];
    __shared__ float sh_r[SH_ROWS];
    const long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    const bool active = j < N4;
    float4 w = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 bb = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (active) {
        w = __ldg(reinterpret_cast<const float4*>(weight) + j);
        bb = __ldg(reinterpret_cast<const float4*>(bias) + j);
    }
    const float4* xp = reinterpret_cast<const float4*>(x) + j;
    float4* yp = reinterpret_cast<float4*>(y) + j;

    for (long long r0 = 0; r0 < rows; r0 += SH_ROWS) {
        const long long left = rows - r0;
        const int nr = left < (long long)SH_ROWS ? (int)left : SH_ROWS;
        __syncthreads();  // previous tile fully consumed
        for (int t = threadIdx.x; t < nr; t += EW_BLOCK) {
            sh_m[t] = mean[r0 + t];
            sh_r[t] = rstd[r0 + t];
        }
        __syncthreads();
        if (active) {
            const float4* xr = xp + r0 * N4;
            float4* yr = yp + r0 * N4;
            int t = 0;
            for (; t + ROW_UNROLL <= nr; t += ROW_UNROLL) {
                float4 v[ROW_UNROLL];
#pragma unroll
                for (int u = 0; u < ROW_UNROLL; ++u) v[u] = __ldcs(xr + (long long)u * N4);
#pragma unroll
                for (int u = 0; u < ROW_UNROLL; ++u) {
                    const float4 o = ln_affine4(v[u], sh_m[t + u], sh_r[t + u], w, bb);
                    __stcs(yr + (long long)u * N4, o);
                }
                xr += (long long)ROW_UNROLL * N4;
                yr += (long long)ROW_UNROLL * N4;
            }
            for (; t < nr; ++t) {
                const float4 v = __ldcs(xr);
                __stcs(yr, ln_affine4(v, sh_m[t], sh_r[t], w, bb));
                xr += N4;
                yr += N4;
            }
        }
    }
}

// Scalar fallback (unaligned pointers or N % 4 != 0).
// y = (x - mean[r]) * rstd[r] * weight[i] + bias[i], for row r and flat index i within the row.
__global__ void ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                    const float* __restrict__ rstd,
                                    const float* __restrict__ weight,
                                    const float* __restrict__ bias, float* __restrict__ y,
                                    long long rows, long long N) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float m = mean[r], rs = rstd[r];
        const float* xr = x + r * N;
        float* yr = y + r * N;
        for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
             i += (long long)gridDim.x * EW_BLOCK) {
            yr[i] = fmaf((xr[i] - m) * rs, weight[i], bias[i]);
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_combine_kernel",
                                     "ln_normalize_vec4_kernel", "ln_normalize_kernel"])
BLOCK, CHUNK, EW_BLOCK = (kernels.constant(n) for n in ("BLOCK", "CHUNK", "EW_BLOCK"))


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.ln.weight, self.ln.bias
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() >= w.dim()
                and tuple(x.shape[x.dim() - w.dim():]) == tuple(w.shape)
                and w.dtype == torch.float32 and b.dtype == torch.float32):
            raise ValueError("layernorm: x must be a float32 CUDA tensor whose trailing dims "
                             "are normalized_shape")
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
        vec_ok = 1 if (n % 4 == 0 and x.data_ptr() % 16 == 0) else 0
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, vec_ok,
                                             chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        aligned = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                   and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        n4 = n // 4
        if aligned and (n4 + EW_BLOCK - 1) // EW_BLOCK < (1 << 31):
            grid = (n4 + EW_BLOCK - 1) // EW_BLOCK
            kernels.ln_normalize_vec4_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                    rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
