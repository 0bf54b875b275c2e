# evokernel: best kernel of run sequential-s1 for problem softmax
# candidate 5ebe7df751ab9464, generation 4, operator idea; speedup 1.620x over eager (1.0530 ms -> 0.6501 ms, 133% of floor)
# idea: [compute] Compute each exponential only once instead of twice: in the block-sum phase overwrite the register array in place with e = exp2f(fmaf(v, LOG2E, -m_b*LOG2E)) (m_b = block max, with the all -inf guard kept; one FFMA + ex2 per element instead of the FADD + multi-instruction accurate expf), accumulate the block sum from these e values with the same pairwise (a+b)+(c+d) tree and warp-shuffle reduction, and after the DSMEM exchange compute one per-block scale = expf(m_b - M) / S so that the write phase is just y = e * scale (a single FMUL per element, no second subtract/exp), cutting per-element ALU work by roughly half while keeping the register footprint (63 regs, 2 blocks x 512 threads per SM) and the single HBM read/write unchanged.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/sequential-s1/best.py
"""Softmax (dim=1), NVRTC form. Fast path: one thread-block cluster per row. Each block keeps its
slice of the row in registers (x is read from HBM exactly once), computes its (max, sum-of-exp)
pair, exchanges the pairs with the other blocks of the cluster through distributed shared memory,
combines them as S = sum_b s_b * exp(m_b - M), and writes y = exp(v - M) * (1/S) from registers.
Fallback (other shapes / alignments): the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------
// Fallback: seed kernel (one block per row, three strided passes).
// ---------------------------------------------------------------------------------------------
constexpr int BLOCK = 256;  // tune: 64 128 256 512 1024

__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) {
            const float o = sh[threadIdx.x + s];
            const float m = sh[threadIdx.x];
            sh[threadIdx.x] = (o > m || isnan(o)) ? o : m;   // propagate NaN like PyTorch
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
        float m = -__int_as_float(0x7f800000);   // -inf
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

// ---------------------------------------------------------------------------------------------
// Fast path: one cluster of CLUSTER blocks per row, row held in registers.
// ---------------------------------------------------------------------------------------------
constexpr int CLUSTER = 4;      // tune: 2 4 8
constexpr int THREADS = 512;    // tune: 256 512 1024
#define MIN_BLOCKS 2            // tune: 1 2
constexpr int ROW_CAP = 65536;  // max row length the fast path holds in registers
constexpr int VEC = ROW_CAP / (4 * CLUSTER * THREADS);   // float4 per thread
constexpr int NWARPS = THREADS / 32;
static_assert(VEC >= 1 && VEC * 4 * CLUSTER * THREADS == ROW_CAP, "bad fast-path sizes");
static_assert(THREADS % 32 == 0, "THREADS must be a multiple of 32");

__device__ __forceinline__ float nan_max(float a, float b) {
    return (b > a || isnan(b)) ? b : a;   // NaN-propagating max
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, MIN_BLOCKS)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ float s_max[NWARPS];
    __shared__ float s_sum[NWARPS];
    __shared__ float2 s_pair;

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned int rank = cluster.block_rank();
    const long long row = (long long)(blockIdx.x / CLUSTER);
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const float NEG_INF = -__int_as_float(0x7f800000);

    const float4* __restrict__ xr = reinterpret_cast<const float4*>(x + row * cols);
    float4* __restrict__ yr = reinterpret_cast<float4*>(y + row * cols);
    const long long nvec = cols >> 2;
    const long long base = (long long)rank * (long long)(THREADS * VEC) + tid;

    // ---- single read of x: VEC coalesced float4 per thread, kept in registers ----
    float4 v[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const long long j = base + (long long)k * THREADS;
        if (j < nvec) v[k] = __ldcs(xr + j);
        else v[k] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }

    // ---- block max ----
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        m = nan_max(m, v[k].x);
        m = nan_max(m, v[k].y);
        m = nan_max(m, v[k].z);
        m = nan_max(m, v[k].w);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    m = s_max[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) m = nan_max(m, s_max[w]);

    // ---- e = exp(v - m) computed ONCE, kept in place in the registers, and block-summed ----
    // (an all -inf block gets e = 0 and contributes 0, not NaN)
    const float ms = (m == NEG_INF) ? 0.0f : m;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const float a = expf(v[k].x - ms);
        const float b = expf(v[k].y - ms);
        const float c = expf(v[k].z - ms);
        const float d = expf(v[k].w - ms);
        v[k] = make_float4(a, b, c, d);
        s += (a + b) + (c + d);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) s_sum[warp] = s;
    __syncthreads();
    s = s_sum[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) s += s_sum[w];

    // ---- publish (max, sum) and exchange across the cluster via DSMEM ----
    if (tid == 0) s_pair = make_float2(m, s);
    cluster.sync();

    float2 p[CLUSTER];
    float M = NEG_INF;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        p[r] = *cluster.map_shared_rank(&s_pair, r);
        M = nan_max(M, p[r].x);
    }
    // Remote reads are done: arrive now, wait before exit (keeps smem alive for the others).
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");

    float S = 0.0f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
        const float mr = p[r].x;
        S += (mr == M) ? p[r].y : p[r].y * expf(mr - M);
    }
    // y = exp(v - M) / S = exp(v - m) * (exp(m - M) / S): one per-block scale.
    // (m == M gives exp(0) = 1 exactly; an all -inf row gives exp(NaN) -> NaN like PyTorch;
    //  an all -inf block in a finite row gives scale 0 and e = 0 -> y = 0.)
    const float scale = expf(m - M) / S;

    // ---- single write of y from registers ----
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const long long j = base + (long long)k * THREADS;
        if (j < nvec) {
            float4 o;
            o.x = v[k].x * scale;
            o.y = v[k].y * scale;
            o.z = v[k].z * scale;
            o.w = v[k].w * scale;
            __stcs(yr + j, o);
        }
    }

    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel", "softmax_cluster_kernel"])
BLOCK = kernels.constant("BLOCK")
CLUSTER = kernels.constant("CLUSTER")
THREADS = kernels.constant("THREADS")
ROW_CAP = kernels.constant("ROW_CAP")


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
        fast = (
            cols <= ROW_CAP
            and cols % 4 == 0
            and x.data_ptr() % 16 == 0
            and y.data_ptr() % 16 == 0
            and rows * CLUSTER <= (1 << 31) - 1
        )
        if fast:
            kernels.softmax_cluster_kernel.launch(rows * CLUSTER, THREADS, x, y, cols)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
