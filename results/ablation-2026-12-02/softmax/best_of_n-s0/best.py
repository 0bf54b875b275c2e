# evokernel: best kernel of run best_of_n-s0 for problem softmax
# candidate da7cdd2537c05795, generation 3, operator idea; speedup 1.974x over eager (1.0488 ms -> 0.5312 ms, 110% of floor)
# idea: [control_flow] Remove the seed's branchy, barrier-heavy control flow: make the kernel non-persistent with exactly one 1024-thread block per row (grid = rows, no grid-stride row loop, __launch_bounds__(1024,2)), with 32-bit int float4 indexing `idx = k*1024 + threadIdx.x` inside fully `#pragma unroll`-ed loops of VPT = 16 float4 per thread (compile-time; a bounds-guarded scalar fallback kernel handles cols != 65536). All 16 loads are issued before any of them is used and the row stays in registers, so exp is computed once and the final pass is one FMUL per element by the reciprocal 1/s. Replace the NaN-checking ternary max with branch-free fmaxf plus a per-thread `bool nan |= (v != v)` flag that is combined with __syncthreads_or and applied once at the end, and replace each 10-step __syncthreads tree with a __shfl_xor_sync butterfly, one 32-float shared-memory stage, and a second butterfly in every warp, so each reduction needs one barrier and no thread ever waits on a `threadIdx.x < s` divergent branch.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/best_of_n-s0/best.py
"""Softmax (dim=1), NVRTC form. Fast path for cols == 65536: one 1024-thread block per row
(grid = rows, no row loop), 16 float4 per thread with compile-time, fully unrolled loops and 32-bit
float4 indexing idx = k*1024 + threadIdx.x. All 16 loads are issued before any is used: REG_V of
them into registers, the other VPT-REG_V via cp.async straight into dynamic shared memory (an SM
has 256 KiB of registers, exactly one row, so the row is split between registers and smem).
exp is computed once and written back in place; the output is exp * (1/s).
Reductions: warp butterfly, one 32-float shared stage, second butterfly -> one barrier each.
Max uses branch-free fmaxf; a NaN anywhere in the row makes exp(NaN - m) = NaN, hence s = NaN
and every output of the row NaN, exactly like PyTorch, with no per-element NaN test.
A bounds-guarded scalar kernel handles other widths / misaligned inputs."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;          // threads per block (fast-path layout depends on it)
constexpr int NWARPS = BLOCK / 32;
constexpr int VPT = 16;              // float4 per thread in the fast path (cols = 4*VPT*BLOCK = 65536)
constexpr int REG_V = 8;             // tune: 4 6 8 10
constexpr int SMEM_V = VPT - REG_V;  // float4 per thread staged in dynamic shared memory
constexpr int FAST_VEC = VPT * BLOCK;   // float4 per row in the fast path

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Butterfly in each warp, one 32-float shared stage, butterfly again. One barrier.
// `red` must not be reused by another reduction of the same block without a barrier.
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (lane < NWARPS) ? red[lane] : -__int_as_float(0x7f800000);
    return warp_max(v);
}

__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (lane < NWARPS) ? red[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float max4(const float4 a) {
    return fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w));
}

// Fast path: cols == 4*FAST_VEC, x and y 16-byte aligned, grid = rows, block = BLOCK,
// dynamic shared memory = SMEM_V*BLOCK*16 bytes.
__global__ void __launch_bounds__(BLOCK, 1)
softmax_fast(const float* __restrict__ x, float* __restrict__ y) {
    extern __shared__ float4 sbuf[];          // SMEM_V * BLOCK float4, [j*BLOCK + tid]
    __shared__ float red_max[NWARPS];
    __shared__ float red_sum[NWARPS];

    const int tid = threadIdx.x;
    const long long row = blockIdx.x;
    const float4* __restrict__ xr = reinterpret_cast<const float4*>(x) + row * (long long)FAST_VEC;
    float4* __restrict__ yr = reinterpret_cast<float4*>(y) + row * (long long)FAST_VEC;

    // 1) Issue every load before using any: smem part by cp.async (no registers), then registers.
#pragma unroll
    for (int j = 0; j < SMEM_V; ++j) {
        const unsigned saddr = (unsigned)__cvta_generic_to_shared(&sbuf[j * BLOCK + tid]);
        const float4* src = xr + (REG_V + j) * BLOCK + tid;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(saddr), "l"(src) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");

    float4 v[REG_V];
#pragma unroll
    for (int k = 0; k < REG_V; ++k) v[k] = __ldg(xr + k * BLOCK + tid);

    // 2) Row max (branch-free fmaxf).
    float m0 = -__int_as_float(0x7f800000);
    float m1 = m0;
#pragma unroll
    for (int k = 0; k < REG_V; ++k) {
        if (k & 1) m1 = fmaxf(m1, max4(v[k]));
        else       m0 = fmaxf(m0, max4(v[k]));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");   // own copies are now visible to this thread
#pragma unroll
    for (int j = 0; j < SMEM_V; ++j) {
        const float4 t = sbuf[j * BLOCK + tid];
        if (j & 1) m1 = fmaxf(m1, max4(t));
        else       m0 = fmaxf(m0, max4(t));
    }
    const float m = block_max(fmaxf(m0, m1), red_max);

    // 3) exp once, kept in place; four independent partial sums.
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
    for (int k = 0; k < REG_V; ++k) {
        v[k].x = expf(v[k].x - m); s0 += v[k].x;
        v[k].y = expf(v[k].y - m); s1 += v[k].y;
        v[k].z = expf(v[k].z - m); s2 += v[k].z;
        v[k].w = expf(v[k].w - m); s3 += v[k].w;
    }
#pragma unroll
    for (int j = 0; j < SMEM_V; ++j) {
        float4 t = sbuf[j * BLOCK + tid];
        t.x = expf(t.x - m); s0 += t.x;
        t.y = expf(t.y - m); s1 += t.y;
        t.z = expf(t.z - m); s2 += t.z;
        t.w = expf(t.w - m); s3 += t.w;
        sbuf[j * BLOCK + tid] = t;   // same thread reads it back later: no barrier needed
    }
    const float s = block_sum((s0 + s1) + (s2 + s3), red_sum);
    const float inv = 1.0f / s;

    // 4) One FMUL per element, streaming 128-bit stores.
#pragma unroll
    for (int k = 0; k < REG_V; ++k) {
        float4 o;
        o.x = v[k].x * inv; o.y = v[k].y * inv; o.z = v[k].z * inv; o.w = v[k].w * inv;
        __stcs(yr + k * BLOCK + tid, o);
    }
#pragma unroll
    for (int j = 0; j < SMEM_V; ++j) {
        const float4 t = sbuf[j * BLOCK + tid];
        float4 o;
        o.x = t.x * inv; o.y = t.y * inv; o.z = t.z * inv; o.w = t.w * inv;
        __stcs(yr + (REG_V + j) * BLOCK + tid, o);
    }
}

// Generic fallback: any cols, any alignment. One block per row (grid = rows), bounds-guarded.
__global__ void __launch_bounds__(BLOCK)
softmax_generic(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ float red_max[NWARPS];
    __shared__ float red_sum[NWARPS];
    const long long row = blockIdx.x;
    const float* __restrict__ xr = x + row * cols;
    float* __restrict__ yr = y + row * cols;

    float m = -__int_as_float(0x7f800000);
    for (long long i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_max(m, red_max);

    float s = 0.0f;
    for (long long i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
    s = block_sum(s, red_sum);
    const float inv = 1.0f / s;

    for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) * inv;
}
"""

kernels = compile_kernels(cuda_src, ["softmax_fast", "softmax_generic"])
BLOCK = kernels.constant("BLOCK")
VPT = kernels.constant("VPT")
REG_V = kernels.constant("REG_V")
SMEM_V = VPT - REG_V
FAST_COLS = 4 * VPT * BLOCK
SMEM_BYTES = SMEM_V * BLOCK * 16


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
        if rows > 2147483647:
            raise ValueError("softmax: too many rows for a one-block-per-row grid")
        if cols == FAST_COLS and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            kernels.softmax_fast.launch(rows, BLOCK, x, y, shared_mem=SMEM_BYTES)
        else:
            kernels.softmax_generic.launch(rows, BLOCK, x, y, cols)
        return y
