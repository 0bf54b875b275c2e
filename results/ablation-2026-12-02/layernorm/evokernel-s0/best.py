# evokernel: best kernel of run evokernel-s0 for problem layernorm
# candidate f1b8a0ee2cb7bb36, generation 2, operator idea; speedup 38.061x over eager (8.3333 ms -> 0.2189 ms, 174% of floor)
# idea: [control_flow] Turn ln_chunk_stats_kernel into a persistent, software-pipelined grid-stride loop: launch 132*3 blocks, replacing today's 4096 blocks in about 10 waves. Each block loops over chunk ids b += gridDim.x and issues the float4 loads of its next chunk into a second register array (VEC=8 per stage, so two stages of 32 floats each) before it reduces the current chunk, which hides the load latency behind the two block reductions. Track (row, chunk) incrementally instead of with 64-bit b / nchunks and b % nchunks. Add a template<bool FULL> instantiation with no per-element `e < n` predicates in the sum and M2 loops, chosen on the host when N % CHUNK == 0; it always is here, since 4M % 8192 == 0. Keep the guarded path only for a partial last chunk.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/evokernel-s0/best.py
"""LayerNorm, NVRTC form.
1) ln_chunk_stats_full / ln_chunk_stats_part: persistent grid (SMs * STATS_BPS blocks). Each block
   walks work items j = blockIdx.x + i * gridDim.x. Item j maps to chunk column
   c = nchunks-1 - j/rows and row r = j % rows, stepped incrementally with no per-item division.
   Two register stages (VEC float4 each) ping-pong: the next chunk's loads are issued before the
   current chunk's two block reductions (sum, then sum((x - chunk_mean)^2)), so they hide the
   load latency. Chunks are read in descending column order, so the last ~tens of MB read
   (the start of every row) are still in L2 when the normalize kernel begins there. The FULL
   instantiation (N % CHUNK == 0, aligned) has no tail predicates at all.
2) ln_combine_kernel: per-row exact combine of the chunk statistics.
3) ln_normalize_vec_kernel: float4 streaming normalize; each thread owns a float4 column j,
   loads weight/bias once and applies them across the rows of its row-range (unrolled loads),
   so weight/bias are not re-read from HBM for every row."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;          // tune: 64 128 256 512 1024
constexpr int VEC = 4;              // tune: 2 4 8 16
constexpr int CHUNK = BLOCK * VEC * 4;
constexpr int STATS_BPS = 4;        // tune: 2 3 4 6 8
// Register cap for the persistent stats kernel: aim for STATS_BPS resident blocks per SM, but
// never ask for fewer registers than two float4[VEC] stages plus addressing need (no spills).
constexpr int STATS_REG_EST = 8 * VEC + 24;
constexpr int STATS_FIT_T = 2048 / BLOCK;
constexpr int STATS_FIT_R = 65536 / (BLOCK * STATS_REG_EST);
constexpr int STATS_MINB0 = STATS_BPS < STATS_FIT_T ? STATS_BPS : STATS_FIT_T;
constexpr int STATS_MINB1 = STATS_MINB0 < STATS_FIT_R ? STATS_MINB0 : STATS_FIT_R;
constexpr int STATS_MINB = STATS_MINB1 > 0 ? STATS_MINB1 : 1;
constexpr int COMBINE_BLOCK = 256;  // tune: 64 128 256 512 1024
constexpr int EW_BLOCK = 256;       // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4;       // tune: 1 2 4 8

static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32");
static_assert(COMBINE_BLOCK % 32 == 0 && COMBINE_BLOCK <= 1024, "COMBINE_BLOCK must be a multiple of 32");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum; every thread gets the (bit-identical) result. `sh` holds >= NT/32 floats and
// must not be reused by another call without a barrier in between (use distinct arrays).
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* sh) {
    constexpr int NW = NT / 32;
    v = warp_sum(v);
    const int lane = threadIdx.x & 31;
    if (lane == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    const float t = (lane < NW) ? sh[lane] : 0.0f;
    return warp_sum(t);
}

__device__ __forceinline__ int ln_chunk_len(long long N, int c) {
    const long long rest = N - (long long)c * (long long)CHUNK;
    return rest < (long long)CHUNK ? (int)rest : CHUNK;
}

// Load chunk starting at xc (n valid floats) into registers: thread t takes float4 t + k*BLOCK.
// FULL: n == CHUNK and xc is 16-byte aligned, so no predicates at all.
template <bool FULL>
__device__ __forceinline__ void ln_load_chunk(float4 (&v)[VEC], const float* __restrict__ xc,
                                              int n, int aligned) {
    if (FULL) {
        const float4* x4 = reinterpret_cast<const float4*>(xc);
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = __ldg(x4 + threadIdx.x + k * BLOCK);
    } else if (aligned) {
        // N % 4 == 0 and x 16-byte aligned: row and chunk starts are float4 aligned, n % 4 == 0.
        const float4* x4 = reinterpret_cast<const float4*>(xc);
        const int n4 = n >> 2;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const int i = threadIdx.x + k * BLOCK;
            v[k] = (i < n4) ? __ldg(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const int e = 4 * (threadIdx.x + k * BLOCK);
            v[k].x = (e + 0 < n) ? xc[e + 0] : 0.0f;
            v[k].y = (e + 1 < n) ? xc[e + 1] : 0.0f;
            v[k].z = (e + 2 < n) ? xc[e + 2] : 0.0f;
            v[k].w = (e + 3 < n) ? xc[e + 3] : 0.0f;
        }
    }
}

// Chunk sum, then sum((x - chunk_mean)^2) from the registers; thread 0 writes both.
// sh_s / sh_q alternate, so back-to-back calls in a loop need no extra barrier: every read of
// sh_s precedes the sh_q barrier, and every read of sh_q precedes the next call's sh_s barrier.
template <bool FULL>
__device__ __forceinline__ void ln_reduce_chunk(const float4 (&v)[VEC], int n, float* sh_s,
                                                float* sh_q, float* __restrict__ out_s,
                                                float* __restrict__ out_q) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float sum = block_sum<BLOCK>(s, sh_s);
    const float mean = sum / (float)(FULL ? CHUNK : n);

    float q = 0.0f;
    if (FULL || n == CHUNK) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float dx = v[k].x - mean, dy = v[k].y - mean;
            const float dz = v[k].z - mean, dw = v[k].w - mean;
            q += fmaf(dx, dx, dy * dy) + fmaf(dz, dz, dw * dw);
        }
    } else {
        // Partial last chunk of a row only.
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const int e = 4 * (threadIdx.x + k * BLOCK);
            const float dx = (e + 0 < n) ? v[k].x - mean : 0.0f;
            const float dy = (e + 1 < n) ? v[k].y - mean : 0.0f;
            const float dz = (e + 2 < n) ? v[k].z - mean : 0.0f;
            const float dw = (e + 3 < n) ? v[k].w - mean : 0.0f;
            q += fmaf(dx, dx, dy * dy) + fmaf(dz, dz, dw * dw);
        }
    }
    const float m2 = block_sum<BLOCK>(q, sh_q);
    if (threadIdx.x == 0) {
        *out_s = sum;
        *out_q = m2;
    }
}

// Persistent loop. Work item j = blockIdx.x + i * gridDim.x is chunk c = nchunks-1 - j / rows of
// row r = j % rows (column-major, columns descending: the row starts are read last and stay in
// L2 for the normalize kernel, which starts there). Advancing j by gridDim.x = step_c * rows +
// step_r is done incrementally. Two register stages ping-pong: the next chunk is loaded before
// the current one is reduced. All control flow here is block-uniform.
template <bool FULL>
__device__ __forceinline__ void ln_chunk_stats_loop(const float* __restrict__ x, long long N,
                                                    int rows, int nchunks, int step_r,
                                                    int step_c, int aligned,
                                                    float* __restrict__ chunk_sum,
                                                    float* __restrict__ chunk_m2,
                                                    float* sh_s, float* sh_q) {
    int r = (int)(blockIdx.x % (unsigned)rows);
    int c = nchunks - 1 - (int)(blockIdx.x / (unsigned)rows);
    if (c < 0) return;
    const int wrap = rows - step_r;   // r + step_r >= rows  <=>  r >= wrap (no int overflow)

    float4 va[VEC], vb[VEC];
    int n = FULL ? CHUNK : ln_chunk_len(N, c);
    ln_load_chunk<FULL>(va, x + (long long)r * N + (long long)c * CHUNK, n, aligned);
    for (;;) {
        // Stage A holds (r, c): prefetch the next item into stage B, then reduce A.
        int r1, c1 = c - step_c;
        if (r >= wrap) { r1 = r - wrap; --c1; } else { r1 = r + step_r; }
        int n1 = CHUNK;
        if (c1 >= 0) {
            if (!FULL) n1 = ln_chunk_len(N, c1);
            ln_load_chunk<FULL>(vb, x + (long long)r1 * N + (long long)c1 * CHUNK, n1, aligned);
        }
        {
            const long long o = (long long)r * nchunks + c;
            ln_reduce_chunk<FULL>(va, n, sh_s, sh_q, chunk_sum + o, chunk_m2 + o);
        }
        if (c1 < 0) break;
        r = r1; c = c1; n = n1;

        // Stage B holds (r, c): prefetch the next item into stage A, then reduce B.
        c1 = c - step_c;
        if (r >= wrap) { r1 = r - wrap; --c1; } else { r1 = r + step_r; }
        n1 = CHUNK;
        if (c1 >= 0) {
            if (!FULL) n1 = ln_chunk_len(N, c1);
            ln_load_chunk<FULL>(va, x + (long long)r1 * N + (long long)c1 * CHUNK, n1, aligned);
        }
        {
            const long long o = (long long)r * nchunks + c;
            ln_reduce_chunk<FULL>(vb, n, sh_s, sh_q, chunk_sum + o, chunk_m2 + o);
        }
        if (c1 < 0) break;
        r = r1; c = c1; n = n1;
    }
}

// N % CHUNK == 0 and x 16-byte aligned: every chunk is full, no predicates anywhere.
__global__ void __launch_bounds__(BLOCK, STATS_MINB)
ln_chunk_stats_full(const float* __restrict__ x, long long N, int rows, int nchunks, int step_r,
                    int step_c, int aligned, float* __restrict__ chunk_sum,
                    float* __restrict__ chunk_m2) {
    __shared__ float sh_s[32];
    __shared__ float sh_q[32];
    ln_chunk_stats_loop<true>(x, N, rows, nchunks, step_r, step_c, aligned, chunk_sum, chunk_m2,
                              sh_s, sh_q);
}

// General case: guarded loads, guarded M2 only for a partial last chunk of a row.
__global__ void __launch_bounds__(BLOCK, STATS_MINB)
ln_chunk_stats_part(const float* __restrict__ x, long long N, int rows, int nchunks, int step_r,
                    int step_c, int aligned, float* __restrict__ chunk_sum,
                    float* __restrict__ chunk_m2) {
    __shared__ float sh_s[32];
    __shared__ float sh_q[32];
    ln_chunk_stats_loop<false>(x, N, rows, nchunks, step_r, step_c, aligned, chunk_sum,
                               chunk_m2, sh_s, sh_q);
}

// One block per row. mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2]
// (exact decomposition of sum((x - mean)^2)); rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void __launch_bounds__(COMBINE_BLOCK)
ln_combine_kernel(const float* __restrict__ chunk_sum, const float* __restrict__ chunk_m2,
                  long long N, long long nchunks, float eps, float* __restrict__ mean_out,
                  float* __restrict__ rstd_out) {
    __shared__ float sh_s[32];
    __shared__ float sh_q[32];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += COMBINE_BLOCK) s += cs[c];
    const float mean = block_sum<COMBINE_BLOCK>(s, sh_s) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += COMBINE_BLOCK) {
        const long long rest = N - c * (long long)CHUNK;
        const float n_c = (float)(rest < (long long)CHUNK ? rest : (long long)CHUNK);
        const float d = cs[c] / n_c - mean;
        q += cm[c] + n_c * d * d;
    }
    const float m2 = block_sum<COMBINE_BLOCK>(q, sh_q);
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

// float4 path (N % 4 == 0, all pointers 16-byte aligned). Thread owns float4 column j of the
// row and rows [blockIdx.y * rows_per_block, ...): weight/bias loaded once, reused for each row.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                        const float* __restrict__ rstd, const float* __restrict__ weight,
                        const float* __restrict__ bias, float* __restrict__ y,
                        long long rows, long long N4, long long rows_per_block) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    const long long r0 = (long long)blockIdx.y * rows_per_block;
    long long r1 = r0 + rows_per_block;
    if (r1 > rows) r1 = rows;
    for (long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; j < N4;
         j += (long long)gridDim.x * EW_BLOCK) {
        const float4 wv = __ldg(w4 + j);
        const float4 bv = __ldg(b4 + j);
        long long r = r0;
        for (; r + ROW_UNROLL <= r1; r += ROW_UNROLL) {
            float4 v[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) v[u] = __ldcs(x4 + (r + u) * N4 + j);
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const float m = __ldg(mean + r + u);
                const float rs = __ldg(rstd + r + u);
                __stcs(y4 + (r + u) * N4 + j, ln_apply4(v[u], m, rs, wv, bv));
            }
        }
        for (; r < r1; ++r) {
            const float4 v = __ldcs(x4 + r * N4 + j);
            __stcs(y4 + r * N4 + j, ln_apply4(v, __ldg(mean + r), __ldg(rstd + r), wv, bv));
        }
    }
}

// Scalar fallback (any N / alignment), same structure.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                           const float* __restrict__ rstd, const float* __restrict__ weight,
                           const float* __restrict__ bias, float* __restrict__ y,
                           long long rows, long long N, long long rows_per_block) {
    const long long r0 = (long long)blockIdx.y * rows_per_block;
    long long r1 = r0 + rows_per_block;
    if (r1 > rows) r1 = rows;
    for (long long j = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; j < N;
         j += (long long)gridDim.x * EW_BLOCK) {
        const float wv = weight[j];
        const float bv = bias[j];
        long long r = r0;
        for (; r + ROW_UNROLL <= r1; r += ROW_UNROLL) {
            float v[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) v[u] = x[(r + u) * N + j];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const float m = mean[r + u];
                const float rs = rstd[r + u];
                y[(r + u) * N + j] = fmaf((v[u] - m) * rs, wv, bv);
            }
        }
        for (; r < r1; ++r) {
            y[r * N + j] = fmaf((x[r * N + j] - mean[r]) * rstd[r], wv, bv);
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_full", "ln_chunk_stats_part",
                                     "ln_combine_kernel", "ln_normalize_vec_kernel",
                                     "ln_normalize_scalar_kernel"])
BLOCK, VEC, COMBINE_BLOCK, EW_BLOCK, STATS_BPS = (
    kernels.constant(n) for n in ("BLOCK", "VEC", "COMBINE_BLOCK", "EW_BLOCK", "STATS_BPS"))
CHUNK = BLOCK * VEC * 4
_TARGET_BLOCKS = 2048
_SM_COUNT = {}


def _sm_count(device):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def _ew_grid(cols, rows):
    gx = min((cols + EW_BLOCK - 1) // EW_BLOCK, 1 << 30)
    gy = min(rows, 65535, max(1, (_TARGET_BLOCKS + gx - 1) // gx))
    rpb = (rows + gy - 1) // gy
    gy = (rows + rpb - 1) // rpb
    return gx, gy, rpb


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
        if x.numel() == 0 or n == 0:
            return y
        rows = x.numel() // n
        nchunks = (n + CHUNK - 1) // CHUNK
        if rows * nchunks >= 1 << 31:
            raise ValueError("layernorm: too many (row, chunk) blocks")
        aligned = int(n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                      and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        total = rows * nchunks
        grid = max(1, min(total, _sm_count(x.device) * STATS_BPS))
        step_r, step_c = grid % rows, grid // rows
        stats = (kernels.ln_chunk_stats_full if (aligned and n % CHUNK == 0)
                 else kernels.ln_chunk_stats_part)
        stats.launch(grid, BLOCK, x, n, rows, nchunks, step_r, step_c, aligned,
                     chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, COMBINE_BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        if aligned:
            n4 = n // 4
            gx, gy, rpb = _ew_grid(n4, rows)
            kernels.ln_normalize_vec_kernel.launch((gx, gy), EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4, rpb)
        else:
            gx, gy, rpb = _ew_grid(n, rows)
            kernels.ln_normalize_scalar_kernel.launch((gx, gy), EW_BLOCK, x, mean, rstd, w, b,
                                                      y, rows, n, rpb)
        return y
