# evokernel: best kernel of run sequential-s0 for problem softmax
# candidate 031c0c44cb206781, generation 9, operator idea; speedup 2.078x over eager (1.0518 ms -> 0.5061 ms, 104% of floor)
# idea: Pack each warp's cluster-exchange message into one 64-bit vector: replace the separate smax[2][NPART] and ssum[2][NPART] arrays with one `__shared__ __align__(16) float2 sxch[2][NPART]` (x = mw, y = sw), and have lanes < CLUSTER push it to each peer with a single `asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" :: "r"(mapa_rank(smem_addr(&sxch[p][slot]), lane)), "f"(mw), "f"(sw), "r"(rbar) : "memory")` instead of two u32 st.async (the leader warp still sends srow[p] as a separate u32, so XCH_BYTES = NPART*8 + 4 is unchanged). In the combine, lanes < NWARPS read each `const float2 e = sxch[p][r*NWARPS + lane]` as one 8-byte ld.shared.v2 (4 loads instead of 8 for CLUSTER=4). This halves the DSMEM transactions and complete_tx updates on each row's critical path between the sum push and the output stores, with the same 64-register budget and bit-identical FP32 results.
# check it: evokernel check softmax results/h200-2026-12-04-s21/headline/report-softmax/best_kernel.py
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
#define L2_PREFETCH 1             // tune: 0 1
constexpr int FAST_COLS = 65536;
constexpr int NWARPS = THREADS / 32;
constexpr int STRIDE4 = CLUSTER * THREADS;                  // float4 stride between a thread's vectors
constexpr int NV = FAST_COLS / (4 * STRIDE4);               // float4 per thread per row
constexpr int NPART = CLUSTER * NWARPS;                     // partials received per reduction
// one exchange per row: NPART (max, sum) pairs + the broadcast row index
constexpr unsigned XCH_BYTES = (unsigned)(2 * NPART + 1) * 4u;
static_assert(NV * 4 * STRIDE4 == FAST_COLS, "FAST_COLS must split evenly");
static_assert(NV >= 1, "need at least one float4 per thread");
static_assert(NWARPS <= 32 && CLUSTER <= 32, "one lane per warp / per rank");

