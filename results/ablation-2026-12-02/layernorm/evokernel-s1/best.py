# evokernel: best kernel of run evokernel-s1 for problem layernorm
# candidate 3a417ae304ca7d06, generation 2, operator crossover; speedup 36.813x over eager (8.3332 ms -> 0.2264 ms, 179% of floor)
# idea: Keep Parent A's register-resident float4 chunk statistics and its EW_ROWS float4 normalize (both measured faster than Parent B's cp.async shared-memory ring, which only adds a shared-memory hop to a stream that already keeps HBM busy), and add three changes: exact chunk partials in double, a double-precision combine done by the last block of each row to finish (no combine launch) that writes a hi/lo float mean, and chunk-major stats order with a descending-column normalize so the tail of x still
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/evokernel-s1/best.py
"""LayerNorm, NVRTC form: single-read two-pass statistics per (chunk, row) block (chunk held in
registers as float4, warp-shuffle reductions, exact chunk partials published in double), the
per-row combine done in double by the last block of each row to finish (atomic counter, no
separate launch), then a float4 normalize + affine kernel that loads each weight/bias float4 once
for EW_ROWS rows and walks the columns in descending order, so that it starts on the part of x
that the stats kernel left in L2."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 128;    // tune: 64 128 256 512 1024
constexpr int VPT = 16;       // tune: 2 4 8 16
constexpr int CHUNK = BLOCK * VPT * 4;  // elements per stats block (derived)
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int EW_ROWS = 4;    // tune: 1 2 4 8 16

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over NT threads (NT a multiple of 32, at most 1024): warp shuffles, one smem
// slot per warp, a final warp shuffle. `sh` holds 33 floats. Every thread gets the result.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* sh) {
    constexpr int NW = (NT + 31) / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = (lane < NW) ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

__device__ __forceinline__ float4 ld_cs(const float4* p) {
    float4 v;
    asm("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void st_cs(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

// Two block-wide sums at once (one pair of __syncthreads). `sh` holds 66 floats.
template <int NT>
__device__ __forceinline__ float2 block_sum2(float a, float b, float* sh) {
    constexpr int NW = (NT + 31) / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) {
        sh[w] = a;
        sh[33 + w] = b;
    }
    __syncthreads();
    if (w == 0) {
        float ta = (lane < NW) ? sh[lane] : 0.0f;
        float tb = (lane < NW) ? sh[33 + lane] : 0.0f;
        ta = warp_sum(ta);
        tb = warp_sum(tb);
        if (lane == 0) {
            sh[32] = ta;
            sh[65] = tb;
        }
    }
    __syncthreads();
    return make_float2(sh[32], sh[65]);
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide double sum (same scheme as block_sum). `sh` holds 33 doubles.
template <int NT>
__device__ __forceinline__ double block_sum_d(double v, double* sh) {
    constexpr int NW = (NT + 31) / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum_d(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        double t = (lane < NW) ? sh[lane] : 0.0;
        t = warp_sum_d(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

// Block b handles chunk c = b / rows of row r = b % rows (chunk-major: the last blocks to run read
// the highest columns of every row, which the normalize kernel reads first, from L2), i.e.
// elements [c*CHUNK, min((c+1)*CHUNK, N)) of row r. Thread t holds elements 4*(j*BLOCK + t) +
// {0..3}, j < VPT, in registers (one global read, float4). Pass 1: chunk sum -> m0. Pass 2, from
// the registers: t1 = sum(x - m0), t2 = sum((x - m0)^2). The chunk's exact sum S = n*m0 + t1 and
// M2 = t2 - t1^2/n are published in double (stable on offset data, no float rounding of the
// chunk mean). The last block of row r to finish (atomic counter) combines the row in double:
// mean = sum(S_c) / N, M2 = sum_c [M2_c + n_c (S_c/n_c - mean)^2], and writes mean as a float
// hi/lo pair and rstd = 1 / sqrt(M2 / N + eps) (biased variance). cnt must be zero on entry.
__global__ void __launch_bounds__(BLOCK) ln_chunk_stats_kernel(
    const float* __restrict__ x, long long N, long long nchunks, long long rows, int vec_ok,
    float eps, double* __restrict__ chunk_sum, double* __restrict__ chunk_m2,
    int* __restrict__ cnt, float* __restrict__ mean_hi, float* __restrict__ mean_lo,
    float* __restrict__ rstd_out) {
    __shared__ float sh[66];
    __shared__ double shd[33];
    __shared__ int s_last;
    const long long b = blockIdx.x;
    const long long c = b / rows, r = b - c * rows;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const int tid = threadIdx.x;

    float4 v[VPT];
    if (vec_ok && n == CHUNK) {
        const float4* xv = reinterpret_cast<const float4*>(xc);
#pragma unroll
        for (int j = 0; j < VPT; ++j) v[j] = xv[j * BLOCK + tid];
    } else {
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int e = 4 * (j * BLOCK + tid);
            v[j].x = (e + 0 < n) ? xc[e + 0] : 0.0f;
            v[j].y = (e + 1 < n) ? xc[e + 1] : 0.0f;
            v[j].z = (e + 2 < n) ? xc[e + 2] : 0.0f;
            v[j].w = (e + 3 < n) ? xc[e + 3] : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    const float sum = block_sum<BLOCK>(s, sh);
    const float mean = sum / (float)n;

    float t1 = 0.0f, t2 = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const int e = 4 * (j * BLOCK + tid);
        const float d0 = (e + 0 < n) ? v[j].x - mean : 0.0f;
        const float d1 = (e + 1 < n) ? v[j].y - mean : 0.0f;
        const float d2 = (e + 2 < n) ? v[j].z - mean : 0.0f;
        const float d3 = (e + 3 < n) ? v[j].w - mean : 0.0f;
        t1 += (d0 + d1) + (d2 + d3);
        t2 = fmaf(d0, d0, t2);
        t2 = fmaf(d1, d1, t2);
        t2 = fmaf(d2, d2, t2);
        t2 = fmaf(d3, d3, t2);
    }
    const float2 t = block_sum2<BLOCK>(t1, t2, sh);
    if (tid == 0) {
        const double nd = (double)n;
        const double S = (double)mean * nd + (double)t.x;
        double M2 = (double)t.y - (double)t.x * (double)t.x / nd;
        if (M2 < 0.0) M2 = 0.0;
        const long long idx = r * nchunks + c;
        chunk_sum[idx] = S;
        chunk_m2[idx] = M2;
        __threadfence();
        s_last = (atomicAdd(cnt + r, 1) == (int)(nchunks - 1)) ? 1 : 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    // Last block of row r: combine its nchunks partials in double (L2 reads, bypassing L1).
    const double* cs = chunk_sum + r * nchunks;
    const double* cm = chunk_m2 + r * nchunks;
    double ds = 0.0;
    for (long long k = tid; k < nchunks; k += BLOCK) ds += __ldcg(cs + k);
    const double md = block_sum_d<BLOCK>(ds, shd) / (double)N;
    double dq = 0.0;
    for (long long k = tid; k < nchunks; k += BLOCK) {
        const long long rest = N - k * CHUNK;
        const double n_k = (double)(rest < CHUNK ? rest : CHUNK);
        const double d = __ldcg(cs + k) / n_k - md;
        dq += __ldcg(cm + k) + n_k * d * d;
    }
    const double m2 = block_sum_d<BLOCK>(dq, shd);
    if (tid == 0) {
        double var = m2 / (double)N;
        if (var < 0.0) var = 0.0;
        const float mh = (float)md;
        mean_hi[r] = mh;
        mean_lo[r] = (float)(md - (double)mh);
        rstd_out[r] = (float)(1.0 / sqrt(var + (double)eps));
    }
}

// Vectorized normalize (N % 4 == 0, 16-byte aligned pointers). x-grid over groups of EW_ROWS
// rows (fast dimension, so concurrently running blocks share the same weight/bias columns in
// L2), y-grid over float4 columns, walked from the last column block to the first: the stats
// kernel reads chunks in ascending column order, so the highest columns of x are the ones still
// in L2 when this kernel starts. Each thread loads its weight/bias float4 once and applies it to
// EW_ROWS rows; x and y are streamed with evict-first hints, so they do not push out the x lines
// still waiting to be re-read. The row mean is a float hi/lo pair: (x - hi) - lo.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_vec_kernel(
    const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ mean_lo,
    const float* __restrict__ rstd, const float* __restrict__ weight,
    const float* __restrict__ bias, float* __restrict__ y, long long rows, long long N4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    const long long jb = (long long)gridDim.y - 1 - (long long)blockIdx.y;
    for (long long j = jb * EW_BLOCK + threadIdx.x; j < N4;
         j += (long long)gridDim.y * EW_BLOCK) {
        const float4 w = w4[j];
        const float4 bb = b4[j];
        for (long long r0 = (long long)blockIdx.x * EW_ROWS; r0 < rows;
             r0 += (long long)gridDim.x * EW_ROWS) {
            float4 v[EW_ROWS];
#pragma unroll
            for (int k = 0; k < EW_ROWS; ++k) {
                if (r0 + k < rows) v[k] = ld_cs(x4 + (r0 + k) * N4 + j);
                else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < EW_ROWS; ++k) {
                if (r0 + k < rows) {
                    const float m = mean[r0 + k], ml = mean_lo[r0 + k], rs = rstd[r0 + k];
                    float4 o;
                    o.x = fmaf(((v[k].x - m) - ml) * rs, w.x, bb.x);
                    o.y = fmaf(((v[k].y - m) - ml) * rs, w.y, bb.y);
                    o.z = fmaf(((v[k].z - m) - ml) * rs, w.z, bb.z);
                    o.w = fmaf(((v[k].w - m) - ml) * rs, w.w, bb.w);
                    st_cs(y4 + (r0 + k) * N4 + j, o);
                }
            }
        }
    }
}

// Scalar fallback: y = ((x - mean[r]) - mean_lo[r]) * rstd[r] * weight[i] + bias[i], for row r
// and flat index i within the row. 2D grid: y over rows, x over the row; grid-stride loops in both.
__global__ void ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                    const float* __restrict__ mean_lo,
                                    const float* __restrict__ rstd,
                                    const float* __restrict__ weight,
                                    const float* __restrict__ bias, float* __restrict__ y,
                                    long long rows, long long N) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float m = mean[r], ml = mean_lo[r], rs = rstd[r];
        const float* xr = x + r * N;
        float* yr = y + r * N;
        for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
             i += (long long)gridDim.x * EW_BLOCK) {
            yr[i] = fmaf(((xr[i] - m) - ml) * rs, weight[i], bias[i]);
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_normalize_vec_kernel",
                                     "ln_normalize_kernel"])
BLOCK, VPT, EW_BLOCK, EW_ROWS = (kernels.constant(n)
                                 for n in ("BLOCK", "VPT", "EW_BLOCK", "EW_ROWS"))
CHUNK = BLOCK * VPT * 4


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
        vec_ok = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                  and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        dev = x.device
        chunk_sum = torch.empty(rows * nchunks, device=dev, dtype=torch.float64)
        chunk_m2 = torch.empty_like(chunk_sum)
        cnt = torch.zeros(rows, device=dev, dtype=torch.int32)
        mean = torch.empty(rows, device=dev, dtype=torch.float32)
        mean_lo = torch.empty_like(mean)
        rstd = torch.empty_like(mean)
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, rows,
                                             1 if vec_ok else 0, float(self.ln.eps),
                                             chunk_sum, chunk_m2, cnt, mean, mean_lo, rstd)
        if vec_ok:
            n4 = n // 4
            gx = min((rows + EW_ROWS - 1) // EW_ROWS, (1 << 31) - 1)
            gy = min((n4 + EW_BLOCK - 1) // EW_BLOCK, 65535)
            kernels.ln_normalize_vec_kernel.launch((gx, gy), EW_BLOCK, x, mean, mean_lo, rstd,
                                                   w, b, y, rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, mean_lo, rstd, w, b, y,
                                               rows, n)
        return y
        return y
