# evokernel: best kernel of run evokernel-s1 for problem layernorm
# candidate 7ee2abda85dfdbf9, generation 1, operator idea; speedup 35.734x over eager (7.9821 ms -> 0.2234 ms, 173% of floor)
# idea: [memory] Make ln_chunk_stats_kernel single-read: with CHUNK=8192 and BLOCK=256 each thread loads its 8 float4s (CHUNK/(4*BLOCK), compile-time unrolled, tail-guarded) into registers once, computes the chunk sum by warp-shuffle + one smem slot per warp, then computes sum((v-mean)^2) from the registers instead of re-reading global memory, and replaces the shared-memory tree reduction with __shfl_xor_sync warp reductions (2 __syncthreads per reduction instead of log2(BLOCK)).
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/evokernel-s1/best.py
"""LayerNorm, NVRTC form: single-read two-pass statistics per (row, chunk) block (chunk held in
registers, warp-shuffle reductions), a per-row combine, then a float4 normalize + affine kernel
that loads each weight/bias float4 once for EW_ROWS rows."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 128;    // tune: 64 128 256 512 1024
constexpr int VPT = 16;       // tune: 2 4 8 16
constexpr int CHUNK = BLOCK * VPT * 4;  // elements per stats block (derived)
constexpr int EW_BLOCK = 256; // tune: 128 256 512 1024
constexpr int EW_ROWS = 4;    // tune: 1 2 4 8 16

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block-wide sum over NT threads (NT a multiple of 32, at most 1024): warp shuffles, one smem
// slot per warp, a final warp shuffle. `sh` holds 33 floats. Every thread gets the result.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* sh) {
    constexpr int NW = (NT + 31) / 32;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = (lane < NW) ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

__device__ __forceinline__ float4 ld_cs(const float4* p) {
    float4 v;
    asm("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void st_cs(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

// Block b handles row b / nchunks, chunk c = b % nchunks: elements [c*CHUNK, min((c+1)*CHUNK, N)).
// Thread t holds elements 4*(j*BLOCK + t) + {0..3}, j < VPT, in registers (one global read);
// the chunk sum, then sum((x - chunk_mean)^2) from the registers (stable on offset data).
__global__ void __launch_bounds__(BLOCK) ln_chunk_stats_kernel(
    const float* __restrict__ x, long long N, long long nchunks, int vec_ok,
    float* __restrict__ chunk_sum, float* __restrict__ chunk_m2) {
    __shared__ float sh[33];
    const long long b = blockIdx.x;
    const long long r = b / nchunks, c = b % nchunks;
    const long long start = c * CHUNK;
    const int n = (N - start < CHUNK) ? (int)(N - start) : CHUNK;
    const float* xc = x + r * N + start;
    const int tid = threadIdx.x;

    float4 v[VPT];
    if (vec_ok && n == CHUNK) {
        const float4* xv = reinterpret_cast<const float4*>(xc);
#pragma unroll
        for (int j = 0; j < VPT; ++j) v[j] = xv[j * BLOCK + tid];
    } else {
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
            const int e = 4 * (j * BLOCK + tid);
            v[j].x = (e + 0 < n) ? xc[e + 0] : 0.0f;
            v[j].y = (e + 1 < n) ? xc[e + 1] : 0.0f;
            v[j].z = (e + 2 < n) ? xc[e + 2] : 0.0f;
            v[j].w = (e + 3 < n) ? xc[e + 3] : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    const float sum = block_sum<BLOCK>(s, sh);
    const float mean = sum / (float)n;

    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
        const int e = 4 * (j * BLOCK + tid);
        const float d0 = (e + 0 < n) ? v[j].x - mean : 0.0f;
        const float d1 = (e + 1 < n) ? v[j].y - mean : 0.0f;
        const float d2 = (e + 2 < n) ? v[j].z - mean : 0.0f;
        const float d3 = (e + 3 < n) ? v[j].w - mean : 0.0f;
        q = fmaf(d0, d0, q);
        q = fmaf(d1, d1, q);
        q = fmaf(d2, d2, q);
        q = fmaf(d3, d3, q);
    }
    const float m2 = block_sum<BLOCK>(q, sh);
    if (tid == 0) {
        chunk_sum[b] = sum;
        chunk_m2[b] = m2;
    }
}

// One block (BLOCK threads) per row. mean = sum(chunk sums) / N;
// M2 = sum_c [M2_c + n_c (mean_c - mean)^2] (exact decomposition of sum((x - mean)^2));
// rstd = 1 / sqrt(M2 / N + eps) (biased variance).
__global__ void __launch_bounds__(BLOCK) ln_combine_kernel(
    const float* __restrict__ chunk_sum, const float* __restrict__ chunk_m2, long long N,
    long long nchunks, float eps, float* __restrict__ mean_out, float* __restrict__ rstd_out) {
    __shared__ float sh[33];
    const long long r = blockIdx.x;
    const float* cs = chunk_sum + r * nchunks;
    const float* cm = chunk_m2 + r * nchunks;
    float s = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) s += cs[c];
    const float mean = block_sum<BLOCK>(s, sh) / (float)N;
    float q = 0.0f;
    for (long long c = threadIdx.x; c < nchunks; c += BLOCK) {
        const long long rest = N - c * CHUNK;
        const float n_c = (float)(rest < CHUNK ? rest : CHUNK);
        const float d = cs[c] / n_c - mean;
        q += cm[c] + n_c * d * d;
    }
    const float m2 = block_sum<BLOCK>(q, sh);
    if (threadIdx.x == 0) {
        const float var = m2 / (float)N;
        mean_out[r] = mean;
        rstd_out[r] = 1.0f / sqrtf(var + eps);
    }
}

// Vectorized normalize (N % 4 == 0, 16-byte aligned pointers). x-grid over groups of EW_ROWS
// rows (fast dimension, so concurrently running blocks share the same weight/bias columns in
// L2), y-grid over float4 columns. Each thread loads its weight/bias float4 once and applies it
// to EW_ROWS rows; x and y are streamed with evict-first hints.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_vec_kernel(
    const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ rstd, const float* __restrict__ weight,
    const float* __restrict__ bias, float* __restrict__ y, long long rows, long long N4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    for (long long j = (long long)blockIdx.y * EW_BLOCK + threadIdx.x; j < N4;
         j += (long long)gridDim.y * EW_BLOCK) {
        const float4 w = w4[j];
        const float4 bb = b4[j];
        for (long long r0 = (long long)blockIdx.x * EW_ROWS; r0 < rows;
             r0 += (long long)gridDim.x * EW_ROWS) {
            float4 v[EW_ROWS];
#pragma unroll
            for (int k = 0; k < EW_ROWS; ++k) {
                if (r0 + k < rows) v[k] = ld_cs(x4 + (r0 + k) * N4 + j);
                else v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < EW_ROWS; ++k) {
                if (r0 + k < rows) {
                    const float m = mean[r0 + k], rs = rstd[r0 + k];
                    float4 o;
                    o.x = fmaf((v[k].x - m) * rs, w.x, bb.x);
                    o.y = fmaf((v[k].y - m) * rs, w.y, bb.y);
                    o.z = fmaf((v[k].z - m) * rs, w.z, bb.z);
                    o.w = fmaf((v[k].w - m) * rs, w.w, bb.w);
                    st_cs(y4 + (r0 + k) * N4 + j, o);
                }
            }
        }
    }
}

// Scalar fallback: y = (x - mean[r]) * rstd[r] * weight[i] + bias[i], for row r and flat index i
// within the row. 2D grid: y over rows, x over the row; grid-stride loops in both.
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
            yr[i] = (xr[i] - m) * rs * weight[i] + bias[i];
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_chunk_stats_kernel", "ln_combine_kernel",
                                     "ln_normalize_vec_kernel", "ln_normalize_kernel"])
BLOCK, VPT, EW_BLOCK, EW_ROWS = (kernels.constant(n)
                                 for n in ("BLOCK", "VPT", "EW_BLOCK", "EW_ROWS"))
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
        vec_ok = (n % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                  and w.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0)
        chunk_sum = torch.empty(rows * nchunks, device=x.device, dtype=x.dtype)
        chunk_m2 = torch.empty_like(chunk_sum)
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)
        kernels.ln_chunk_stats_kernel.launch(rows * nchunks, BLOCK, x, n, nchunks,
                                             1 if vec_ok else 0, chunk_sum, chunk_m2)
        kernels.ln_combine_kernel.launch(rows, BLOCK, chunk_sum, chunk_m2, n, nchunks,
                                         float(self.ln.eps), mean, rstd)
        if vec_ok:
            n4 = n // 4
            gx = min((rows + EW_ROWS - 1) // EW_ROWS, (1 << 31) - 1)
            gy = min((n4 + EW_BLOCK - 1) // EW_BLOCK, 65535)
            kernels.ln_normalize_vec_kernel.launch((gx, gy), EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4)
        else:
            grid = (min((n + EW_BLOCK - 1) // EW_BLOCK, 1 << 30), min(rows, 65535))
            kernels.ln_normalize_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y, rows, n)
        return y
