# evokernel: best kernel of run best_of_n-s1 for problem layernorm
# candidate d7cfa3a2b7b409b8, generation 2, operator idea; speedup 38.560x over eager (8.3321 ms -> 0.2161 ms, 171% of floor)
# idea: [compute] Cut per-element instructions and a launch: (1) rewrite ln_chunk_stats_kernel to read its chunk (CHUNK=16384, tune 8192 16384 32768) as float4 __ldg with 32-bit indices and 4 independent accumulators per thread, replace both shared-memory tree reductions with __shfl_xor_sync warp reductions plus one 32-float smem stage, and fuse ln_combine_kernel into it via a per-row atomicAdd ticket (after __threadfence) so the last-arriving block of each row does the Chan merge M2 = sum_c[M2_c + n_c(mean_c - mean)^2] with warp shuffles and writes mean/rstd, resetting the ticket; (2) in ln_normalize_kernel precompute per row in a 16-entry shared array the pair (mean, rstd), then per element compute d = x - mean (exact-ish, keeps offset data stable) and y = fmaf(d * rstd, w, b) on float4 data with a 32-bit flat index (row loop unrolled by 4 inside, 4 float4 loads in flight per thread), i.e. 3 FP ops per element instead of sub/mul/mul/add plus 64-bit index math and grid-stride bookkeeping.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/best_of_n-s1/best.py
"""LayerNorm, NVRTC form, two kernels:
1. ln_stats_kernel: one block per (row, chunk). It loads the chunk once into registers as float4,
   computes the chunk sum and then the centered M2 from registers (two-pass, so offset data stays
   stable), using warp-shuffle reductions. The last block of each row to finish (found with an
   atomic ticket after __threadfence) merges the row's chunk stats (Chan merge), writes mean and
   rstd, and resets the ticket.
2. ln_normalize_vec_kernel: each thread owns one float4 column of the normalized dims, keeps
   weight and bias in registers, and loops over rows (mean and rstd staged in shared memory),
   with RU rows of float4 loads in flight: y = fmaf((x - mean) * rstd, w, b).
Scalar fallbacks cover a row length that is not a multiple of 4 and misaligned pointers."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;     // tune: 256 512 1024
constexpr int CHUNK = 16384;   // tune: 8192 16384 32768
constexpr int EW_BLOCK = 256;  // tune: 128 256 512 1024
constexpr int ROW_TILE = 16;   // tune: 8 16 32
constexpr int RU = 4;          // tune: 2 4 8
constexpr int ITEMS = CHUNK / (4 * BLOCK);
static_assert(CHUNK % (4 * BLOCK) == 0, "CHUNK must be a multiple of 4*BLOCK");
static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32");
static_assert(ITEMS >= 1, "ITEMS must be >= 1");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Warp shuffles, then one 32-float shared stage; every thread gets the block's sum.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    constexpr int NW = BLOCK / 32;
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = (lane < NW) ? sh[lane] : 0.0f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

// Block b handles row r = b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// The chunk stays in registers (ITEMS float4 per thread); element index e = 4*(k*BLOCK+tid)+lane4.
// vec != 0 requires N % 4 == 0 and a 16-byte-aligned x.
extern "C" __global__ void __launch_bounds__(BLOCK)
ln_stats_kernel(const float* __restrict__ x, long long N, int nchunks, int vec, float eps,
                float* __restrict__ chunk_sum, float* __restrict__ chunk_m2,
                int* __restrict__ ticket, float* __restrict__ mean_out,
                float* __restrict__ rstd_out) {
    __shared__ float sh[32];
    __shared__ int s_last;
    const int tid = threadIdx.x;
    const int b = blockIdx.x;
    const int r = b / nchunks;
    const int c = b - r * nchunks;
    const long long start = (long long)c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + (long long)r * N + start;

    float4 v[ITEMS];
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xc);
        const int n4 = n >> 2;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = k * BLOCK + tid;
            v[k] = (i < n4) ? __ldg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int e = (k * BLOCK + tid) * 4;
            v[k].x = (e < n) ? __ldg(xc + e) : 0.0f;
            v[k].y = (e + 1 < n) ? __ldg(xc + e + 1) : 0.0f;
            v[k].z = (e + 2 < n) ? __ldg(xc + e + 2) : 0.0f;
            v[k].w = (e + 3 < n) ? __ldg(xc + e + 3) : 0.0f;
        }
    }

    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        s0 += v[k].x; s1 += v[k].y; s2 += v[k].z; s3 += v[k].w;
    }
    const float sum = block_sum((s0 + s1) + (s2 + s3), sh);
    const float mean = sum / (float)n;

    float q0 = 0.0f, q1 = 0.0f, q2 = 0.0f, q3 = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int e = (k * BLOCK + tid) * 4;
        const float dx = (e < n) ? v[k].x - mean : 0.0f;
        const float dy = (e + 1 < n) ? v[k].y - mean : 0.0f;
        const float dz = (e + 2 < n) ? v[k].z - mean : 0.0f;
        const float dw = (e + 3 < n) ? v[k].w - mean : 0.0f;
        q0 = fmaf(dx, dx, q0); q1 = fmaf(dy, dy, q1);
        q2 = fmaf(dz, dz, q2); q3 = fmaf(dw, dw, q3);
    }
    const float m2 = block_sum((q0 + q1) + (q2 + q3), sh);

    if (tid == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
        __threadfence();
        const int t = atomicAdd(ticket + r, 1);
        s_last = (t == nchunks - 1) ? 1 : 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    // Last block of row r: mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2].
    const float* cs = chunk_sum + (long long)r * nchunks;
    const float* cm = chunk_m2 + (long long)r * nchunks;
    float a = 0.0f;
    for (int k = tid; k < nchunks; k += BLOCK) a += __ldcg(cs + k);
    const float rmean = block_sum(a, sh) / (float)N;
    float qq = 0.0f;
    for (int k = tid; k < nchunks; k += BLOCK) {
        const long long rest = N - (long long)k * CHUNK;
        const float n_c = (float)(rest < CHUNK ? rest : CHUNK);
        const float d = __ldcg(cs + k) / n_c - rmean;
        qq += fmaf(n_c * d, d, __ldcg(cm + k));
    }
    const float M2 = block_sum(qq, sh);
    if (tid == 0) {
        const float var = M2 / (float)N;
        mean_out[r] = rmean;
        rstd_out[r] = 1.0f / sqrtf(var + eps);
        ticket[r] = 0;
    }
}

__device__ __forceinline__ float4 ln4(const float4 a, const float m, const float rs,
                                      const float4 w, const float4 b) {
    float4 o;
    o.x = fmaf((a.x - m) * rs, w.x, b.x);
    o.y = fmaf((a.y - m) * rs, w.y, b.y);
    o.z = fmaf((a.z - m) * rs, w.z, b.z);
    o.w = fmaf((a.w - m) * rs, w.w, b.w);
    return o;
}

// Thread j owns float4 column j (j < N4) of every row; weight/bias live in registers.
extern "C" __global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const float* __restrict__ weight,
                        const float* __restrict__ bias, float* __restrict__ y, int rows,
                        long long N4) {
    __shared__ float s_mean[ROW_TILE];
    __shared__ float s_rstd[ROW_TILE];
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    const int j = blockIdx.x * EW_BLOCK + threadIdx.x;
    const bool active = j < N4;
    float4 wv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), bv = wv;
    if (active) {
        wv = __ldg(w4 + j);
        bv = __ldg(b4 + j);
    }
    for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {
        const int nr = (rows - r0 < ROW_TILE) ? (rows - r0) : ROW_TILE;
        __syncthreads();
        for (int t = threadIdx.x; t < nr; t += EW_BLOCK) {
            s_mean[t] = mean[r0 + t];
            s_rstd[t] = rstd[r0 + t];
        }
        __syncthreads();
        if (active) {
            const float4* px = x4 + (long long)r0 * N4 + j;
            float4* py = y4 + (long long)r0 * N4 + j;
            int k = 0;
            for (; k + RU <= nr; k += RU) {
                float4 a[RU];
#pragma unroll
                for (int u = 0; u < RU; ++u) a[u] = __ldg(px + u * N4);
#pragma unroll
                for (int u = 0; u < RU; ++u)
                    __stcs(py + u * N4, ln4(a[u], s_mean[k + u], s_rstd[k + u], wv, bv));
                px += RU * N4;
                py += RU * N4;
            }
            for (; k < nr; ++k) {
                const float4 a = __ldg(px);
                __stcs(py, ln4(a, s_mean[k], s_rstd[k], wv, bv));
                px += N4;
                py += N4;
            }
        }
    }
}

// Scalar fallback: thread j owns column j (j < N) of every row.
extern "C" __global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                           const float* __restrict__ rstd, const float* __restrict__ weight,
                           const float* __restrict__ bias, float* __restrict__ y, int rows,
                           long long N) {
    __shared__ float s_mean[ROW_TILE];
    __shared__ float s_rstd[ROW_TILE];
    const int j = blockIdx.x * EW_BLOCK + threadIdx.x;
    const bool active = j < N;
    float wv = 0.0f, bv = 0.0f;
    if (active) {
        wv = __ldg(weight + j);
        bv = __ldg(bias + j);
    }
    for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {
        const int nr = (rows - r0 < ROW_TILE) ? (rows - r0) : ROW_TILE;
        __syncthreads();
        for (int t = threadIdx.x; t < nr; t += EW_BLOCK) {
            s_mean[t] = mean[r0 + t];
            s_rstd[t] = rstd[r0 + t];
        }
        __syncthreads();
        if (active) {
            const float* px = x + (long long)r0 * N + j;
            float* py = y + (long long)r0 * N + j;
            int k = 0;
            for (; k + RU <= nr; k += RU) {
                float a[RU];
#pragma unroll
                for (int u = 0; u < RU; ++u) a[u] = __ldg(px + u * N);
#pragma unroll
                for (int u = 0; u < RU; ++u)
                    py[u * N] = fmaf((a[u] - s_mean[k + u]) * s_rstd[k + u], wv, bv);
                px += RU * N;
                py += RU * N;
            }
            for (; k < nr; ++k) {
                const float a = __ldg(px);
                *py = fmaf((a - s_mean[k]) * s_rstd[k], wv, bv);
                px += N;
                py += N;
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_stats_kernel", "ln_normalize_vec_kernel",
                                     "ln_normalize_scalar_kernel"])
BLOCK, CHUNK, EW_BLOCK = (kernels.constant(n) for n in ("BLOCK", "CHUNK", "EW_BLOCK"))

# Per-device scratch tickets (one int per row). They start at zero, and the last block of each
# row resets its ticket to zero, so they are zero again between calls.
_tickets = {}


def _get_tickets(device, rows):
    t = _tickets.get(device)
    if t is None or t.numel() < rows:
        t = torch.zeros(max(rows, 64), device=device, dtype=torch.int32)
        _tickets[device] = t
    return t


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
        if rows * nchunks >= 1 << 31 or n >= 1 << 31 or rows >= 1 << 31:
            raise ValueError("layernorm: problem too large for 32-bit block/column indices")
        vec = int(n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                  and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=torch.float32)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty_like(mean)
        tickets = _get_tickets(x.device, rows)
        kernels.ln_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, vec,
                                       float(self.ln.eps), chunk_sum, chunk_m2, tickets,
                                       mean, rstd)
        if vec:
            n4 = n // 4
            grid = (n4 + EW_BLOCK - 1) // EW_BLOCK
            kernels.ln_normalize_vec_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4)
        else:
            grid = (n + EW_BLOCK - 1) // EW_BLOCK
            kernels.ln_normalize_scalar_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                      rows, n)
        return y
