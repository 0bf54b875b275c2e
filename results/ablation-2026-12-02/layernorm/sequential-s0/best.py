# evokernel: best kernel of run sequential-s0 for problem layernorm
# candidate 63f284c6398001c7, generation 1, operator idea; speedup 35.022x over eager (8.0815 ms -> 0.2308 ms, 176% of floor)
# idea: [memory] Rewrite ln_normalize_kernel as a column-major, float4-vectorized sweep. Each thread owns 4 consecutive columns i (one float4), loads weight[i..i+3] and bias[i..i+3] into registers once, and then loops over all rows r (stride N floats, with mean/rstd for every row staged in shared memory at block start). In each iteration it issues 4 rows' float4 loads of x at once (unrolled by 4, using __ldcs streaming loads) before doing the FMA math and the __stcs float4 stores to y. Use grid = ceil(N/4 / EW_BLOCK) 1-D blocks (4096 blocks of 256 for N=4M) with a scalar tail for N % 4, so that the 32 MB of weight+bias is read from DRAM once instead of 16 times through L2, the 64-bit index math is hoisted, and every warp moves 512 B per request (today the kernel spends 440 us, about 3.4x the 128 us floor for this pass).
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
__global__ void ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[BLOCK];
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
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks, chunk_sum,
                                             chunk_m2)
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