__device__ __forceinline__ float nanmax(float a, float b) {
    // One instruction (sm_80+); propagates NaN like PyTorch.
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
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

// The exp2 offset used for a partial whose max is m: exp(v - m) = 2^(v*log2e + off(m)).
// Sender and receiver evaluate this same function, so both see the identical float and the
// rescale exp2f(off(gm) - off(m_i)) matches exactly what the sums and the outputs used.
// An all -inf partial gets offset 0 (its exps are exactly 0, not NaN).
__device__ __forceinline__ float exp_offset(float m) {
    const float NEG_INF_ = -__int_as_float(0x7f800000);
    return (m == NEG_INF_) ? 0.0f : m * -1.4426950408889634f;
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

// One 8-byte DSMEM push (x = warp max, y = warp sum): one transaction, one complete_tx of 8 B.
__device__ __forceinline__ void st_async_v2f32(unsigned remote, float a, float b, unsigned remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
                 :: "r"(remote), "f"(a), "f"(b), "r"(remote_bar) : "memory");
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
    __shared__ __align__(16) float2 sxch[2][NPART];   // x = warp max, y = warp sum of exp
    __shared__ int srow[2];
    __shared__ int init_rows[2];
    __shared__ __align__(8) unsigned long long bar_xch[2];

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const bool leader = (rank == 0u) && (tid == 0);
    const bool leader_warp = (rank == 0u) && (warp == 0);
    const float NEG_INF = -__int_as_float(0x7f800000);

    const unsigned a_bar = smem_addr(&bar_xch[0]);   // + 8 * parity slot

    // ---- prologue: barriers (armed for their first use), first rows of this cluster ----
    int q = 0;   // leader only: the row index to broadcast in the next iteration
    if (tid == 0) {
        mbar_init(a_bar, 1u);
        mbar_init(a_bar + 8u, 1u);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        mbar_expect(a_bar, XCH_BYTES);
        mbar_expect(a_bar + 8u, XCH_BYTES);
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

        // ---- per-warp (local) max and sum of exp: no cluster wait in between ----
        // 4 independent max chains (one per float4 component), combined as a tree.
        float m0 = v[0].x, m1 = v[0].y, m2 = v[0].z, m3 = v[0].w;
#pragma unroll
        for (int k = 1; k < NV; ++k) {
            m0 = nanmax(m0, v[k].x);
            m1 = nanmax(m1, v[k].y);
            m2 = nanmax(m2, v[k].z);
            m3 = nanmax(m3, v[k].w);
        }
        const float mw = warp_max(nanmax(nanmax(m0, m1), nanmax(m2, m3)));

        // exp(v - mw) = 2^(v*log2e + cw): one FFMA + EX2 per element, rounded once near zero.
        // v is kept unchanged: the store recomputes the exp against the row's offset.
        const float LOG2E = 1.4426950408889634f;
        const float cw = exp_offset(mw);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            s0 += exp2f(fmaf(v[k].x, LOG2E, cw));
            s1 += exp2f(fmaf(v[k].y, LOG2E, cw));
            s2 += exp2f(fmaf(v[k].z, LOG2E, cw));
            s3 += exp2f(fmaf(v[k].w, LOG2E, cw));
        }
        const float sw = warp_sum((s0 + s1) + (s2 + s3));

        // ---- one exchange: (mw, sw) of every warp (+ the next row index) to every CTA ----
        int qq = 0;
        if (leader_warp) qq = __shfl_sync(0xffffffffu, q, 0);
        const unsigned bx = a_bar + 8u * p;
        if (lane < CLUSTER) {
            const unsigned rbar = mapa_rank(bx, (unsigned)lane);
            const int slot = (int)rank * NWARPS + warp;
            st_async_v2f32(mapa_rank(smem_addr(&sxch[p][slot]), (unsigned)lane), mw, sw, rbar);
            if (leader_warp)
                st_async_u32(mapa_rank(smem_addr(&srow[p]), (unsigned)lane), (unsigned)qq, rbar);
        }
        if (leader) q = atomicAdd(ctr, 1);          // consumed one iteration later
        mbar_wait(bx, par);
        if (tid == 0) mbar_expect(bx, XCH_BYTES);   // arm this barrier's next use

        // ---- combine: gm = max m_i, gs = sum s_i * 2^(cg - c_i) ----
        float mi[CLUSTER], si[CLUSTER];
        float t = NEG_INF;
        if (lane < NWARPS) {
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) {
                const float2 e = sxch[p][r * NWARPS + lane];   // one ld.shared.v2
                mi[r] = e.x;
                si[r] = e.y;
                t = nanmax(t, mi[r]);
            }
        } else {
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) { mi[r] = NEG_INF; si[r] = 0.0f; }
        }
        const int rq = srow[p];
#if L2_PREFETCH
        // ---- L2 prefetch of the row two iterations ahead (no registers held) ----
        // This CTA's slice of a row is NV contiguous chunks of THREADS float4 each:
        // chunk k starts at float4 index k*STRIDE4 + rank*THREADS (16-byte aligned,
        // THREADS*16 bytes long). One thread per chunk issues a bulk L2 prefetch.
        if (tid < NV && rq < rows) {
            const float* src = x + (long long)rq * FAST_COLS
                             + 4LL * (long long)(tid * STRIDE4 + (int)rank * THREADS);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;"
                         :: "l"(src), "r"((unsigned)(THREADS * 16)));
        }
#endif
        const float gm = warp_max(t);
        const float cg = exp_offset(gm);
        float u = 0.0f;
#pragma unroll
        for (int r = 0; r < CLUSTER; ++r) {
            // an all -inf partial contributes 0 (its rescale could be inf or NaN)
            const float term = si[r] * exp2f(cg - exp_offset(mi[r]));
            u += (mi[r] == NEG_INF) ? 0.0f : term;
        }
        const float gs = warp_sum(u);
        const float inv = 1.0f / gs;

        float4* __restrict__ yr = reinterpret_cast<float4*>(y + (long long)rc * FAST_COLS);
#pragma unroll
        for (int k = 0; k < NV; ++k) {
            float4 o;
            o.x = exp2f(fmaf(v[k].x, LOG2E, cg)) * inv;
            o.y = exp2f(fmaf(v[k].y, LOG2E, cg)) * inv;
            o.z = exp2f(fmaf(v[k].z, LOG2E, cg)) * inv;
            o.w = exp2f(fmaf(v[k].w, LOG2E, cg)) * inv;
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
