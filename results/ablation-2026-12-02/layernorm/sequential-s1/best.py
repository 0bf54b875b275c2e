# evokernel: best kernel of run sequential-s1 for problem layernorm
# candidate 8ea6ca27d342353e, generation 12, operator idea; speedup 36.002x over eager (8.3451 ms -> 0.2318 ms, 182% of floor)
# idea: Remap the block index of ln_chunk_stats_vec4_kernel (and the scalar stats kernel) from row-major to column-chunk-major in descending order: with rows = gridDim.x / nchunks (16 here, nchunks = 512), block b handles r = b % rows and c = nchunks - 1 - b / rows, and writes chunk_sum/chunk_m2 at index r * nchunks + c instead of b, so ln_combine_kernel stays unchanged. The stats pass then finishes on the low-column chunks of all 16 rows, so the ~50 MB of x still in L2 are columns 0..~19% of every row. ln_normalize_vec4_kernel's first wave (blocks 0..~791 = columns 0..~39%, with evict-first __ldcs/__stcs traffic) reads exactly those columns across all of its rows, about 50 MB of L2 hits instead of the ~19 MB that the current reverse-row walk gets (only 39% of the columns of rows 13-15). Put the normalize row loop back in forward order with 32-bit row offsets (r * n4 as int, since rows * n4 < 2^31 is checked in Python, with a 64-bit fallback otherwise), because row order no longer decides what hits L2.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/sequential-s1/best.py
"""Layernorm, NVRTC form: two-pass statistics per (row, chunk) block, a per-row combine, then a
column-tiled float4 normalize + affine kernel (weight/bias held in registers across all rows),
with a scalar normalize kernel as the fallback for N % 4 != 0 or unaligned pointers."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;         // tune: 64 128 256 512 1024
constexpr int CHUNK = 8192;        // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 256;      // tune: 128 256 512 1024
constexpr int VEC_PER_THREAD = 2;  // tune: 1 2 4
constexpr int STATS_ITEMS = 8;     // tune: 2 4 8 16
// Floats per (row, chunk) block on the vectorized stats path: BLOCK threads x STATS_ITEMS float4s.
constexpr int VCHUNK = BLOCK * 4 * STATS_ITEMS;

static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");

// Block-wide sum over all BLOCK threads (BLOCK a multiple of 32): warp-shuffle butterfly inside
// each warp, per-warp partials through `sh` (needs BLOCK / 32 floats), then every warp reduces
// the partials, so every thread gets the result. Ends with a barrier so `sh` can be reused.
__device__ float block_reduce_sum(float v, float* sh) {
    constexpr int NW = BLOCK / 32;
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = (lane < NW) ? sh[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    __syncthreads();
    return t;
}

// Column-chunk-major, descending: with rows = gridDim.x / nchunks, block blk handles row
// r = blk % rows, chunk c = nchunks - 1 - blk / rows: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// The last blocks to run cover the low columns of every row, so those stay in L2 for the
// normalize pass's first wave. Results go to index b = r * nchunks + c (row-major, for combine).
// Two passes over the chunk: its sum, then sum((x - chunk_mean)^2) (stable on offset data).
__global__ void ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK];
    // rows * nchunks < 2^31 is checked in Python, so 32-bit block arithmetic is exact.
    const int blk = (int)blockIdx.x;
    const int nch = (int)nchunks;
    const int rows = (int)gridDim.x / nch;
    const int r = blk % rows, c = nch - 1 - blk / rows;
    const long long b = (long long)r * nchunks + c;  // row-major output index
    const long long start = (long long)c * CHUNK;
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

// Vectorized stats: requires N % 4 == 0 and 16-byte aligned x. Column-chunk-major, descending
// (as in the scalar kernel): block blk handles row r = blk % rows, chunk
// c = nchunks - 1 - blk / rows: float4s [c*VCHUNK/4, min((c+1)*VCHUNK/4, N4)), and writes its
// results at b = r * nchunks + c. Each thread
// loads its STATS_ITEMS float4s once into registers (plain __ldg so the lines stay in L2 for the
// normalize pass), then both passes (sum, then sum((v - chunk_mean)^2)) run from registers.
__global__ void ln_chunk_stats_vec4_kernel(const float* __restrict__ x, long long N4,
                                           long long nchunks, float* __restrict__ chunk_sum,
                                           float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK];
    constexpr int V4 = VCHUNK / 4;
    const int blk = (int)blockIdx.x;
    const int nch = (int)nchunks;
    const int rows = (int)gridDim.x / nch;
    const int r = blk % rows, c = nch - 1 - blk / rows;
    const long long b = (long long)r * nchunks + c;  // row-major output index
    const long long start4 = (long long)c * V4;
    const int n4 = (N4 - start4 < V4) ? (int)(N4 - start4) : V4;
    const float4* xc = reinterpret_cast<const float4*>(x) + r * N4 + start4;
    float4 v[STATS_ITEMS];
#pragma unroll
    for (int k = 0; k < STATS_ITEMS; ++k) {
        const int i = k * BLOCK + (int)threadIdx.x;
        if (i < n4) v[k] = __ldg(xc + i);
        else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < STATS_ITEMS; ++k) s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    const float sum = block_reduce_sum(s, sh);
    const float mean = sum / (float)(4 * n4);
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < STATS_ITEMS; ++k) {
        const int i = k * BLOCK + (int)threadIdx.x;
        if (i < n4) {
            const float dx = v[k].x - mean, dy = v[k].y - mean;
            const float dz = v[k].z - mean, dw = v[k].w - mean;
            q = fmaf(dx, dx, q);
            q = fmaf(dy, dy, q);
            q = fmaf(dz, dz, q);
            q = fmaf(dw, dw, q);
        }
    }
    const float m2 = block_reduce_sum(q, sh);
    if (threadIdx.x == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

// One block per row. mean = sum(chunk sums) / N; M2 = sum_c [M2_c + n_c (mean_c - mean)^2]
// (exact decomposition of sum((x - mean)^2)); rstd = 1 / sqrt(M2 / N + eps) (biased variance).
// `chunk` is the number of floats per chunk used by the stats kernel that ran (CHUNK or VCHUNK).
__global__ void ln_combine_kernel(const float* __restrict__ chunk_sum,
                                  const float* __restrict__ chunk_m2, long long N,
                                  long long nchunks, long long chunk, float eps,
                                  float* __restrict__ mean_out, float* __restrict__ rstd_out) {
    __shared__ float sh[BLOCK];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_reduce_sum(s, sh) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * chunk;
        const float n_c = (float)(rest < chunk ? rest : chunk);
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

// Vectorized normalize: requires N % 4 == 0, 16-byte aligned x, y, weight, bias, N/4 < 2^30.
// Block b owns float4 columns [b*EW_BLOCK*VEC_PER_THREAD, (b+1)*EW_BLOCK*VEC_PER_THREAD) of
// every row; each thread keeps its VEC_PER_THREAD float4s of weight and bias in registers and
// walks all rows in forward order, so weight/bias are read once in total. In-row offsets are
// 32-bit; row offsets are IdxT (int when rows * N4 < 2^31, else long long).
template <typename IdxT>
__device__ __forceinline__ void ln_normalize_vec4_body(const float* __restrict__ x,
                                                       const float* __restrict__ mean,
                                                       const float* __restrict__ rstd,
                                                       const float* __restrict__ weight,
                                                       const float* __restrict__ bias,
                                                       float* __restrict__ y, IdxT rows,
                                                       int n4) {
    const int base = (int)blockIdx.x * (EW_BLOCK * VEC_PER_THREAD) + (int)threadIdx.x;
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4 wv[VEC_PER_THREAD], bv[VEC_PER_THREAD];
#pragma unroll
    for (int v = 0; v < VEC_PER_THREAD; ++v) {
        const int i = base + v * EW_BLOCK;
        if (i < n4) {
            wv[v] = __ldg(w4 + i);
            bv[v] = __ldg(b4 + i);
        } else {
            wv[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            bv[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    // Forward row order: the stats pass ends on the low columns of every row, so the blocks of
    // the first wave (low columns) find their x in L2 whatever the row order.
    for (IdxT r = 0; r < rows; ++r) {
        const float m = __ldg(mean + r), rs = __ldg(rstd + r);
        const IdxT off = r * (IdxT)n4;
        const float4* xr = reinterpret_cast<const float4*>(x) + off;
        float4* yr = reinterpret_cast<float4*>(y) + off;
        float4 xv[VEC_PER_THREAD];
#pragma unroll
        for (int v = 0; v < VEC_PER_THREAD; ++v) {
            const int i = base + v * EW_BLOCK;
            if (i < n4) xv[v] = __ldcs(xr + i);
            else xv[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int v = 0; v < VEC_PER_THREAD; ++v) {
            const int i = base + v * EW_BLOCK;
            if (i < n4) {
                float4 o;
                o.x = fmaf((xv[v].x - m) * rs, wv[v].x, bv[v].x);
                o.y = fmaf((xv[v].y - m) * rs, wv[v].y, bv[v].y);
                o.z = fmaf((xv[v].z - m) * rs, wv[v].z, bv[v].z);
                o.w = fmaf((xv[v].w - m) * rs, wv[v].w, bv[v].w);
                __stcs(yr + i, o);
            }
        }
    }
}

// 64-bit row offsets: for rows * N4 >= 2^31.
__global__ void ln_normalize_vec4_kernel(const float* __restrict__ x,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd,
                                         const float* __restrict__ weight,
                                         const float* __restrict__ bias, float* __restrict__ y,
                                         long long rows, long long N4) {
    ln_normalize_vec4_body<long long>(x, mean, rstd, weight, bias, y, rows, (int)N4);
}

// 32-bit row offsets: requires rows * N4 < 2^31 (checked in Python).
__global__ void ln_normalize_vec4_i32_kernel(const float* __restrict__ x,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd,
                                             const float* __restrict__ weight,
                                             const float* __restrict__ bias,
                                             float* __restrict__ y, long long rows,
                                             long long N4) {
    ln_normalize_vec4_body<int>(x, mean, rstd, weight, bias, y, (int)rows, (int)N4);
}

// Scalar fallback: y = (x - mean[r]) * rstd[r] * weight[i] + bias[i], for row r and flat index
// i within the row. 2D grid: y over rows, x over the row; grid-stride loops in both.
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

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_chunk_stats_vec4_kernel",
                                     "ln_combine_kernel", "ln_normalize_vec4_kernel",
                                     "ln_normalize_vec4_i32_kernel", "ln_normalize_kernel"])
BLOCK, CHUNK, EW_BLOCK, VEC_PER_THREAD, STATS_ITEMS = (
    kernels.constant(n) for n in ("BLOCK", "CHUNK", "EW_BLOCK", "VEC_PER_THREAD",
                                  "STATS_ITEMS"))
VCHUNK = BLOCK * 4 * STATS_ITEMS  # matches the source's VCHUNK


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
        stats_vec = n % 4 == 0 and x.data_ptr() % 16 == 0
        chunk = VCHUNK if stats_vec else CHUNK
        nchunks = (n + chunk - 1) // chunk
        if rows * nchunks >= 1 << 31:
            raise ValueError("layernorm: too many (row, chunk) blocks")
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        if stats_vec:
            kernels.ln_chunk_stats_vec4_kernel.launch(rows * nchunks, BLOCK, x, n // 4, nchunks,
                                                      chunk_sum, chunk_m2)
        else:
            kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks,
                                                 chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks, chunk,
                                         float(self.ln.eps), mean, rstd)
        use_vec = (n % 4 == 0 and n // 4 < (1 << 30)
                   and all(t.data_ptr() % 16 == 0 for t in (x, y, w, b)))
        if use_vec:
            n4 = n // 4
            per_block = EW_BLOCK * VEC_PER_THREAD
            grid = (n4 + per_block - 1) // per_block
            kern = (kernels.ln_normalize_vec4_i32_kernel if rows * n4 < (1 << 31)
                    else kernels.ln_normalize_vec4_kernel)
            kern.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
