# evokernel: best kernel of run branching-s0 for problem layernorm
# candidate e2f972adc048c967, generation 2, operator idea; speedup 38.573x over eager (8.3349 ms -> 0.2161 ms, 171% of floor)
# idea: [dtypes] Use 128-bit loads with explicit PTX L2 cache-policy qualifiers so the tail of x read by the stats kernel is still in the 60 MiB L2 when the normalize kernel reads it. In ln_chunk_stats_vec4_kernel, load with inline-asm `ld.global.nc.L1::no_allocate.L2::evict_last.v4.f32` for chunks whose flat offset is in the last ~40 MiB of x (blocks b >= rows*nchunks - 40MiB/(CHUNK*4)), and with `...L2::evict_first.v4.f32` for all others. In ln_normalize_vec4_kernel, walk each thread's rows in reverse (r = rows-1 down to 0, keeping ROW_UNROLL groups). x loads use `ld.global.L2::evict_first.v4.f32` (`ld.global.lu` for the protected rows), so the L2-resident rows 13-15 are consumed first and released, and y keeps `st.global.cs`. This saves about 40 MiB of HBM reads (~10 us).
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/branching-s0/best.py
"""LayerNorm, NVRTC form. (1) Per-(row, chunk) statistics with the chunk held in registers:
each of BLOCK threads loads VPT float4s (CHUNK = BLOCK*VPT*4), the chunk sum and then
sum((v - chunk_mean)^2) are computed from those registers (two-pass stability, one global read),
using warp-shuffle + per-warp shared-memory reductions. (2) Per-row combine (exact M2
decomposition). (3) Column-major normalize: each thread owns a float4 column slot, loads
weight/bias once and walks all rows (ROW_UNROLL loads in flight), so weight/bias are read once.
L2 plan: the stats kernel loads the last KEEP_MB of x (flat offset >= keep_off, whole chunks)
with an evict_last L2 policy and everything else with evict_first; the normalize kernel walks
rows from last to first, so those L2-resident rows are consumed first (ld.global.lu releases
them), the remaining rows stream with evict_first loads and y is written with st.global.cs."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;     // tune: 128 256 512 1024
constexpr int VPT = 8;         // tune: 2 4 8 16
constexpr int CHUNK = BLOCK * VPT * 4;
constexpr int NWARPS = BLOCK / 32;
constexpr int EW_BLOCK = 256;  // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4;  // tune: 1 2 4 8
constexpr int KEEP_MB = 32;    // tune: 0 16 24 32 40 48

// L2 eviction-priority policies (sm_80+) for the .L2::cache_hint load form.
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}

__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}

// 128-bit read-only load that skips L1 and tags the L2 line with the given policy.
__device__ __forceinline__ float4 ld_nc_l2hint(const float4* p, unsigned long long pol) {
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p), "l"(pol));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over BLOCK threads (BLOCK a multiple of 32, at most 1024); every thread gets
// the result. `sh` holds NWARPS floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = (lane < NWARPS) ? sh[lane] : 0.0f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// Element e of the chunk lives in thread (e/4) % BLOCK, register slot (e/4) / BLOCK, lane e % 4.
template <bool VEC>
__device__ __forceinline__ void chunk_stats_impl(const float* __restrict__ x, long long N,
                                                 long long nchunks, float* __restrict__ chunk_sum,
                                                 float* __restrict__ chunk_m2, float* sh,
                                                 long long keep_off) {
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * (long long)CHUNK;
    const int n = (N - start < (long long)CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;

    float4 v[VPT];
    if (VEC) {
        // n is a multiple of 4 here (N % 4 == 0 and CHUNK % 4 == 0) and xc is 16-byte aligned.
        // Chunks whose flat offset is >= keep_off stay in L2 (evict_last) for the normalize
        // kernel; all others are streamed with evict_first so they do not displace them.
        const float4* x4 = reinterpret_cast<const float4*>(xc);
        const int n4 = n >> 2;
        const unsigned long long pol_last = l2_policy_evict_last();
        const unsigned long long pol_first = l2_policy_evict_first();
        const unsigned long long pol = (r * N + start >= keep_off) ? pol_last : pol_first;
        if (n4 == BLOCK * VPT) {
#pragma unroll
            for (int k = 0; k < VPT; ++k) v[k] = ld_nc_l2hint(x4 + k * BLOCK + (int)threadIdx.x, pol);
        } else {
#pragma unroll
            for (int k = 0; k < VPT; ++k) {
                const int idx = k * BLOCK + (int)threadIdx.x;
                if (idx < n4) {
                    v[k] = ld_nc_l2hint(x4 + idx, pol);
                } else {
                    v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
        }
    } else {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int e = (k * BLOCK + (int)threadIdx.x) * 4;
            v[k].x = (e + 0 < n) ? xc[e + 0] : 0.0f;
            v[k].y = (e + 1 < n) ? xc[e + 1] : 0.0f;
            v[k].z = (e + 2 < n) ? xc[e + 2] : 0.0f;
            v[k].w = (e + 3 < n) ? xc[e + 3] : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float sum = block_sum(s, sh);
    const float mean = sum / (float)n;

    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int e = (k * BLOCK + (int)threadIdx.x) * 4;
        const float d0 = (e + 0 < n) ? v[k].x - mean : 0.0f;
        const float d1 = (e + 1 < n) ? v[k].y - mean : 0.0f;
        const float d2 = (e + 2 < n) ? v[k].z - mean : 0.0f;
        const float d3 = (e + 3 < n) ? v[k].w - mean : 0.0f;
        q = fmaf(d0, d0, q);
        q = fmaf(d1, d1, q);
        q = fmaf(d2, d2, q);
        q = fmaf(d3, d3, q);
    }
    const float m2 = block_sum(q, sh);
    if (threadIdx.x == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_vec4_kernel(const float* __restrict__ x, long long N, long long nchunks,
                           float* __restrict__ chunk_sum, float* __restrict__ chunk_m2,
                           long long keep_off) {
    __shared__ float sh[NWARPS];
    chunk_stats_impl<true>(x, N, nchunks, chunk_sum, chunk_m2, sh, keep_off);
}

__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[NWARPS];
    chunk_stats_impl<false>(x, N, nchunks, chunk_sum, chunk_m2, sh, 0LL);
}

// One block per row. mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2]
// (exact decomposition of sum((x - mean)^2)); rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void __launch_bounds__(BLOCK)
ln_combine_kernel(const float* __restrict__ chunk_sum, const float* __restrict__ chunk_m2,
                  long long N, long long nchunks, float eps, float* __restrict__ mean_out,
                  float* __restrict__ rstd_out) {
    __shared__ float sh[NWARPS];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_sum(s, sh) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * (long long)CHUNK;
        const float n_c = (float)(rest < (long long)CHUNK ? rest : (long long)CHUNK);
        const float d = cs[c] / n_c - mean;
        q += cm[c] + n_c * d * d;
    }
    const float m2 = block_sum(q, sh);
    if (threadIdx.x == 0) {
        const float var = m2 / (float)N;
        mean_out[r] = mean;
        rstd_out[r] = 1.0f / sqrtf(var + eps);
    }
}

__device__ __forceinline__ float4 norm4(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = (v.x - m) * rs * w.x + b.x;
    o.y = (v.y - m) * rs * w.y + b.y;
    o.z = (v.z - m) * rs * w.z + b.z;
    o.w = (v.w - m) * rs * w.w + b.w;
    return o;
}

// x float4 at flat float4 offset `off`: the L2-resident (protected) part is read with a
// last-use load that releases its evict_last lines, the rest streams with evict_first.
__device__ __forceinline__ float4 ld_x4(const float4* __restrict__ x4, long long off,
                                        long long keep4, unsigned long long pol_first) {
    if (off >= keep4) return __ldlu(x4 + off);
    return ld_nc_l2hint(x4 + off, pol_first);
}

// Column-major normalize over float4 slots: thread owns slot i of the row (grid-stride), loads
// weight/bias once, then walks the rows from LAST to FIRST with ROW_UNROLL independent loads in
// flight, so the rows the stats kernel left in L2 (flat float4 offset >= keep4) are consumed
// first. y is written with streaming (.cs) stores so it does not push x out of L2.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec4_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const float* __restrict__ weight,
                         const float* __restrict__ bias, float* __restrict__ y,
                         long long rows, long long N4, long long keep4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    const unsigned long long pol_first = l2_policy_evict_first();
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N4;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float4 w = __ldg(w4 + i), bb = __ldg(b4 + i);
        long long r = rows;  // rows [0, r) remain, processed from r - 1 downwards
        for (; r >= ROW_UNROLL; r -= ROW_UNROLL) {
            float4 v[ROW_UNROLL];
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k)
                v[k] = ld_x4(x4, (r - 1 - k) * N4 + i, keep4, pol_first);
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k) {
                const long long rr = r - 1 - k;
                const float m = __ldg(mean + rr), rs = __ldg(rstd + rr);
                __stcs(y4 + rr * N4 + i, norm4(v[k], m, rs, w, bb));
            }
        }
        for (; r > 0; --r) {
            const long long rr = r - 1;
            const float4 v = ld_x4(x4, rr * N4 + i, keep4, pol_first);
            __stcs(y4 + rr * N4 + i, norm4(v, __ldg(mean + rr), __ldg(rstd + rr), w, bb));
        }
    }
}

// Scalar fallback (N % 4 != 0 or unaligned pointers), same column-major structure.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const float* __restrict__ weight,
                    const float* __restrict__ bias, float* __restrict__ y,
                    long long rows, long long N) {
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float w = weight[i], bb = bias[i];
        long long r = 0;
        for (; r + ROW_UNROLL <= rows; r += ROW_UNROLL) {
            float v[ROW_UNROLL];
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k) v[k] = x[(r + k) * N + i];
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k) {
                y[(r + k) * N + i] = (v[k] - mean[r + k]) * rstd[r + k] * w + bb;
            }
        }
        for (; r < rows; ++r) {
            y[r * N + i] = (x[r * N + i] - mean[r]) * rstd[r] * w + bb;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_vec4_kernel", "ln_chunk_stats_kernel",
                                     "ln_combine_kernel", "ln_normalize_vec4_kernel",
                                     "ln_normalize_kernel"])
BLOCK, VPT, EW_BLOCK, KEEP_MB = (kernels.constant(n)
                                 for n in ("BLOCK", "VPT", "EW_BLOCK", "KEEP_MB"))
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
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        y = torch.empty_like(x)
        n = w.numel()
        if x.numel() == 0:
            return y
        rows = x.numel() // n
        nchunks = (n + CHUNK - 1) // CHUNK
        if rows * nchunks >= 1 << 31:
            raise ValueError("layernorm: too many (row, chunk) blocks")
        vec = (n % 4 == 0 and x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
               and b.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0)
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        # Flat float offset from which x is kept in L2 between the passes: the start of the
        # first of the last KEEP_MB / (4 * CHUNK) chunks (rows * n means nothing is kept).
        nblk = rows * nchunks
        keep_chunks = (int(KEEP_MB) << 20) // (4 * CHUNK)
        kb = nblk - keep_chunks
        if not vec or keep_chunks <= 0:
            keep_off = rows * n
        elif kb <= 0:
            keep_off = 0
        else:
            keep_off = (kb // nchunks) * n + (kb % nchunks) * CHUNK
        if vec:
            kernels.ln_chunk_stats_vec4_kernel.launch(nblk, BLOCK, x, n, nchunks, chunk_sum,
                                                      chunk_m2, keep_off)
        else:
            kernels.ln_chunk_stats_kernel.launch(nblk, BLOCK, x, n, nchunks, chunk_sum,
                                                 chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        if vec:
            n4 = n // 4
            grid = min((n4 + EW_BLOCK - 1) // EW_BLOCK, 1 << 30)
            kernels.ln_normalize_vec4_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                    rows, n4, keep_off // 4)
        else:
            grid = min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30)
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
