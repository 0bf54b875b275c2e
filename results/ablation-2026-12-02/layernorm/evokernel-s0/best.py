# evokernel: best kernel of run evokernel-s0 for problem layernorm
# candidate d156fb7df747493f, generation 1, operator idea; speedup 37.227x over eager (8.0846 ms -> 0.2172 ms, 165% of floor)
# idea: [memory] Make ln_chunk_stats_kernel read x exactly once and keep the chunk in registers: with CHUNK=8192 and BLOCK=256, each thread loads CHUNK/BLOCK/4 = 8 float4 values (coalesced: thread t takes float4 index t + k*BLOCK) into a register array with a compile-time-unrolled loop and a guarded tail. It computes the chunk sum with a warp-shuffle plus one-smem-slot-per-warp reduction, then forms sum((v-mean)^2) from those same registers and reduces it the same way. This replaces the second global/L1 pass and the log2(BLOCK)-step shared-memory tree with two short shuffle reductions. Keep the per-thread register count as a template/constexpr derived from CHUNK/BLOCK, so every tuned pair stays correct and the array stays unspilled (at most 64 floats per thread).
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/evokernel-s0/best.py
"""LayerNorm, NVRTC form. Statistics: one block per (row, chunk), with the chunk loaded once
into registers (VPT float4 per thread, CHUNK = BLOCK * VPT * 4). Two passes come from those
registers: the sum, then sum((v - mean)^2). Both use warp-shuffle plus one-slot-per-warp
reductions. A per-row combine follows (exact M2 decomposition). Normalize: vectorized float4.
Each thread owns a column of float4s and loops over the rows, so weight and bias are read
once in total instead of once per row."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 512;    // tune: 64 128 256 512 1024
constexpr int VPT = 4;        // tune: 2 4 8 16
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int EW_ROWS = 4;    // tune: 1 2 4 8
constexpr int CHUNK = BLOCK * VPT * 4;   // elements per stats block (derived, not tuned)
constexpr int NWARPS = BLOCK / 32;

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK must be a warp multiple");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over BLOCK threads; every thread gets the result. `sh` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = (lane < NWARPS) ? sh[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();   // sh may be reused by the next call
    return r;
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// The chunk is loaded once into registers (thread t takes float4 t + k*BLOCK), then two passes
// over the registers: the chunk sum, then sum((x - chunk_mean)^2).
__global__ void __launch_bounds__(BLOCK)
ln_chunk_stats_kernel(const float* __restrict__ x, long long N, long long nchunks, int vec,
                      float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[32];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * (long long)CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const int t = threadIdx.x;

    float4 v[VPT];
    if (vec && n == CHUNK) {
        const float4* x4 = reinterpret_cast<const float4*>(xc);
#pragma unroll
        for (int k = 0; k < VPT; ++k) v[k] = __ldg(x4 + t + k * BLOCK);
    } else if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xc);
        const int n4 = n >> 2;   // n % 4 == 0 whenever vec is set
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int q = t + k * BLOCK;
            v[k] = (q < n4) ? __ldg(x4 + q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int e = (t + k * BLOCK) * 4;
            v[k].x = (e < n) ? xc[e] : 0.0f;
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
    if (n == CHUNK) {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const float dx = v[k].x - mean, dy = v[k].y - mean;
            const float dz = v[k].z - mean, dw = v[k].w - mean;
            q = fmaf(dx, dx, q);
            q = fmaf(dy, dy, q);
            q = fmaf(dz, dz, q);
            q = fmaf(dw, dw, q);
        }
    } else {
#pragma unroll
        for (int k = 0; k < VPT; ++k) {
            const int e = (t + k * BLOCK) * 4;
            const float dx = (e < n) ? v[k].x - mean : 0.0f;
            const float dy = (e + 1 < n) ? v[k].y - mean : 0.0f;
            const float dz = (e + 2 < n) ? v[k].z - mean : 0.0f;
            const float dw = (e + 3 < n) ? v[k].w - mean : 0.0f;
            q = fmaf(dx, dx, q);
            q = fmaf(dy, dy, q);
            q = fmaf(dz, dz, q);
            q = fmaf(dw, dw, q);
        }
    }
    const float m2 = block_sum(q, sh);
    if (t == 0) {
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
    __shared__ float sh[32];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_sum(s, sh) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * (long long)CHUNK;
        const float n_c = (float)(rest < CHUNK ? rest : CHUNK);
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

__device__ __forceinline__ float4 ln_apply4(float4 v, float m, float rs, float4 w, float4 b) {
    float4 o;
    o.x = (v.x - m) * rs * w.x + b.x;
    o.y = (v.y - m) * rs * w.y + b.y;
    o.z = (v.z - m) * rs * w.z + b.z;
    o.w = (v.w - m) * rs * w.w + b.w;
    return o;
}

// Vectorized normalize: thread owns float4 column i (grid-stride), loads weight/bias once and
// walks all rows, EW_ROWS independent row loads in flight at a time.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec4_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const float* __restrict__ weight,
                         const float* __restrict__ bias, float* __restrict__ y,
                         long long rows, long long N4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N4;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float4 wv = __ldg(w4 + i), bv = __ldg(b4 + i);
        long long r = 0;
        for (; r + EW_ROWS <= rows; r += EW_ROWS) {
            float4 xv[EW_ROWS];
#pragma unroll
            for (int j = 0; j < EW_ROWS; ++j) xv[j] = __ldg(x4 + (r + j) * N4 + i);
#pragma unroll
            for (int j = 0; j < EW_ROWS; ++j) {
                const float m = __ldg(mean + r + j), rs = __ldg(rstd + r + j);
                y4[(r + j) * N4 + i] = ln_apply4(xv[j], m, rs, wv, bv);
            }
        }
        for (; r < rows; ++r) {
            const float4 xv = __ldg(x4 + r * N4 + i);
            const float m = __ldg(mean + r), rs = __ldg(rstd + r);
            y4[r * N4 + i] = ln_apply4(xv, m, rs, wv, bv);
        }
    }
}

// Scalar fallback (N % 4 != 0 or misaligned pointers): same column-owner structure.
__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const float* __restrict__ weight,
                    const float* __restrict__ bias, float* __restrict__ y,
                    long long rows, long long N) {
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float wv = weight[i], bv = bias[i];
        for (long long r = 0; r < rows; ++r) {
            y[r * N + i] = (x[r * N + i] - mean[r]) * rstd[r] * wv + bv;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_combine_kernel",
                                     "ln_normalize_vec4_kernel", "ln_normalize_kernel"])
BLOCK, VPT, EW_BLOCK = (kernels.constant(n) for n in ("BLOCK", "VPT", "EW_BLOCK"))
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
        vec = (n % 4 == 0) and all(t.data_ptr() % 16 == 0 for t in (x, y, w, b))
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks,
                                             1 if vec else 0, chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        if vec:
            n4 = n // 4
            grid = min((n4 + EW_BLOCK - 1) // EW_BLOCK, 1 << 30)
            kernels.ln_normalize_vec4_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                    rows, n4)
        else:
            grid = min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30)
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
