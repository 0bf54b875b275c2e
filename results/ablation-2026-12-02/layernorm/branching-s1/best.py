# evokernel: best kernel of run branching-s1 for problem layernorm
# candidate 3f813c0e0f1c2889, generation 1, operator idea; speedup 35.151x over eager (8.0825 ms -> 0.2299 ms, 175% of floor)
# idea: [memory] Rewrite ln_normalize_kernel so weight/bias are read from HBM once instead of once per row (it now re-streams 32 MiB of w+b for each of the 16 rows, about 512 MiB of extra traffic, which is why it takes 440 us): use a 1D grid over column tiles where each thread owns VEC=4 consecutive columns (tune 4/8, i.e. 1-2 float4), loads its float4 of weight and bias into registers once, then loops over all rows r, loading mean[r]/rstd[r] (broadcast, or staged once per block in shared memory) and doing a 128-bit float4 load of x and a float4 store of y per row (EW_BLOCK=256, grid = N/(VEC*EW_BLOCK) = 4096 blocks, with a scalar tail guard when N % VEC != 0 or the pointers are not 16-byte aligned).
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/branching-s1/best.py
"""LayerNorm, NVRTC form: two-pass statistics per (row, chunk) block (float4 loads), a per-row
combine, then a column-tiled normalize + affine kernel that reads weight/bias once into registers
and loops over all rows with 128-bit loads/stores."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;     // tune: 64 128 256 512 1024
constexpr int CHUNK = 8192;    // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 256;  // tune: 128 256 512 1024
constexpr int VEC4 = 1;        // tune: 1 2
constexpr int ROW_UNROLL = 2;  // tune: 1 2 4

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
// vec != 0 means x is 16-byte aligned and N % 4 == 0, so every chunk start is 16-byte aligned.
__global__ void __launch_bounds__(BLOCK) ln_chunk_stats_kernel(
    const float* __restrict__ x, long long N, long long nchunks, float* __restrict__ chunk_sum,
    float* __restrict__ chunk_m2, int vec) {
    __shared__ float sh[BLOCK];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const float4* xc4 = reinterpret_cast<const float4*>(xc);
    const int n4 = vec ? (n >> 2) : 0;
    float s = 0.0f;
    for (int i = threadIdx.x; i < n4; i += BLOCK) {
        const float4 v = xc4[i];
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += BLOCK) s += xc[i];
    const float sum = block_reduce_sum(s, sh);
    const float mean = sum / (float)n;
    float q = 0.0f;
    for (int i = threadIdx.x; i < n4; i += BLOCK) {
        const float4 v = xc4[i];
        const float d0 = v.x - mean, d1 = v.y - mean, d2 = v.z - mean, d3 = v.w - mean;
        q = fmaf(d0, d0, q);
        q = fmaf(d1, d1, q);
        q = fmaf(d2, d2, q);
        q = fmaf(d3, d3, q);
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += BLOCK) {
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

__device__ __forceinline__ float4 ln4(const float4 xv, const float m, const float s,
                                      const float4 w, const float4 b) {
    float4 o;
    o.x = fmaf((xv.x - m) * s, w.x, b.x);
    o.y = fmaf((xv.y - m) * s, w.y, b.y);
    o.z = fmaf((xv.z - m) * s, w.z, b.z);
    o.w = fmaf((xv.w - m) * s, w.w, b.w);
    return o;
}

// Vectorized normalize: x, y, weight, bias 16-byte aligned and N % 4 == 0; n4 = N / 4.
// A tile is EW_BLOCK * VEC4 float4 columns; thread t of a tile owns float4 columns
// base + v * EW_BLOCK (v < VEC4), loads their weight/bias once, then walks all rows (last row
// first, ROW_UNROLL rows of loads in flight before the stores). Tiles are taken from the end of
// the row first, so the earliest blocks touch the data the stats kernel read last (still in L2).
// Grid-stride over tiles, so any grid size is correct.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_vec_kernel(
    const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ y,
    long long rows, long long n4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    const long long tile_elems = (long long)EW_BLOCK * VEC4;
    const long long ntiles = (n4 + tile_elems - 1) / tile_elems;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (long long tile = (long long)(gridDim.x - 1 - blockIdx.x); tile < ntiles;
         tile += gridDim.x) {
        const long long base = tile * tile_elems + threadIdx.x;
        float4 wv[VEC4], bv[VEC4];
        bool ok[VEC4];
#pragma unroll
        for (int v = 0; v < VEC4; ++v) {
            const long long j = base + (long long)v * EW_BLOCK;
            ok[v] = j < n4;
            wv[v] = ok[v] ? __ldg(w4 + j) : zero4;
            bv[v] = ok[v] ? __ldg(b4 + j) : zero4;
        }
        long long r = rows;
        while (r >= ROW_UNROLL) {
            r -= ROW_UNROLL;
            float4 xv[ROW_UNROLL][VEC4];
            float m[ROW_UNROLL], s[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const long long rr = r + (ROW_UNROLL - 1 - u);
                m[u] = __ldg(mean + rr);
                s[u] = __ldg(rstd + rr);
                const float4* xr = x4 + rr * n4 + base;
#pragma unroll
                for (int v = 0; v < VEC4; ++v)
                    xv[u][v] = ok[v] ? __ldcs(xr + v * EW_BLOCK) : zero4;
            }
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const long long rr = r + (ROW_UNROLL - 1 - u);
                float4* yr = y4 + rr * n4 + base;
#pragma unroll
                for (int v = 0; v < VEC4; ++v)
                    if (ok[v]) __stcs(yr + v * EW_BLOCK, ln4(xv[u][v], m[u], s[u], wv[v], bv[v]));
            }
        }
        while (r > 0) {
            --r;
            const float m = __ldg(mean + r), s = __ldg(rstd + r);
            const float4* xr = x4 + r * n4 + base;
            float4* yr = y4 + r * n4 + base;
            float4 xv[VEC4];
#pragma unroll
            for (int v = 0; v < VEC4; ++v) xv[v] = ok[v] ? __ldcs(xr + v * EW_BLOCK) : zero4;
#pragma unroll
            for (int v = 0; v < VEC4; ++v)
                if (ok[v]) __stcs(yr + v * EW_BLOCK, ln4(xv[v], m, s, wv[v], bv[v]));
        }
    }
}

// Scalar fallback (N % 4 != 0 or unaligned pointers): thread owns column i, reads weight/bias
// once, walks all rows. Grid-stride over columns, so any grid size is correct.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_scalar_kernel(
    const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ y,
    long long rows, long long N) {
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float w = weight[i], b = bias[i];
        for (long long r = rows - 1; r >= 0; --r) {
            const long long k = r * N + i;
            y[k] = fmaf((x[k] - __ldg(mean + r)) * __ldg(rstd + r), w, b);
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_combine_kernel",
                                     "ln_normalize_vec_kernel", "ln_normalize_scalar_kernel"])
BLOCK, CHUNK, EW_BLOCK, VEC4 = (kernels.constant(n) for n in ("BLOCK", "CHUNK", "EW_BLOCK",
                                                               "VEC4"))

_MAX_GRID = (1 << 31) - 1


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

        x_vec = (n % 4 == 0) and (x.data_ptr() % 16 == 0)
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, chunk_sum,
                                             chunk_m2, 1 if x_vec else 0)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)

        all_vec = (x_vec and y.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
                   and b.data_ptr() % 16 == 0)
        if all_vec:
            n4 = n // 4
            tile = EW_BLOCK * VEC4
            grid = min((n4 + tile - 1) // tile, _MAX_GRID)
            kernels.ln_normalize_vec_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4)
        else:
            grid = min((n + EW_BLOCK - 1) // EW_BLOCK, _MAX_GRID)
            kernels.ln_normalize_scalar_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                      rows, n)
        return y
