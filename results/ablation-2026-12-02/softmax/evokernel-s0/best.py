# evokernel: best kernel of run evokernel-s0 for problem softmax
# candidate 74c3635f5dbfd046, generation 1, operator idea; speedup 1.837x over eager (1.0516 ms -> 0.5726 ms, 119% of floor)
# idea: [memory] Vectorized two-pass online softmax: one 1024-thread block per row, pass 1 reads the row as float4 (__ldg, 16 float4 per thread, 4 independent loads in flight per unrolled step) keeping a per-thread running (max, rescaled sum) pair that is merged with warp shuffles and a 32-entry shared array, then pass 2 re-reads the now L2-resident row as float4 and writes expf(x - M) * invS with float4 __stcs stores; this cuts the three scalar row sweeps to two float4 sweeps and replaces the log-depth __syncthreads tree reductions with shuffles.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/evokernel-s0/best.py
"""Softmax (dim=1), NVRTC form: one block per row, two float4 sweeps.
Pass 1: per-thread online (max, rescaled sum) over chunks of UNROLL independent float4 loads,
merged with warp shuffles and a 32-entry shared array. Pass 2: walks the row's chunks in
reverse order (the most recently read data is the likeliest to still be in L2), re-reads with
evict-first loads and writes exp(x - M) * (1/S) with streaming float4 stores."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;  // tune: 256 512 1024
constexpr int UNROLL = 4;    // tune: 2 4 8

#define NEG_INF (-__int_as_float(0x7f800000))

// max that propagates NaN like PyTorch
__device__ __forceinline__ float nanmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

// Merge (m2, s2) into (m, s): s is a sum of exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nanmax(m, m2);
    const float ref = (M == NEG_INF) ? 0.0f : M;   // avoid (-inf) - (-inf)
    s = s * expf(m - ref) + s2 * expf(m2 - ref);
    m = M;
}

// Block-wide merge of (m, s); every thread gets the result. BLOCK is a multiple of 32.
__device__ __forceinline__ void block_merge(float& m, float& s, float* shm, float* shs) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, m2, s2);
    }
    constexpr int NW = BLOCK / 32;
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    if (lane == 0) { shm[warp] = m; shs[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < NW) ? shm[lane] : NEG_INF;
        s = (lane < NW) ? shs[lane] : 0.0f;
        #pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge_ms(m, s, m2, s2);
        }
        if (lane == 0) { shm[0] = m; shs[0] = s; }
    }
    __syncthreads();
    m = shm[0];
    s = shs[0];
    __syncthreads();   // shm/shs may be reused right after
}

__device__ __forceinline__ float max4(float4 v) {
    return nanmax(nanmax(v.x, v.y), nanmax(v.z, v.w));
}

__device__ __forceinline__ float sumexp4(float4 v, float ref) {
    return (expf(v.x - ref) + expf(v.y - ref)) + (expf(v.z - ref) + expf(v.w - ref));
}

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row.
// vec != 0: cols % 4 == 0 and x, y 16-byte aligned (float4 path); otherwise scalar path.
__global__ void __launch_bounds__(BLOCK)
softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                   long long rows, long long cols, int vec) {
    __shared__ float shm[32];
    __shared__ float shs[32];
    constexpr int STEP = BLOCK * UNROLL;
    const int tid = threadIdx.x;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        float m = NEG_INF;
        float s = 0.0f;
        if (vec) {
            const long long n4 = cols >> 2;
            const float4* xr4 = reinterpret_cast<const float4*>(x + r * cols);
            float4* yr4 = reinterpret_cast<float4*>(y + r * cols);

            // ---- pass 1: online (max, sum) over chunks of UNROLL float4 per thread ----
            for (long long base = tid; base < n4; base += STEP) {
                float4 v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < n4) ? __ldg(xr4 + i)
                                    : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
                }
                float cm = NEG_INF;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) cm = nanmax(cm, max4(v[u]));
                const float M = nanmax(m, cm);
                const float ref = (M == NEG_INF) ? 0.0f : M;
                float t = 0.0f;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) t += sumexp4(v[u], ref);
                s = s * expf(m - ref) + t;
                m = M;
            }
            block_merge(m, s, shm, shs);
            const float ref = (m == NEG_INF) ? 0.0f : m;
            const float inv = 1.0f / s;

            // ---- pass 2: reverse chunk order, L2 re-read, streaming float4 stores ----
            const long long nchunk = (n4 + STEP - 1) / STEP;
            for (long long c = nchunk - 1; c >= 0; --c) {
                const long long base = c * STEP + tid;
                float4 v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < n4) ? __ldcs(xr4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < n4) {
                        float4 o;
                        o.x = expf(v[u].x - ref) * inv;
                        o.y = expf(v[u].y - ref) * inv;
                        o.z = expf(v[u].z - ref) * inv;
                        o.w = expf(v[u].w - ref) * inv;
                        __stcs(yr4 + i, o);
                    }
                }
            }
        } else {
            const float* xr = x + r * cols;
            float* yr = y + r * cols;
            for (long long base = tid; base < cols; base += STEP) {
                float v[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < cols) ? __ldg(xr + i) : NEG_INF;
                }
                float cm = NEG_INF;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) cm = nanmax(cm, v[u]);
                const float M = nanmax(m, cm);
                const float ref = (M == NEG_INF) ? 0.0f : M;
                float t = 0.0f;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) t += expf(v[u] - ref);
                s = s * expf(m - ref) + t;
                m = M;
            }
            block_merge(m, s, shm, shs);
            const float ref = (m == NEG_INF) ? 0.0f : m;
            const float inv = 1.0f / s;
            const long long nchunk = (cols + STEP - 1) / STEP;
            for (long long c = nchunk - 1; c >= 0; --c) {
                const long long base = c * STEP + tid;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < cols) __stcs(yr + i, expf(__ldcs(xr + i) - ref) * inv);
                }
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel"])
BLOCK = kernels.constant("BLOCK")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("softmax: x must be a 2D float32 CUDA tensor (softmax over dim 1)")
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        if rows == 0 or cols == 0:
            return y
        vec = 1 if (cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0) else 0
        kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols, vec)
        return y
