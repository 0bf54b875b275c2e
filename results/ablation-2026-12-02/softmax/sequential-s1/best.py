# evokernel: best kernel of run sequential-s1 for problem softmax
# candidate 148ab6e2799a0e34, generation 8, operator idea; speedup 1.747x over eager (1.0515 ms -> 0.6017 ms, 126% of floor)
# idea: [async] Pipeline each block's own load against its max pass by replacing the single all-slice mbarrier with one mbarrier per TMA chunk. Use NCHUNK = 32768 / CHUNK_BYTES barriers (`__shared__ __align__(8) unsigned long long bar[NCHUNK]`, CHUNK_BYTES tune 4096 8192). Thread 0 inits all of them (count 1) with a single fence.mbarrier_init + __syncthreads. Then, in chunk order, it does `mbarrier.arrive.expect_tx` on bar[c] with that chunk's clamped byte count n_c, and issues its `cp.async.bulk` only when n_c > 0; arming empty tail chunks with tx 0 completes them at once, so no wait can deadlock. In the max pass, before touching float4 k (j = k*THREADS + tid), each thread waits on parity 0 of every barrier up to chunk ((k+1)*THREADS*16 - 1) / CHUNK_BYTES. Do this with a compile-time unrolled 'already waited' index, and keep the existing j < nslice masking. The first 4-8 KB are reduced while the remaining 24-28 KB are still in flight, which shortens each block's load-to-cluster.sync critical path (and so the time its 32 KB of smem sits idle) without adding registers or shared memory, keeping 6 blocks/SM.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/sequential-s1/best.py
"""Softmax (dim=1), NVRTC form.

Fast path: one thread-block cluster of CLUSTER=8 blocks per row (non-persistent, grid 8*rows).
Each block owns a 32 KB slice of the row, which thread 0 copies from HBM into a static
shared-memory stage in one shot with TMA bulk copies
(cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes) tracked by a single-use
mbarrier. The block max, the in-place e = exp(v - m_b) with its block sum, the DSMEM (max, sum)
exchange and the y = e * scale streaming store all read the stage, so a thread needs only a few
registers. That gives 6 blocks (48 warps) per SM, so several rows are in flight per SM and one
block's reductions and cluster barrier overlap other blocks' HBM traffic. x is read from HBM once
and y is written once.
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
// Fast path: one cluster of CLUSTER blocks per row, each block's slice held in shared memory.
// ---------------------------------------------------------------------------------------------
constexpr int CLUSTER = 8;          // blocks per row (fixed: 8 keeps a block's 32 KB slice in static smem)
constexpr int THREADS = 256;        // tune: 128 256 512
constexpr int BLOCKS_PER_SM = 6;    // tune: 4 5 6
constexpr int CHUNK_BYTES = 4096;   // tune: 4096 8192 16384 32768
constexpr int ROW_CAP = 65536;      // max row length the fast path handles
constexpr int SLICE_VEC = ROW_CAP / (4 * CLUSTER);   // float4 per block slice (2048 = 32 KB)
constexpr int VEC = SLICE_VEC / THREADS;             // float4 per thread
constexpr int NWARPS = THREADS / 32;
constexpr int NCHUNK = (SLICE_VEC * 16) / CHUNK_BYTES;   // one single-use mbarrier per TMA chunk
// Minimum resident blocks requested from ptxas, clamped to the SM's 2048-thread limit.
constexpr int LB_BLOCKS = (BLOCKS_PER_SM * THREADS > 2048) ? (2048 / THREADS) : BLOCKS_PER_SM;
static_assert(VEC >= 1 && VEC * THREADS == SLICE_VEC, "bad fast-path sizes");
static_assert(THREADS % 32 == 0, "THREADS must be a multiple of 32");
static_assert(SLICE_VEC * 16 <= 40 * 1024, "stage must fit in static shared memory");
static_assert(CHUNK_BYTES > 0 && CHUNK_BYTES % 16 == 0, "bulk copy size must be a multiple of 16");
static_assert((SLICE_VEC * 16) % CHUNK_BYTES == 0 && NCHUNK >= 1, "chunks must tile the slice");
static_assert(LB_BLOCKS >= 1, "bad launch bounds");

__device__ __forceinline__ float nan_max(float a, float b) {
    return (b > a || isnan(b)) ? b : a;   // NaN-propagating max
}

// ---- PTX helpers: shared addresses, mbarrier, TMA bulk copy ----
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ void tma_load_1d(unsigned dst, const void* src, unsigned bytes,
                                            unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, LB_BLOCKS)
softmax_cluster_smem_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ __align__(128) float4 stage[SLICE_VEC];
    __shared__ __align__(8) unsigned long long bar[NCHUNK];
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

    const long long nvec = cols >> 2;
    const long long vbase = (long long)rank * SLICE_VEC;   // first float4 of this block's slice
    long long nv = nvec - vbase;
    nv = nv < 0 ? 0 : (nv > (long long)SLICE_VEC ? (long long)SLICE_VEC : nv);
    const int nslice = (int)nv;                           // float4 of the slice inside the row
    const unsigned slice_bytes = (unsigned)nslice * 16u;
    const unsigned bar_a = smem_addr(bar);   // barrier c lives at bar_a + 8 * c
    const unsigned stage_a = smem_addr(stage);

    // ---- single read of x: chunked TMA bulk copies, one single-use mbarrier per chunk ----
    if (tid == 0) {
#pragma unroll
        for (int c = 0; c < NCHUNK; ++c) mbar_init(bar_a + 8u * (unsigned)c, 1u);
        fence_mbar_init();
    }
    __syncthreads();
    if (tid == 0) {
        // Every chunk barrier is armed, in chunk order; empty tail chunks are armed with tx 0,
        // which completes their phase at once, so no later wait can deadlock.
        const char* src = reinterpret_cast<const char*>(x + row * cols + vbase * 4);
#pragma unroll
        for (int c = 0; c < NCHUNK; ++c) {
            const unsigned off = (unsigned)c * (unsigned)CHUNK_BYTES;
            const unsigned rem = (slice_bytes > off) ? (slice_bytes - off) : 0u;
            const unsigned n = (rem < (unsigned)CHUNK_BYTES) ? rem : (unsigned)CHUNK_BYTES;
            const unsigned b = bar_a + 8u * (unsigned)c;
            mbar_arrive_expect_tx(b, n);
            if (n > 0u) tma_load_1d(stage_a + off, src + off, n, b);
        }
    }

    // ---- block max, pipelined against the load: before touching float4 k, wait on every chunk
    //      barrier up to the one holding its last byte (tail entries are skipped, i.e. -inf) ----
    float m = NEG_INF;
    int waited = 0;   // chunks already waited on (a compile-time value once the loop is unrolled)
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const int need = ((k + 1) * THREADS * 16 - 1) / CHUNK_BYTES;
#pragma unroll
        for (; waited <= need; ++waited) mbar_wait(bar_a + 8u * (unsigned)waited, 0u);
        const int j = k * THREADS + tid;
        if (j < nslice) {
            const float4 t = stage[j];
            m = nan_max(m, t.x);
            m = nan_max(m, t.y);
            m = nan_max(m, t.z);
            m = nan_max(m, t.w);
        }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) s_max[warp] = m;
    __syncthreads();
    m = s_max[0];
#pragma unroll
    for (int w = 1; w < NWARPS; ++w) m = nan_max(m, s_max[w]);

    // ---- e = exp(v - m) computed ONCE, written back in place into the stage, and block-summed ----
    // (an all -inf block gets e = 0 and contributes 0, not NaN; each thread touches only its own
    //  entries, so no barrier is needed between the max pass and this in-place update)
    const float ms = (m == NEG_INF) ? 0.0f : m;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const int j = k * THREADS + tid;
        if (j < nslice) {
            const float4 t = stage[j];
            const float a = expf(t.x - ms);
            const float b = expf(t.y - ms);
            const float c = expf(t.z - ms);
            const float d = expf(t.w - ms);
            stage[j] = make_float4(a, b, c, d);
            s += (a + b) + (c + d);
        }
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

    // ---- single write of y, streamed from the stage ----
    float4* __restrict__ yr = reinterpret_cast<float4*>(y + row * cols) + vbase;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        const int j = k * THREADS + tid;
        if (j < nslice) {
            float4 o = stage[j];
            o.x *= scale;
            o.y *= scale;
            o.z *= scale;
            o.w *= scale;
            __stcs(yr + j, o);
        }
    }

    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel", "softmax_cluster_smem_kernel"])
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
            kernels.softmax_cluster_smem_kernel.launch(rows * CLUSTER, THREADS, x, y, cols)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
