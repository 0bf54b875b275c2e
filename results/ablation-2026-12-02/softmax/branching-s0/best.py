# evokernel: best kernel of run branching-s0 for problem softmax
# candidate 18926b3c223ed570, generation 1, operator idea; speedup 1.772x over eager (1.0497 ms -> 0.5923 ms, 122% of floor)
# idea: [memory] Two-pass online softmax with vectorized, cache-hinted access: pass 1 reads the row once as float4 (4 independent accumulator pairs per thread, BLOCK = 1024) and computes max and rescaled sum-of-exp together (Welford-style m/s merge), using ld.global.L2::evict_last (or an L2 access-policy window) so the 256 KiB row stays in the 60 MiB L2. Pass 2 re-reads it as float4 with evict_first and writes exp(x-M)*(1/S) with st.global.cs. Launch one persistent 1024-thread block per SM (grid = 132, looping over rows) so that the rows in flight (132 x 256 KiB = 33 MiB, under the 60 MiB L2) mostly hit L2 on the second read, which brings HBM traffic close to one read and one write.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/branching-s0/best.py
"""Softmax (dim=1), NVRTC form. Persistent blocks, one row at a time per block:
pass 1 reads the row once as float4 and computes max and sum-of-exp together (online, chunk
rescaling); part of each thread's share is kept in registers, the rest is tagged evict_last
in L2. Pass 2 re-reads only the non-register part (newest chunks first, evict_first) and writes
exp(x - M) * (1/S) with streaming stores. Falls back to the seed kernel when float4 access is
not possible (cols % 4 != 0 or misaligned pointers)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;        // tune: 256 512 1024
constexpr int CACHE_V4 = 4;        // tune: 0 2 4 8
constexpr int UNROLL = 4;          // tune: 2 4 8
constexpr int BLOCKS_PER_SM = 1;   // tune: 1 2
constexpr int NWARPS = BLOCK / 32;
constexpr int CACHE_ARR = CACHE_V4 > 0 ? CACHE_V4 : 1;
constexpr int MIN_BLOCKS = (BLOCK * BLOCKS_PER_SM <= 2048) ? BLOCKS_PER_SM : 1;

#define NEG_INF (-__int_as_float(0x7f800000))

// ---------------------------------------------------------------------------------------------
// Cache-policy helpers (sm_80+)
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned long long policy_evict_last() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ unsigned long long policy_evict_first() {
    unsigned long long p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ float4 ld_v4(const float4* p, unsigned long long pol) {
    float4 v;
    asm("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
        : "l"(p), "l"(pol));
    return v;
}
__device__ __forceinline__ void st_cs_v4(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w));
}

// ---------------------------------------------------------------------------------------------
// Math helpers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float nmax(float a, float b) {   // propagates NaN like PyTorch
    return (a > b || isnan(a)) ? a : b;
}
__device__ __forceinline__ float max4(float m, float4 v) {
    m = nmax(m, v.x); m = nmax(m, v.y); m = nmax(m, v.z); m = nmax(m, v.w);
    return m;
}
// Reference point for exp: an all -inf max would give (-inf) - (-inf) = NaN; use 0 instead.
__device__ __forceinline__ float safe_ref(float m) { return m == NEG_INF ? 0.0f : m; }
__device__ __forceinline__ float expsum4(float4 v, float ref) {
    return (expf(v.x - ref) + expf(v.y - ref)) + (expf(v.z - ref) + expf(v.w - ref));
}
__device__ __forceinline__ float4 softmax4(float4 v, float M, float inv) {
    return make_float4(expf(v.x - M) * inv, expf(v.y - M) * inv,
                       expf(v.z - M) * inv, expf(v.w - M) * inv);
}
// Merge two (max, sum-of-exp-relative-to-max) pairs.
__device__ __forceinline__ void merge_ms(float& m, float& s, float mo, float so) {
    const float M = nmax(m, mo);
    const float ref = safe_ref(M);
    s = s * expf(m - ref) + so * expf(mo - ref);
    m = M;
}
__device__ __forceinline__ void warp_merge(float& m, float& s) {
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, off);
        const float so = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, mo, so);
    }
}

// ---------------------------------------------------------------------------------------------
// Main kernel: requires cols % 4 == 0 and 16-byte aligned x, y. Persistent over rows.
// Thread tid owns float4 slots tid + k*BLOCK (k in [0, K)) of each row; slots k < CACHE_V4 are
// held in registers between the passes, the others are re-read (from L2) in pass 2.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
softmax_l2_kernel(const float* __restrict__ x, float* __restrict__ y,
                  long long rows, long long cols) {
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float row_stat[2];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const long long n4 = cols >> 2;
    const long long K = (n4 > tid) ? (n4 - tid + BLOCK - 1) / BLOCK : 0;
    const unsigned long long pol_keep = policy_evict_last();
    const unsigned long long pol_drop = policy_evict_first();

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4* xr = reinterpret_cast<const float4*>(x + r * cols) + tid;
        float4* yr = reinterpret_cast<float4*>(y + r * cols) + tid;

        // ---- pass 1a: register-resident slots (issued first, consumed after the stream) ----
        float4 c[CACHE_ARR];
        #pragma unroll
        for (int k = 0; k < CACHE_V4; ++k) {
            if ((long long)k < K) c[k] = ld_v4(xr + (long long)k * BLOCK, pol_drop);
            else c[k] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
        }

        // ---- pass 1b: streamed slots, online max / sum, kept in L2 (evict_last) ----
        float m = NEG_INF, s = 0.0f;
        long long k = CACHE_V4;
        for (; k + UNROLL <= K; k += UNROLL) {
            float4 v[UNROLL];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = ld_v4(xr + (k + u) * BLOCK, pol_keep);
            float cm = m;
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) cm = max4(cm, v[u]);
            const float ref = safe_ref(cm);
            float t = 0.0f;
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) t += expsum4(v[u], ref);
            s = s * expf(m - ref) + t;
            m = cm;
        }
        for (; k < K; ++k) {
            const float4 v = ld_v4(xr + k * BLOCK, pol_keep);
            const float cm = max4(m, v);
            const float ref = safe_ref(cm);
            s = s * expf(m - ref) + expsum4(v, ref);
            m = cm;
        }
        // ---- fold the register-resident slots ----
        if (CACHE_V4 > 0) {
            float cm = m;
            #pragma unroll
            for (int kk = 0; kk < CACHE_V4; ++kk) cm = max4(cm, c[kk]);
            const float ref = safe_ref(cm);
            float t = 0.0f;
            #pragma unroll
            for (int kk = 0; kk < CACHE_V4; ++kk) t += expsum4(c[kk], ref);
            s = s * expf(m - ref) + t;
            m = cm;
        }

        // ---- block merge of (m, s) ----
        warp_merge(m, s);
        if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
        __syncthreads();
        if (warp == 0) {
            float wm = (lane < NWARPS) ? red_m[lane] : NEG_INF;
            float ws = (lane < NWARPS) ? red_s[lane] : 0.0f;
            warp_merge(wm, ws);
            if (lane == 0) { row_stat[0] = wm; row_stat[1] = 1.0f / ws; }
        }
        __syncthreads();
        const float M = row_stat[0];
        const float inv = row_stat[1];

        // ---- pass 2a: re-read streamed slots newest-first (best L2 hit chance), evict_first ----
        long long k2 = K;
        for (; k2 - UNROLL >= (long long)CACHE_V4;) {
            k2 -= UNROLL;
            float4 v[UNROLL];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = ld_v4(xr + (k2 + u) * BLOCK, pol_drop);
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) st_cs_v4(yr + (k2 + u) * BLOCK, softmax4(v[u], M, inv));
        }
        for (; k2 > (long long)CACHE_V4;) {
            --k2;
            const float4 v = ld_v4(xr + k2 * BLOCK, pol_drop);
            st_cs_v4(yr + k2 * BLOCK, softmax4(v, M, inv));
        }
        // ---- pass 2b: register-resident slots ----
        #pragma unroll
        for (int kk = 0; kk < CACHE_V4; ++kk) {
            if ((long long)kk < K) st_cs_v4(yr + (long long)kk * BLOCK, softmax4(c[kk], M, inv));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fallback (seed kernel): scalar, any cols / alignment.
// ---------------------------------------------------------------------------------------------
__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int st = p >> 1; st > 0; st >>= 1) {
        if (threadIdx.x < st && threadIdx.x + st < BLOCK) {
            const float o = sh[threadIdx.x + st];
            const float mm = sh[threadIdx.x];
            sh[threadIdx.x] = (o > mm || isnan(o)) ? o : mm;
        }
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_reduce_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int st = p >> 1; st > 0; st >>= 1) {
        if (threadIdx.x < st && threadIdx.x + st < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + st];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   long long rows, long long cols) {
    __shared__ float sh[BLOCK];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = NEG_INF;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) {
            const float v = xr[i];
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_reduce_max(m, sh);
        float s = 0.0f;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
        s = block_reduce_sum(s, sh);
        for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_l2_kernel", "softmax_row_kernel"])
BLOCK = kernels.constant("BLOCK")
BLOCKS_PER_SM = kernels.constant("BLOCKS_PER_SM")

_SM_COUNT = {}


def _sm_count(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    n = _SM_COUNT.get(idx)
    if n is None:
        n = torch.cuda.get_device_properties(idx).multi_processor_count
        _SM_COUNT[idx] = n
    return n


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
        if cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            grid = max(1, min(rows, _sm_count(x.device) * BLOCKS_PER_SM))
            kernels.softmax_l2_kernel.launch(grid, BLOCK, x, y, rows, cols)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
