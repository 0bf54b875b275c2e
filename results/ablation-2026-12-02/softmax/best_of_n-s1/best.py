# evokernel: best kernel of run best_of_n-s1 for problem softmax
# candidate b2d901f78e60788d, generation 2, operator idea; speedup 1.957x over eager (1.0494 ms -> 0.5361 ms, 113% of floor)
# idea: [dtypes] Read each row from HBM once, using float4 data split between registers and shared memory and no cluster: one 1024-thread block per row (grid = rows, __launch_bounds__(1024,1), 128 KiB dynamic shared memory set with cudaFuncAttributeMaxDynamicSharedMemorySize). Each thread issues all 16 of its coalesced float4 `__ldg` loads up front (vector index k*1024 + tid, k = 0..15): it keeps k = 0..7 in 8 float4 registers and stores k = 8..15 as float4 to shared memory at [k-8][tid], which is bank-conflict-free. It takes the max while loading, reduces it with warp __shfl_xor plus a 32-float shared array, then sums expf(v - m) in FP32 over the registers and the shared memory (four independent partial sums per thread, then a shuffle/shared-memory tree). Finally it writes y as float4 `__stcs` streaming stores, multiplying each expf(v - m) by a single 1/s. Keep a scalar fallback path when cols != 65536 or the row is not 16-byte aligned.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/best_of_n-s1/best.py
"""Softmax (dim=1), NVRTC form. Fast path for cols == 65536 (16-byte aligned rows): one 1024-thread
block per row reads the row from HBM exactly once as float4, keeping half of it in registers and
half in dynamic shared memory (thread-private slots [k][tid], bank-conflict-free), computes the
max (warp shuffle + 32-float shared array), exp(v - max) once per element with four independent
FP32 partial sums, and writes y with float4 streaming stores times a single 1/s.
A scalar three-pass kernel (the seed) handles every other shape / alignment."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;           // tune: 64 128 256 512 1024
constexpr int FAST_COLS = 65536;
constexpr int FAST_THREADS = 1024;
constexpr int REG_VECS = 8;          // tune: 4 6 8
constexpr int NVEC = FAST_COLS / 4 / FAST_THREADS;   // 16 float4 per thread
constexpr int SMEM_VECS = NVEC - REG_VECS;           // float4 per thread kept in shared memory

__device__ __forceinline__ float fmax_nan(float a, float b) {
    return (b > a || isnan(b)) ? b : a;   // propagate NaN like PyTorch
}

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n"
                 : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmax_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Fast path: cols == FAST_COLS, x and y 16-byte aligned. blockDim.x must be FAST_THREADS.
// Dynamic shared memory: SMEM_VECS * FAST_THREADS float4.
extern __shared__ float4 smem_vec[];

__global__ void __launch_bounds__(FAST_THREADS, 1)
softmax_fast_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows) {
    __shared__ float red_max[32];
    __shared__ float red_sum[32];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const float NEG_INF = -__int_as_float(0x7f800000);

    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float4* xr = reinterpret_cast<const float4*>(x + row * (long long)FAST_COLS);
        float4* yr = reinterpret_cast<float4*>(y + row * (long long)FAST_COLS);

        // ---- issue every load up front: shared-memory part via cp.async, register part via __ldg
#pragma unroll
        for (int k = 0; k < SMEM_VECS; ++k)
            cp_async16(smem_u32(&smem_vec[k * FAST_THREADS + tid]),
                       xr + (REG_VECS + k) * FAST_THREADS + tid);
        asm volatile("cp.async.commit_group;\n" ::: "memory");

        float4 v[REG_VECS];
#pragma unroll
        for (int k = 0; k < REG_VECS; ++k) v[k] = __ldg(xr + k * FAST_THREADS + tid);

        // ---- max
        float m0 = NEG_INF, m1 = NEG_INF;
#pragma unroll
        for (int k = 0; k < REG_VECS; ++k) {
            m0 = fmax_nan(m0, fmax_nan(v[k].x, v[k].y));
            m1 = fmax_nan(m1, fmax_nan(v[k].z, v[k].w));
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < SMEM_VECS; ++k) {
            const float4 t = smem_vec[k * FAST_THREADS + tid];
            m0 = fmax_nan(m0, fmax_nan(t.x, t.y));
            m1 = fmax_nan(m1, fmax_nan(t.z, t.w));
        }
        float m = warp_max(fmax_nan(m0, m1));
        if (lane == 0) red_max[warp] = m;
        __syncthreads();
        m = warp_max(red_max[lane]);   // FAST_THREADS / 32 == 32 warps

        // ---- exp once per element (kept in place), four independent partial sums
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
        for (int k = 0; k < REG_VECS; ++k) {
            float4 e;
            e.x = expf(v[k].x - m);
            e.y = expf(v[k].y - m);
            e.z = expf(v[k].z - m);
            e.w = expf(v[k].w - m);
            s0 += e.x; s1 += e.y; s2 += e.z; s3 += e.w;
            v[k] = e;
        }
#pragma unroll
        for (int k = 0; k < SMEM_VECS; ++k) {
            const float4 t = smem_vec[k * FAST_THREADS + tid];
            float4 e;
            e.x = expf(t.x - m);
            e.y = expf(t.y - m);
            e.z = expf(t.z - m);
            e.w = expf(t.w - m);
            s0 += e.x; s1 += e.y; s2 += e.z; s3 += e.w;
            smem_vec[k * FAST_THREADS + tid] = e;   // thread-private slot: no barrier needed
        }
        float s = warp_sum((s0 + s1) + (s2 + s3));
        if (lane == 0) red_sum[warp] = s;
        __syncthreads();
        s = warp_sum(red_sum[lane]);
        const float inv = 1.0f / s;

        // ---- write y with streaming float4 stores
#pragma unroll
        for (int k = 0; k < REG_VECS; ++k) {
            float4 o;
            o.x = v[k].x * inv; o.y = v[k].y * inv; o.z = v[k].z * inv; o.w = v[k].w * inv;
            __stcs(yr + k * FAST_THREADS + tid, o);
        }
#pragma unroll
        for (int k = 0; k < SMEM_VECS; ++k) {
            const float4 e = smem_vec[k * FAST_THREADS + tid];
            float4 o;
            o.x = e.x * inv; o.y = e.y * inv; o.z = e.z * inv; o.w = e.w * inv;
            __stcs(yr + (REG_VECS + k) * FAST_THREADS + tid, o);
        }
    }
}

// ---------------- scalar fallback (any cols, any alignment): the seed kernel ----------------
__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) {
            const float o = sh[threadIdx.x + s];
            const float m = sh[threadIdx.x];
            sh[threadIdx.x] = (o > m || isnan(o)) ? o : m;
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
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
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
        float m = -__int_as_float(0x7f800000);
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

kernels = compile_kernels(cuda_src, ["softmax_fast_kernel", "softmax_row_kernel"])
BLOCK = kernels.constant("BLOCK")
FAST_COLS = kernels.constant("FAST_COLS")
FAST_THREADS = kernels.constant("FAST_THREADS")
REG_VECS = kernels.constant("REG_VECS")
NVEC = FAST_COLS // 4 // FAST_THREADS
SMEM_BYTES = (NVEC - REG_VECS) * FAST_THREADS * 16


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
        grid = min(rows, (1 << 31) - 1)
        if cols == FAST_COLS and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            kernels.softmax_fast_kernel.launch(grid, FAST_THREADS, x, y, rows,
                                               shared_mem=SMEM_BYTES)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
