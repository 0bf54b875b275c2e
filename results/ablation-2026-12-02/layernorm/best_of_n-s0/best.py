# evokernel: best kernel of run best_of_n-s0 for problem layernorm
# candidate 4af22335d4dff60b, generation 2, operator idea; speedup 37.544x over eager (8.3329 ms -> 0.2220 ms, 176% of floor)
# idea: [compute] Rewrite the statistics path (ln_chunk_stats_kernel, 80 µs, plus ln_combine_kernel and its launch) so that each BLOCK=256 thread loads its share of the CHUNK=8192 chunk once, as 8 float4s kept in registers (n % 4 == 0 and 16-byte alignment checked in Python, with a scalar path otherwise). Compute the chunk sum and then sum((v - chunk_mean)^2) from those registers instead of reading global memory a second time, and replace the 8-level shared-memory tree (16 __syncthreads) with __shfl_xor_sync warp reductions plus one 8-float shared array. Fold the combine into the same kernel with a per-row atomicAdd ticket: the last of the row's 512 blocks, after a __threadfence, does the exact Chan combine M2 = sum_c [M2_c + n_c (mean_c - mean)^2] over the row's partials with warp shuffles, writes mean and rstd, and resets the ticket to 0. The normalize step then costs one fmaf((x - m) * rs, w, b) per element.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/best_of_n-s0/best.py
"""LayerNorm, NVRTC form.

Statistics: one block per (row, chunk of CHUNK = BLOCK*4*ITEMS floats). Each thread loads its ITEMS
float4s once into registers; the block computes the chunk sum and then sum((v - chunk_mean)^2)
from those registers (two-pass, stable on offset data) with warp-shuffle reductions. The last block
of each row (atomic ticket after __threadfence) does the exact Chan combine
M2 = sum_c [M2_c + n_c (mean_c - mean)^2] over the row's partials, writes mean/rstd and resets the
ticket to 0. Normalize: each thread owns one float4 column of the row, keeps weight/bias in
registers and walks all rows (reverse order, to hit the tail of x still in L2)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;      // tune: 128 256 512 1024
constexpr int ITEMS = 8;        // tune: 2 4 8 16
constexpr int EW_BLOCK = 256;   // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4;   // tune: 1 2 4 8
constexpr int CHUNK = BLOCK * 4 * ITEMS;
constexpr int NWARPS = BLOCK / 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over BLOCK threads (a multiple of 32, at most 1024); every thread gets the
// result. `sh` holds NWARPS floats and may be reused right after the call.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float t = (lane < NWARPS) ? sh[lane] : 0.0f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

template <bool VEC>
__device__ __forceinline__ void stats_body(const float* __restrict__ x, long long N, int nchunks,
                                           float eps, float* __restrict__ part_sum,
                                           float* __restrict__ part_m2, int* __restrict__ ticket,
                                           float* __restrict__ mean_out,
                                           float* __restrict__ rstd_out, float* sh,
                                           int* last_flag) {
    const int b = blockIdx.x;
    const int r = b / nchunks;
    const int c = b - r * nchunks;
    const long long start = (long long)c * CHUNK;
    const long long rem = N - start;
    const int n = rem < (long long)CHUNK ? (int)rem : CHUNK;
    const float* xc = x + (long long)r * N + start;

    // Load the thread's share of the chunk once, into registers.
    float4 v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int e = (k * BLOCK + (int)threadIdx.x) * 4;
        if (VEC) {
            // n % 4 == 0 on this path, so e < n means the whole float4 is in range.
            v[k] = (e < n) ? __ldg(reinterpret_cast<const float4*>(xc + e))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        } else {
            v[k].x = (e + 0 < n) ? __ldg(xc + e + 0) : 0.0f;
            v[k].y = (e + 1 < n) ? __ldg(xc + e + 1) : 0.0f;
            v[k].z = (e + 2 < n) ? __ldg(xc + e + 2) : 0.0f;
            v[k].w = (e + 3 < n) ? __ldg(xc + e + 3) : 0.0f;
        }
    }

    // Pass 1 (registers): chunk sum.
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float sum = block_sum(s, sh);
    const float mean = sum / (float)n;

    // Pass 2 (registers): sum of squared deviations from the chunk mean.
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int e = (k * BLOCK + (int)threadIdx.x) * 4;
        const float dx = (e + 0 < n) ? v[k].x - mean : 0.0f;
        const float dy = (e + 1 < n) ? v[k].y - mean : 0.0f;
        const float dz = (e + 2 < n) ? v[k].z - mean : 0.0f;
        const float dw = (e + 3 < n) ? v[k].w - mean : 0.0f;
        q = fmaf(dx, dx, q);
        q = fmaf(dy, dy, q);
        q = fmaf(dz, dz, q);
        q = fmaf(dw, dw, q);
    }
    const float m2 = block_sum(q, sh);

    if (threadIdx.x == 0) {
        part_sum[b] = sum;
        part_m2[b] = m2;
        __threadfence();
        const int t = atomicAdd(ticket + r, 1);
        *last_flag = (t == nchunks - 1) ? 1 : 0;
    }
    __syncthreads();
    if (*last_flag == 0) return;

    // Last block of the row: exact Chan combine of the row's partials.
    __threadfence();
    const float* ps = part_sum + (long long)r * nchunks;
    const float* pm = part_m2 + (long long)r * nchunks;
    float s2 = 0.0f;
    for (int i = threadIdx.x; i < nchunks; i += BLOCK) s2 += __ldcg(ps + i);
    const float rmean = block_sum(s2, sh) / (float)N;
    float q2 = 0.0f;
    for (int i = threadIdx.x; i < nchunks; i += BLOCK) {
        const long long rr = N - (long long)i * CHUNK;
        const float nc = (float)(rr < (long long)CHUNK ? rr : (long long)CHUNK);
        const float d = __ldcg(ps + i) / nc - rmean;
        q2 += fmaf(nc * d, d, __ldcg(pm + i));
    }
    const float M2 = block_sum(q2, sh);
    if (threadIdx.x == 0) {
        mean_out[r] = rmean;
        rstd_out[r] = 1.0f / sqrtf(M2 / (float)N + eps);
        ticket[r] = 0;
    }
}

__global__ void __launch_bounds__(BLOCK)
ln_stats_vec_kernel(const float* __restrict__ x, long long N, int nchunks, float eps,
                    float* __restrict__ part_sum, float* __restrict__ part_m2,
                    int* __restrict__ ticket, float* __restrict__ mean_out,
                    float* __restrict__ rstd_out) {
    __shared__ float sh[NWARPS];
    __shared__ int last_flag;
    stats_body<true>(x, N, nchunks, eps, part_sum, part_m2, ticket, mean_out, rstd_out, sh,
                     &last_flag);
}

__global__ void __launch_bounds__(BLOCK)
ln_stats_scalar_kernel(const float* __restrict__ x, long long N, int nchunks, float eps,
                       float* __restrict__ part_sum, float* __restrict__ part_m2,
                       int* __restrict__ ticket, float* __restrict__ mean_out,
                       float* __restrict__ rstd_out) {
    __shared__ float sh[NWARPS];
    __shared__ int last_flag;
    stats_body<false>(x, N, nchunks, eps, part_sum, part_m2, ticket, mean_out, rstd_out, sh,
                      &last_flag);
}

__device__ __forceinline__ float4 ln_apply4(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = fmaf((v.x - m) * rs, w.x, b.x);
    o.y = fmaf((v.y - m) * rs, w.y, b.y);
    o.z = fmaf((v.z - m) * rs, w.z, b.z);
    o.w = fmaf((v.w - m) * rs, w.w, b.w);
    return o;
}

// Each thread owns float4 column j: weight/bias in registers, walks all rows (last row first,
// since the tail of x is what the statistics kernel left in L2).
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const float* __restrict__ weight,
                        const float* __restrict__ bias, float* __restrict__ y, int rows,
                        long long N4) {
    const long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    if (j >= N4) return;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4 w = __ldg(reinterpret_cast<const float4*>(weight) + j);
    const float4 bb = __ldg(reinterpret_cast<const float4*>(bias) + j);
    int r = rows - 1;
    for (; r >= ROW_UNROLL - 1; r -= ROW_UNROLL) {
        float4 xv[ROW_UNROLL];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) xv[u] = __ldcs(x4 + (long long)(r - u) * N4 + j);
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const float m = __ldg(mean + (r - u)), rs = __ldg(rstd + (r - u));
            __stcs(y4 + (long long)(r - u) * N4 + j, ln_apply4(xv[u], m, rs, w, bb));
        }
    }
    for (; r >= 0; --r) {
        const float4 xv = __ldcs(x4 + (long long)r * N4 + j);
        const float m = __ldg(mean + r), rs = __ldg(rstd + r);
        __stcs(y4 + (long long)r * N4 + j, ln_apply4(xv, m, rs, w, bb));
    }
}

// Scalar fallback (N % 4 != 0 or misaligned pointers): each thread owns one column element.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                           const float* __restrict__ rstd, const float* __restrict__ weight,
                           const float* __restrict__ bias, float* __restrict__ y, int rows,
                           long long N) {
    const long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x;
    if (j >= N) return;
    const float w = __ldg(weight + j), bb = __ldg(bias + j);
    int r = rows - 1;
    for (; r >= ROW_UNROLL - 1; r -= ROW_UNROLL) {
        float xv[ROW_UNROLL];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) xv[u] = __ldcs(x + (long long)(r - u) * N + j);
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const float m = __ldg(mean + (r - u)), rs = __ldg(rstd + (r - u));
            __stcs(y + (long long)(r - u) * N + j, fmaf((xv[u] - m) * rs, w, bb));
        }
    }
    for (; r >= 0; --r) {
        const float xv = __ldcs(x + (long long)r * N + j);
        const float m = __ldg(mean + r), rs = __ldg(rstd + r);
        __stcs(y + (long long)r * N + j, fmaf((xv - m) * rs, w, bb));
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_stats_vec_kernel", "ln_stats_scalar_kernel",
                                     "ln_normalize_vec_kernel", "ln_normalize_scalar_kernel"])
BLOCK, ITEMS, EW_BLOCK = (kernels.constant(n) for n in ("BLOCK", "ITEMS", "EW_BLOCK"))
CHUNK = BLOCK * 4 * ITEMS


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        # Per-row atomic tickets (workspace, not output): zero between launches, since the last
        # block of each row resets its ticket.
        self._ticket = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.ln.weight, self.ln.bias
        if w is None or b is None:
            raise ValueError("layernorm: elementwise affine weight and bias are required")
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
        if rows * nchunks >= (1 << 31) - 1 or rows >= (1 << 31) - 1:
            raise ValueError("layernorm: too many (row, chunk) blocks")

        t = self._ticket
        if t is None or t.device != x.device or t.numel() < rows:
            t = torch.zeros(rows, device=x.device, dtype=torch.int32)
            self._ticket = t

        part_sum = torch.empty(rows * nchunks, device=x.device, dtype=torch.float32)
        part_m2 = torch.empty_like(part_sum)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)

        vec = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
               and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        eps = float(self.ln.eps)

        stats = kernels.ln_stats_vec_kernel if vec else kernels.ln_stats_scalar_kernel
        stats.launch(rows * nchunks, BLOCK, x, n, nchunks, eps, part_sum, part_m2, t, mean,
                     rstd)

        if vec:
            n4 = n // 4
            kernels.ln_normalize_vec_kernel.launch((n4 + EW_BLOCK - 1) // EW_BLOCK, EW_BLOCK,
                                                   x, mean, rstd, w, b, y, rows, n4)
        else:
            kernels.ln_normalize_scalar_kernel.launch((n + EW_BLOCK - 1) // EW_BLOCK, EW_BLOCK,
                                                      x, mean, rstd, w, b, y, rows, n)
        return y
