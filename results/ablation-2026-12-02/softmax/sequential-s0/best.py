# evokernel: best kernel of run sequential-s0 for problem softmax
# candidate 877da8896ea3feb7, generation 2, operator idea; speedup 1.936x over eager (1.0505 ms -> 0.5427 ms, 114% of floor)
# idea: [async] Make the cluster kernel persistent and feed it with a TMA bulk-copy pipeline, so that HBM reads keep going during the reduction and cluster.sync() gaps that now stall each CTA (and only 2 CTAs/SM can overlap them). Launch 132 CTAs of 1024 threads as 33 clusters of 4 (cluster dims (4,1,1), 1 CTA/SM). Each cluster takes rows r = cluster_id, r += 33, and each CTA owns one 16384-float (64 KB) quarter of the row. The CTA's dynamic shared memory holds STAGES (tune: 2 3) 64 KB row-slice buffers, each with an mbarrier, and cudaFuncAttributeMaxDynamicSharedMemorySize is set to STAGES*64 KB + 64 B. Thread 0 issues one cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes (64 KB, mbarrier expect_tx) for row r+(STAGES-1)*33 before starting work on row r. After waiting on the stage's mbarrier, all threads read their 16 floats from the buffer as float4, then do the same register max, warp-to-block-to-DSMEM cluster reduction, sum of expf(v - max) and reduction as now. They write expf(v - max)*inv back into the same smem buffer, run fence.proxy.async.shared::cta and __syncthreads, and thread 0 issues a cp.async.bulk.global.shared::cta.bulk_group store of the 64 KB to y. Before a buffer is refilled, cp.async.bulk.wait_group.read<STAGES-1> makes sure its store has drained. The cluster-wide part_max and part_sum slots are double-buffered by row parity, so one cluster.sync per reduction is enough. The input is read once and the output written once, with up to 128-192 KB per SM always in flight.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/sequential-s0/best.py
"""Softmax (dim=1), NVRTC form.

Fast path (cols == 65536): a persistent kernel, one CTA of THREADS threads per SM, grouped in
thread-block clusters of CLUSTER CTAs; each cluster pulls rows from a global atomic counter
(self-resetting: the last cluster to finish zeroes it). Each CTA owns a 1/CLUSTER slice of a row,
held in registers as float4. Software pipeline: the float4 loads of the cluster's NEXT row are
issued into a second register buffer before the current row's reductions start, so HBM reads
stay in flight through the reduction latency. The cluster-wide max and sum are exchanged
asynchronously: every warp pushes its partial into every peer's shared memory with
st.async ... mbarrier::complete_tx (no cluster barrier, no release fence per row); the slots and
mbarriers are double-buffered by row parity. Row indices for the prefetch are broadcast by the
cluster leader in the same push. Each element is read once and written once.
Fallback for other shapes/alignment: the seed's one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------
// Fast path: cols == FAST_COLS, 16-byte aligned rows.
// ---------------------------------------------------------------------------------------
constexpr int THREADS = 1024;     // tune: 512 1024
constexpr int CLUSTER = 4;        // tune: 4 8
constexpr int CTAS_PER_SM = 1;    // tune: 1 2
constexpr int FAST_COLS = 65536;
constexpr int NWARPS = THREADS / 32;
constexpr int STRIDE4 = CLUSTER * THREADS;                  // float4 stride between a thread's vectors
constexpr int NV = FAST_COLS / (4 * STRIDE4);               // float4 per thread per row
constexpr int NPART = CLUSTER * NWARPS;                     // partials received per reduction
constexpr unsigned MAX_BYTES = (unsigned)(NPART + 1) * 4u;  // + the broadcast row index
constexpr unsigned SUM_BYTES = (unsigned)NPART * 4u;
static_assert(NV * 4 * STRIDE4 == FAST_COLS, "FAST_COLS must split evenly");
static_assert(NV >= 1, "need at least one float4 per thread");
static_assert(NWARPS <= 32 && CLUSTER <= 32, "one lane per warp / per rank");

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

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

__device__ __forceinline__ unsigned mapa_rank(unsigned a, unsigned r) {
    unsigned d;
    asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(r));
    return d;
}

__device__ __forceinline__ void st_async_u32(unsigned remote, unsigned v, unsigned remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];"
                 :: "r"(remote), "r"(v), "r"(remote_bar) : "memory");
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n\t"
        ".reg .pred P1;\n\t"
        "LAB_WAIT:\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
        "@P1 bra DONE;\n\t"
        "bra LAB_WAIT;\n\t"
        "DONE:\n\t"
        "}" :: "r"(bar), "r"(parity) : "memory");
}

__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
softmax_persistent_kernel(const float* __restrict__ x, float* __restrict__ y,
                          int* __restrict__ ctr, int rows, int ncl) {
    __shared__ float smax[2][NPART];
    __shared__ float ssum[2][NPART];
    __shared__ int srow[2];
    __shared__ int init_rows[2];
    __shared__ __align__(8) unsigned long long bar_max[2];
    __shared__ __align__(8) unsigned long long bar_sum[2];

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const bool leader = (rank == 0u) && (tid == 0);
    const bool leader_warp = (rank == 0u) && (warp == 0);
    const float NEG_INF = -__int_as_float(0x7f800000);

    const unsigned a_bmax = smem_addr(&bar_max[0]);   // + 8 * parity slot
    const unsigned a_bsum = smem_addr(&bar_sum[0]);

    // ---- prologue: barriers (armed for their first use), first rows of this cluster ----
    int q = 0;   // leader only: the row index to broadcast in the next iteration
    if (tid == 0) {
        mbar_init(a_bmax, 1u);
        mbar_init(a_bmax + 8u, 1u);
        mbar_init(a_bsum, 1u);
        mbar_init(a_bsum + 8u, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        mbar_expect(a_bmax, MAX_BYTES);
        mbar_expect(a_bmax + 8u, MAX_BYTES);
        mbar_expect(a_bsum, SUM_BYTES);
        mbar_expect(a_bsum + 8u, SUM_BYTES);
        if (rank == 0u) {
            const int b = atomicAdd(ctr, 3);
            init_rows[0] = b;
            init_rows[1] = b + 1;
            q = b + 2;
        }
    }
    cluster.sync();
    const int* r0 = cluster.map_shared_rank(&init_rows[0], 0u);
    int rc = r0[0];
    int rn = r0[1];

    const int base = (int)rank * THREADS + tid;

    // ---- first row's loads ----
    float4 nb[NV];
    if (rc < rows) {
        const float4* __restrict__ xr = reinterpret_cast<const float4*>(x + (long long)rc * FAST_COLS);
#pragma unroll
        for (int k = 0; k < NV; ++k) nb[k] = xr[base + k * STRIDE4];
    }

    for (unsigned it = 0; rc < rows; ++it) {
        const unsigned p = it & 1u;
        const unsigned par = (it >> 1) & 1u;

        float4 v[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) v[k] = nb[k];

        // ---- prefetch the next row: in flight during this row's reductions ----
        if (rn < rows) {
            const float4* __restrict__ xn = reinterpret_cast<const float4*>(x + (long long)rn * FAST_COLS);
#pragma unroll
            for (int k = 0; k < NV; ++k) nb[k] = xn[base + k * STRIDE4];
        }

        // ---- max: warp partials pushed to every CTA of the cluster ----
        float m = NEG_INF;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            m = nanmax(m, v[k].x);
            m = nanmax(m, v[k].y);
            m = nanmax(m, v[k].z);
            m = nanmax(m, v[k].w);
        }
        m = warp_max(m);
        int qq = 0;
        if (leader_warp) qq = __shfl_sync(0xffffffffu, q, 0);
        const unsigned bm = a_bmax + 8u * p;
        if (lane < CLUSTER) {
            const unsigned rbar = mapa_rank(bm, (unsigned)lane);
            st_async_u32(mapa_rank(smem_addr(&smax[p][rank * NWARPS + warp]), (unsigned)lane),
                         __float_as_uint(m), rbar);
            if (leader_warp)
                st_async_u32(mapa_rank(smem_addr(&srow[p]), (unsigned)lane), (unsigned)qq, rbar);
        }
        if (leader) q = atomicAdd(ctr, 1);          // consumed one iteration later
        mbar_wait(bm, par);
        if (tid == 0) mbar_expect(bm, MAX_BYTES);   // arm this barrier's next use

        float t = NEG_INF;
        if (lane < NWARPS) {
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) t = nanmax(t, smax[p][r * NWARPS + lane]);
        }
        const float gm = warp_max(t);
        const int rq = srow[p];

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
        const float s = warp_sum(s0 + s1);
        const unsigned bs = a_bsum + 8u * p;
        if (lane < CLUSTER) {
            st_async_u32(mapa_rank(smem_addr(&ssum[p][rank * NWARPS + warp]), (unsigned)lane),
                         __float_as_uint(s), mapa_rank(bs, (unsigned)lane));
        }
        mbar_wait(bs, par);
        if (tid == 0) mbar_expect(bs, SUM_BYTES);

        float u = 0.0f;
        if (lane < NWARPS) {
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) u += ssum[p][r * NWARPS + lane];
        }
        const float gs = warp_sum(u);
        const float inv = 1.0f / gs;

        float4* __restrict__ yr = reinterpret_cast<float4*>(y + (long long)rc * FAST_COLS);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            float4 o;
            o.x = v[k].x * inv;
            o.y = v[k].y * inv;
            o.z = v[k].z * inv;
            o.w = v[k].w * inv;
            yr[base + k * STRIDE4] = o;
        }

        rc = rn;
        rn = rq;
    }

    // No CTA may exit while peers can still touch its shared memory.
    cluster.sync();

    // Self-resetting work counter: the last cluster to finish zeroes it for the next launch.
    if (leader) {
        __threadfence();
        const int done = atomicAdd(ctr + 1, 1);
        if (done == ncl - 1) {
            atomicExch(ctr, 0);
            atomicExch(ctr + 1, 0);
        }
    }
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

kernels = compile_kernels(cuda_src, ["softmax_persistent_kernel", "softmax_row_kernel"])
THREADS = kernels.constant("THREADS")
CLUSTER = kernels.constant("CLUSTER")
CTAS_PER_SM = kernels.constant("CTAS_PER_SM")
FAST_COLS = kernels.constant("FAST_COLS")
FB_BLOCK = kernels.constant("FB_BLOCK")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._dev_state = {}

    def _state(self, device):
        idx = device.index if device.index is not None else torch.cuda.current_device()
        st = self._dev_state.get(idx)
        if st is None:
            sms = torch.cuda.get_device_properties(idx).multi_processor_count
            # [next row, finished clusters]; the kernel resets both to 0 when it ends
            ctr = torch.zeros(2, dtype=torch.int32, device=device)
            st = (sms, ctr)
            self._dev_state[idx] = st
        return st

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("softmax: x must be a 2D float32 CUDA tensor (softmax over dim 1)")
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        if rows == 0 or cols == 0:
            return y
        if (cols == FAST_COLS and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                and rows < (1 << 30)):
            sms, ctr = self._state(x.device)
            ncl = max(1, min(rows, (sms * CTAS_PER_SM) // CLUSTER))
            kernels.softmax_persistent_kernel.launch(ncl * CLUSTER, THREADS, x, y, ctr, rows, ncl)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), FB_BLOCK, x, y, rows, cols)
        return y
