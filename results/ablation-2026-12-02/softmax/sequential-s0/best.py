# evokernel: best kernel of run sequential-s0 for problem softmax
# candidate 042172055af6bf17, generation 1, operator idea; speedup 1.860x over eager (1.0526 ms -> 0.5659 ms, 118% of floor)
# idea: [memory] Read each element from HBM exactly once and keep it on-chip in registers: split each 65536-float row across a thread-block cluster of 4 CTAs of 512 threads (launch with cluster dims (4,1,1), grid 4*rows), where every thread loads 8 coalesced float4 (32 floats, index = ((cta*512 + tid) + k*2048)*4) into a fully unrolled register array, computes its local max, reduces the max with warp shuffles, then across warps in shared memory, then across the 4 CTAs through distributed shared memory (cluster.map_shared_rank plus cluster.sync()), does the same for the sum of expf(v - max) taken from the registers, and writes expf(v - max) * (1/sum) back as float4 stores. This replaces the seed's three scalar global passes (about 3 reads and 1 write per element, 405% of the memory floor) with one float4 read and one float4 write; a fallback path of per-row online max/sum handles cols != 65536 or cols % 4 != 0.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/sequential-s0/best.py
"""Softmax (dim=1), NVRTC form. Fast path: one thread-block cluster of CLUSTER CTAs per row;
every element is loaded once (float4, coalesced) into registers, the max and the sum of exp
are reduced warp -> block -> cluster (distributed shared memory), and the result is written
once with float4 stores. Fallback for other shapes/alignment: the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------
// Fast path: cols == FAST_COLS, 16-byte aligned rows.
// ---------------------------------------------------------------------------------------
constexpr int THREADS = 512;      // tune: 256 512 1024
constexpr int CLUSTER = 4;        // tune: 2 4 8
constexpr int FAST_COLS = 65536;
constexpr int NWARPS = THREADS / 32;
constexpr int NV = FAST_COLS / (4 * CLUSTER * THREADS);   // float4 per thread
static_assert(NV * 4 * CLUSTER * THREADS == FAST_COLS, "FAST_COLS must split evenly");
static_assert(NV >= 1, "need at least one float4 per thread");

__device__ __forceinline__ float nanmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;     // propagate NaN like PyTorch
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y) {
    __shared__ float red[NWARPS];
    __shared__ float part_max;
    __shared__ float part_sum;

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const long long row = (long long)(blockIdx.x / CLUSTER);
    const float4* __restrict__ xr = reinterpret_cast<const float4*>(x + row * (long long)FAST_COLS);
    float4* __restrict__ yr = reinterpret_cast<float4*>(y + row * (long long)FAST_COLS);

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int base = (int)rank * THREADS + tid;
    const float NEG_INF = -__int_as_float(0x7f800000);

    // ---- single read of the row slice into registers ----
    float4 v[NV];
#pragma unroll
    for (int k = 0; k < NV; ++k) v[k] = xr[base + k * (CLUSTER * THREADS)];

    // ---- max ----
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        m = nanmax(m, v[k].x);
        m = nanmax(m, v[k].y);
        m = nanmax(m, v[k].z);
        m = nanmax(m, v[k].w);
    }
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    if (warp == 0) {
        float t = (lane < NWARPS) ? red[lane] : NEG_INF;
        t = warp_max(t);
        if (lane == 0) part_max = t;
    }
    cluster.sync();
    float gm = *cluster.map_shared_rank(&part_max, 0u);
#pragma unroll
    for (int r = 1; r < CLUSTER; ++r) gm = nanmax(gm, *cluster.map_shared_rank(&part_max, (unsigned)r));

    // ---- sum of exp (kept in registers) ----
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        v[k].x = expf(v[k].x - gm);
        v[k].y = expf(v[k].y - gm);
        v[k].z = expf(v[k].z - gm);
        v[k].w = expf(v[k].w - gm);
        s0 += v[k].x + v[k].y;
        s1 += v[k].z + v[k].w;
    }
    float s = warp_sum(s0 + s1);
    if (lane == 0) red[warp] = s;     // safe: cluster.sync() above ordered the earlier reads
    __syncthreads();
    if (warp == 0) {
        float t = (lane < NWARPS) ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) part_sum = t;
    }
    cluster.sync();
    float gs = *cluster.map_shared_rank(&part_sum, 0u);
#pragma unroll
    for (int r = 1; r < CLUSTER; ++r) gs += *cluster.map_shared_rank(&part_sum, (unsigned)r);
    // Done reading peers' shared memory: signal, and wait only before exiting.
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");

    const float inv = 1.0f / gs;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        float4 o;
        o.x = v[k].x * inv;
        o.y = v[k].y * inv;
        o.z = v[k].z * inv;
        o.w = v[k].w * inv;
        yr[base + k * (CLUSTER * THREADS)] = o;
    }
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// ---------------------------------------------------------------------------------------
// Fallback: the seed kernel (one block per row, any cols / alignment).
// ---------------------------------------------------------------------------------------
constexpr int FB_BLOCK = 256;  // tune: 64 128 256 512 1024

__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < FB_BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < FB_BLOCK) {
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
    while (p < FB_BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < FB_BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

__global__ void softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   long long rows, long long cols) {
    __shared__ float sh[FB_BLOCK];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -__int_as_float(0x7f800000);
        for (long long i = threadIdx.x; i < cols; i += FB_BLOCK) {
            const float v = xr[i];
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_reduce_max(m, sh);
        float s = 0.0f;
        for (long long i = threadIdx.x; i < cols; i += FB_BLOCK) s += expf(xr[i] - m);
        s = block_reduce_sum(s, sh);
        for (long long i = threadIdx.x; i < cols; i += FB_BLOCK) yr[i] = expf(xr[i] - m) / s;
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_cluster_kernel", "softmax_row_kernel"])
THREADS = kernels.constant("THREADS")
CLUSTER = kernels.constant("CLUSTER")
FAST_COLS = kernels.constant("FAST_COLS")
FB_BLOCK = kernels.constant("FB_BLOCK")


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
        if (cols == FAST_COLS and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                and rows * CLUSTER < (1 << 31)):
            kernels.softmax_cluster_kernel.launch(rows * CLUSTER, THREADS, x, y)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), FB_BLOCK, x, y, rows, cols)
        return y
