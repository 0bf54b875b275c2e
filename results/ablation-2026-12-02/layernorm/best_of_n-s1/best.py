# evokernel: best kernel of run best_of_n-s1 for problem layernorm
# candidate bf415cfa5501c1c3, generation 1, operator idea; speedup 36.082x over eager (8.0806 ms -> 0.2240 ms, 170% of floor)
# idea: [dtypes] Vectorize with float4: rewrite ln_normalize_kernel (84% of the time, now at about 1.2 TB/s) so each thread owns one float4 column index j in [0, N/4). It loads weight4[j] and bias4[j] into registers once, then loops over all rows r, doing a 128-bit __ldg of x4[r*N/4 + j] and a 128-bit store to y4. Use 32-bit int indexing within a row, one block of EW_BLOCK threads per EW_BLOCK float4 columns (grid = N/4/EW_BLOCK = 16384 blocks for 256 threads), and fall back to a scalar tail loop when N % 4 != 0 or the pointers are not 16-byte aligned. Also switch both passes of ln_chunk_stats_kernel to float4 loads, with FP32 accumulators and the same two-pass structure, keeping the chunk-relative variance so the offset distribution still passes.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/best_of_n-s1/best.py
"""LayerNorm, NVRTC form: two-pass statistics per (row, chunk) block with float4 loads, a per-row
combine, then a float4 column-owning normalize + affine kernel (each thread loads its weight/bias
float4 once and loops over all rows). Scalar fallback when N % 4 != 0 or pointers are misaligned."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;    // tune: 64 128 256 512 1024
constexpr int CHUNK = 8192;   // tune: 1024 2048 4096 8192 16384 32768
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int ROW_UNROLL = 4; // tune: 1 2 4 8

static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of 32");
static_assert(CHUNK % 4 == 0, "CHUNK must be a multiple of 4");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Warp-shuffle tree reduction over all BLOCK threads; every thread gets the result.
// `sh` holds 32 floats.
__device__ float block_reduce_sum(float v, float* sh) {
    constexpr int NW = BLOCK / 32;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float t = (lane < NW) ? sh[lane] : 0.0f;
    t = warp_sum(t);
    __syncthreads();
    return t;
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// Two passes over the chunk: its sum, then sum((x - chunk_mean)^2) (stable on offset data).
// float4 loads when the chunk start is 16-byte aligned, scalar tail for the rest.
__global__ void ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks,
                                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[32];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const bool vec = (((unsigned long long)xc) & 15ull) == 0ull;
    const int n4 = vec ? (n >> 2) : 0;
    const float4* xc4 = reinterpret_cast<const float4*>(xc);

    float s = 0.0f;
    for (int i = threadIdx.x; i < n4; i += BLOCK) {
        const float4 v = __ldg(xc4 + i);
        s += (v.x + v.y) + (v.z + v.w);
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += BLOCK) s += __ldg(xc + i);
    const float sum = block_reduce_sum(s, sh);
    const float mean = sum / (float)n;

    float q = 0.0f;
    for (int i = threadIdx.x; i < n4; i += BLOCK) {
        const float4 v = __ldg(xc4 + i);
        const float d0 = v.x - mean, d1 = v.y - mean, d2 = v.z - mean, d3 = v.w - mean;
        float qa = d0 * d0;
        qa = fmaf(d1, d1, qa);
        float qb = d2 * d2;
        qb = fmaf(d3, d3, qb);
        q += qa + qb;
    }
    for (int i = 4 * n4 + threadIdx.x; i < n; i += BLOCK) {
        const float d = __ldg(xc + i) - mean;
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
    __shared__ float sh[32];
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

// Vectorized normalize: thread owns float4 column j in [0, N4); loads weight/bias once, then
// streams every row with 128-bit loads/stores, ROW_UNROLL rows in flight at a time.
// Requires N % 4 == 0 and 16-byte aligned x, y, weight, bias (checked on the host).
__global__ void ln_normalize_vec4_kernel(const float* __restrict__ x,
                                         const float* __restrict__ mean,
                                         const float* __restrict__ rstd,
                                         const float* __restrict__ weight,
                                         const float* __restrict__ bias, float* __restrict__ y,
                                         long long rows, int N4) {
    const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
    const float4* __restrict__ w4 = reinterpret_cast<const float4*>(weight);
    const float4* __restrict__ b4 = reinterpret_cast<const float4*>(bias);
    float4* __restrict__ y4 = reinterpret_cast<float4*>(y);
    for (int j = blockIdx.x * EW_BLOCK + threadIdx.x; j < N4; j += gridDim.x * EW_BLOCK) {
        const float4 w = __ldg(w4 + j);
        const float4 bb = __ldg(b4 + j);
        const float4* xp = x4 + j;
        float4* yp = y4 + j;
        long long r = 0;
        for (; r + ROW_UNROLL <= rows; r += ROW_UNROLL) {
            float4 v[ROW_UNROLL];
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k) v[k] = __ldg(xp + (r + k) * (long long)N4);
#pragma unroll
            for (int k = 0; k < ROW_UNROLL; ++k) {
                const float m = __ldg(mean + r + k), rs = __ldg(rstd + r + k);
                float4 o;
                o.x = fmaf((v[k].x - m) * rs, w.x, bb.x);
                o.y = fmaf((v[k].y - m) * rs, w.y, bb.y);
                o.z = fmaf((v[k].z - m) * rs, w.z, bb.z);
                o.w = fmaf((v[k].w - m) * rs, w.w, bb.w);
                yp[(r + k) * (long long)N4] = o;
            }
        }
        for (; r < rows; ++r) {
            const float4 v = __ldg(xp + r * (long long)N4);
            const float m = __ldg(mean + r), rs = __ldg(rstd + r);
            float4 o;
            o.x = fmaf((v.x - m) * rs, w.x, bb.x);
            o.y = fmaf((v.y - m) * rs, w.y, bb.y);
            o.z = fmaf((v.z - m) * rs, w.z, bb.z);
            o.w = fmaf((v.w - m) * rs, w.w, bb.w);
            yp[r * (long long)N4] = o;
        }
    }
}

// Scalar fallback: y = (x - mean[r]) * rstd[r] * weight[i] + bias[i].
// 2D grid: y over rows, x over the row; grid-stride loops in both, so any grid size is correct.
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
                and tuple(x.shape[x.dim() - w.dim():]) == tuple(w.shape)):
            raise ValueError("layernorm: x must be a float32 CUDA tensor whose trailing dims "
                             "are normalized_shape")
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        if w.dtype != torch.float32 or b.dtype != torch.float32:
            raise ValueError("layernorm: weight and bias must be float32")
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
        n4 = n // 4
        vec_ok = (n % 4 == 0 and n4 < (1 << 30)
                  and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                  and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        if vec_ok:
            grid = (n4 + EW_BLOCK - 1) // EW_BLOCK
            kernels.ln_normalize_vec4_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                    rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
