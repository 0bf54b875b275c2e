# evokernel: best kernel of run best_of_n-s0 for problem layernorm
# candidate 51cbb1f5efbe392c, generation 3, operator idea; speedup 38.615x over eager (8.3403 ms -> 0.2160 ms, 168% of floor)
# idea: Use L2 cache-residency control so that part of normalize's second read of x is served from the 60 MiB L2 instead of HBM. Vectorize ln_chunk_stats_kernel with float4 loads (n % 4 == 0 and 16-byte alignment checked in Python) and give those loads an L2::evict_last policy (inline PTX `createpolicy.fractional.L2::evict_last.b64` + `ld.global.L2::cache_hint.v4.f32`), then have ln_normalize_kernel walk the rows in reverse (r = rows-1 down to 0, each thread owning one float4 column j with weight[j]/bias[j] kept in registers), so it first reads the ~3 most recently read 16 MiB rows while they are still in L2. In normalize, load x with `__ldcs` (last use, evict-first), write y with `__stcs` (st.global.cs streaming stores) so the 256 MiB of output does not push cached x out of L2, and read weight/bias with `__ldg`.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/best_of_n-s0/best.py
"""LayerNorm, NVRTC form, L2-residency aware.

1. ln_chunk_stats_vec_kernel: one block per (row, CHUNK) chunk; every thread loads its share of
   the chunk once as float4s kept in registers (two-pass mean / M2 from registers, stable on
   offset data). Loads of the last HOT_ROWS rows carry an L2::evict_last cache policy
   (createpolicy.fractional + ld.global.L2::cache_hint), so those rows stay in the 60 MiB L2.
2. ln_combine_kernel: per-row exact combine of chunk (sum, M2) -> mean, rstd.
3. ln_normalize_vec_kernel: each thread owns one float4 column j (weight/bias in registers) and
   walks the rows from rows-1 down to 0, so the most recently read (L2-resident) rows come
   first. x is read with __ldcs (last use, evict-first) and y written with __stcs (streaming),
   so the output does not push cached x out of L2.
Scalar kernels are kept as a fallback for N % 4 != 0 or misaligned pointers."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;      // tune: 128 256 512 1024
constexpr int CHUNK = 8192;     // tune: 4096 8192 16384
constexpr int EW_BLOCK = 256;   // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4;   // tune: 1 2 4 8
constexpr int HOT_ROWS = 3;     // tune: 0 2 3 4 64

static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32");
static_assert(CHUNK % 4 == 0, "CHUNK must be a multiple of 4");

constexpr int ITEMS = (CHUNK / 4 + BLOCK - 1) / BLOCK;   // float4s per thread per chunk

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over BLOCK threads (warp shuffles + one shared stage); every thread gets it.
// `sh` holds BLOCK / 32 floats.
__device__ __forceinline__ float block_reduce_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float t = (lane < BLOCK / 32) ? sh[lane] : 0.0f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

__device__ __forceinline__ unsigned long long make_evict_last_policy() {
    unsigned long long pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ float4 ld_evict_last(const float4* p, unsigned long long pol) {
    float4 v;
    asm volatile("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

// Vectorized stats: block b handles row b / nchunks, chunk c = b % nchunks. Requires N % 4 == 0
// and a 16-byte aligned x. Rows r >= hot_start are loaded with an L2 evict_last policy.
__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_vec_kernel(const float* __restrict__ x, long long N, long long nchunks,
                          long long hot_start, float* __restrict__ chunk_sum,
                          float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK / 32];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const int n4 = n >> 2;
    const float4* xc = reinterpret_cast<const float4*>(x + r * N + start);
    float4 v[ITEMS];
    if (r >= hot_start) {
        const unsigned long long pol = make_evict_last_policy();
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = k * BLOCK + threadIdx.x;
            if (i < n4) v[k] = ld_evict_last(xc + i, pol);
            else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = k * BLOCK + threadIdx.x;
            if (i < n4) v[k] = __ldg(xc + i);
            else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float sum = block_reduce_sum(s, sh);
    const float mean = sum / (float)n;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        if (k * BLOCK + (int)threadIdx.x < n4) {
            float d = v[k].x - mean; q = fmaf(d, d, q);
            d = v[k].y - mean; q = fmaf(d, d, q);
            d = v[k].z - mean; q = fmaf(d, d, q);
            d = v[k].w - mean; q = fmaf(d, d, q);
        }
    }
    const float m2 = block_reduce_sum(q, sh);
    if (threadIdx.x == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

// Scalar fallback stats (any N, any alignment): two passes over the chunk.
__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK / 32];
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
__global__ void __launch_bounds__(BLOCK)
ln_combine_kernel(const float* __restrict__ chunk_sum, const float* __restrict__ chunk_m2,
                  long long N, long long nchunks, float eps, float* __restrict__ mean_out,
                  float* __restrict__ rstd_out) {
    __shared__ float sh[BLOCK / 32];
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

__device__ __forceinline__ float4 ln_apply(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = fmaf((v.x - m) * rs, w.x, b.x);
    o.y = fmaf((v.y - m) * rs, w.y, b.y);
    o.z = fmaf((v.z - m) * rs, w.z, b.z);
    o.w = fmaf((v.w - m) * rs, w.w, b.w);
    return o;
}

// Vectorized normalize: thread owns float4 column j of the row, keeps weight[j]/bias[j] in
// registers, and walks rows from rows-1 down to 0 (most recently read rows first, while they
// are in L2). x: __ldcs (evict-first, last use); y: __stcs (streaming store).
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const float* __restrict__ weight,
                        const float* __restrict__ bias, float* __restrict__ y,
                        long long rows, long long n4) {
    const long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    if (j >= n4) return;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + j);
    const float4 bb = __ldg(reinterpret_cast<const float4*>(bias) + j);
    long long r = rows - 1;
    for (; r >= ROW_UNROLL - 1; r -= ROW_UNROLL) {
        float4 v[ROW_UNROLL];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) v[u] = __ldcs(x4 + (r - u) * n4 + j);
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const float m = __ldg(mean + (r - u)), rs = __ldg(rstd + (r - u));
            __stcs(y4 + (r - u) * n4 + j, ln_apply(v[u], m, rs, w, bb));
        }
    }
    for (; r >= 0; --r) {
        const float4 v = __ldcs(x4 + r * n4 + j);
        const float m = __ldg(mean + r), rs = __ldg(rstd + r);
        __stcs(y4 + r * n4 + j, ln_apply(v, m, rs, w, bb));
    }
}

// Scalar fallback normalize (any N, any alignment).
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const float* __restrict__ weight,
                    const float* __restrict__ bias, float* __restrict__ y,
                    long long rows, long long N) {
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float m = mean[r], rs = rstd[r];
        const float* xr = x + r * N;
        float* yr = y + r * N;
        for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
             i += (long long)gridDim.x * EW_BLOCK) {
            yr[i] = (xr[i] - m) * rs * weight[i] + bias[i];
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_vec_kernel", "ln_chunk_stats_kernel",
                                     "ln_combine_kernel", "ln_normalize_vec_kernel",
                                     "ln_normalize_kernel"])
BLOCK, CHUNK, EW_BLOCK, HOT_ROWS = (kernels.constant(n) for n in
                                    ("BLOCK", "CHUNK", "EW_BLOCK", "HOT_ROWS"))


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
        vec = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
               and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        if vec:
            hot_start = max(rows - HOT_ROWS, 0)
            kernels.ln_chunk_stats_vec_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks,
                                                     hot_start, chunk_sum, chunk_m2)
        else:
            kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks,
                                                 chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        if vec:
            n4 = n // 4
            grid = (n4 + EW_BLOCK - 1) // EW_BLOCK
            if grid >= 1 << 31:
                raise ValueError("layernorm: normalized size too large")
            kernels.ln_normalize_vec_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
