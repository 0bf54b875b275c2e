# evokernel: best kernel of run branching-s0 for problem softmax
# candidate 527bf368b3150468, generation 2, operator idea; speedup 1.823x over eager (1.0504 ms -> 0.5762 ms, 121% of floor)
# idea: [compute] Add a template<bool FULL> version of softmax_cluster_kernel, chosen in Python when cols/4 == CLUSTER*BLOCK*V4 (true for 65536 at every tuned CLUSTER/BLOCK/V4 product that equals 16384; otherwise the masked FULL=false path runs). It drops all 2*V4 `g < n4` predicates, the -inf fills and the (m == NEG_INF) select. It builds one 64-bit pointer per thread, xr + base*4, and addresses the loads and streaming stores as [ptr + j*BLOCK*16] with compile-time immediate offsets, so there are no per-vector 64-bit IMADs. It also computes 1/S once with __frcp_rn and folds it into c, so the store phase is exactly 4 FMUL + 1 STG.128 per float4 with no integer work.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/branching-s0/best.py
"""Softmax over dim=1, NVRTC form: one thread-block cluster (CLUSTER CTAs) per row. The row stays
in registers: every thread issues its V4 float4 streaming loads back-to-back, then computes a
warp-level max and a warp-level sum of exp(x - warp_max) from registers. Each warp's (max, sum)
pair goes to shared memory. One cluster barrier later, every warp gathers all CLUSTER*NWARPS
pairs over DSMEM and combines them (max first, then a rescaled sum). All threads in the cluster
combine them in the same order, so they get bitwise-identical (M, S). The output is
exp(x - warp_max) * (exp(warp_max - M) / S), written from registers with streaming float4
stores. The exit barrier is split: arrive right after the DSMEM reads, wait after the stores.
Shapes that do not fit (cols % 4 != 0, row too long, misaligned) use the generic
one-block-per-row kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int CLUSTER = 8;   // tune: 2 4 8
constexpr int BLOCK = 256;   // tune: 128 256 512 1024
constexpr int V4 = 8;        // tune: 4 8 16
constexpr int NWARPS = BLOCK / 32;
constexpr int NPAIRS = CLUSTER * NWARPS;
constexpr int PPL = (NPAIRS + 31) / 32;   // warp pairs gathered per lane
constexpr int MIN_BLOCKS = 5;             // tune: 1 4 5 6
constexpr int MINB_RAW = (MIN_BLOCKS * BLOCK <= 2048) ? MIN_BLOCKS : (2048 / BLOCK);
constexpr int MINB = MINB_RAW < 1 ? 1 : MINB_RAW;   // resident CTAs per SM asked of ptxas
constexpr int SPAN = BLOCK * V4;          // float4 of one row held by one CTA
constexpr int ROW4 = CLUSTER * SPAN;      // float4 of one row held by one cluster

// ---------------------------------------------------------------------------------------------
// small PTX helpers
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float nanmax(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));   // propagates NaN like PyTorch
    return r;
}

__device__ __forceinline__ float4 ld_stream4(const float* p) {
    float4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void st_stream4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ float2 ld_cluster_f2(unsigned local_saddr, unsigned rank) {
    unsigned raddr;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(raddr) : "r"(local_saddr), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(raddr) : "memory");
    return v;
}

__device__ __forceinline__ void cluster_arrive() {   // release semantics by default
    asm volatile("barrier.cluster.arrive.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {     // acquire semantics by default
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// Fast path: one cluster of CLUSTER CTAs per row, the row held in registers.
// Requires cols4 = cols / 4 <= CLUSTER * BLOCK * V4, 16-byte aligned rows (checked in Python).
// Grid = rows * CLUSTER (1-D), so cluster rank = blockIdx.x % CLUSTER, row = blockIdx.x / CLUSTER.
// ---------------------------------------------------------------------------------------------
// FULL = true: cols4 == ROW4 exactly (65536 columns at the default sizes). No bounds predicates,
// no -inf fills, the row stride is a compile-time shift, and every load / store addresses
// [one 64-bit pointer + j*BLOCK*16 bytes], an immediate offset, so there is no per-vector
// integer work. FULL = false: the masked path for shorter rows.
template <bool FULL>
__device__ __forceinline__ void cluster_softmax_body(const float* __restrict__ x, float* __restrict__ y,
                                                     long long cols4, float2* red) {
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const unsigned rank = blockIdx.x % CLUSTER;
    const long long row = blockIdx.x / CLUSTER;
    const int n4 = FULL ? ROW4 : (int)cols4;
    const float NEG_INF = -__int_as_float(0x7f800000);
    const int base = (int)rank * SPAN + tid;     // float4 index inside the row
    const long long off = (row * (FULL ? (long long)ROW4 : cols4) + base) * 4;
    const float* __restrict__ xp = x + off;      // this thread's first float4
    float* __restrict__ yp = y + off;

    // 1) all loads in flight at once
    float4 v[V4];
#pragma unroll
    for (int j = 0; j < V4; ++j) {
        if (FULL || base + j * BLOCK < n4) v[j] = ld_stream4(xp + j * (BLOCK * 4));
        else                               v[j] = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }

    // 2) warp max (NaN-propagating)
    float m = NEG_INF;
#pragma unroll
    for (int j = 0; j < V4; ++j)
        m = nanmax(m, nanmax(nanmax(v[j].x, v[j].y), nanmax(v[j].z, v[j].w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = nanmax(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float msub = (m == NEG_INF) ? 0.0f : m;   // all -inf / masked warp: exp(-inf) = 0

    // 3) exp once, kept in registers; warp sum
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < V4; ++j) {
        v[j].x = expf(v[j].x - msub);
        v[j].y = expf(v[j].y - msub);
        v[j].z = expf(v[j].z - msub);
        v[j].w = expf(v[j].w - msub);
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) red[warp] = make_float2(m, s);

    // 4) one cluster barrier publishes all warp pairs (also orders the CTA's own smem)
    cluster_arrive();
    cluster_wait();

    const unsigned red_base = smem_addr(&red[0]);
    float pm[PPL], ps[PPL];
#pragma unroll
    for (int q = 0; q < PPL; ++q) {
        const int k = lane + q * 32;
        if (k < NPAIRS) {
            const float2 p = ld_cluster_f2(red_base + (unsigned)(k % NWARPS) * 8u, (unsigned)(k / NWARPS));
            pm[q] = p.x; ps[q] = p.y;
        } else {
            pm[q] = NEG_INF; ps[q] = 0.0f;
        }
    }
    cluster_arrive();   // done reading remote shared memory; the matching wait is at the end

    // 5) combine: global max, then rescaled sum (same order in every warp of the cluster)
    float M = NEG_INF;
#pragma unroll
    for (int q = 0; q < PPL; ++q) M = nanmax(M, pm[q]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = nanmax(M, __shfl_xor_sync(0xffffffffu, M, o));
    float t = 0.0f;
#pragma unroll
    for (int q = 0; q < PPL; ++q) t += (pm[q] == M) ? ps[q] : ps[q] * expf(pm[q] - M);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    const float S = t;
    // 1/S once (correctly rounded reciprocal), folded into this warp's rescale factor
    const float c = ((m == M) ? 1.0f : expf(m - M)) * __frcp_rn(S);

    // 6) streaming stores from registers: 4 FMUL + 1 STG.128 per float4 on the FULL path
#pragma unroll
    for (int j = 0; j < V4; ++j) {
        if (FULL || base + j * BLOCK < n4)
            st_stream4(yp + j * (BLOCK * 4), v[j].x * c, v[j].y * c, v[j].z * c, v[j].w * c);
    }

    cluster_wait();     // keep this CTA's shared memory alive until the whole cluster has read it
}

// One cluster of CLUSTER CTAs per row. Grid = rows * CLUSTER (1-D).
// Full rows: cols4 == ROW4 (checked in Python).
__global__ void __launch_bounds__(BLOCK, MINB) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_full(const float* __restrict__ x, float* __restrict__ y,
                     long long rows, long long cols4) {
    __shared__ float2 red[NWARPS];
    cluster_softmax_body<true>(x, y, cols4, red);
}

// Shorter rows: cols4 < ROW4 (checked in Python).
__global__ void __launch_bounds__(BLOCK, MINB) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_masked(const float* __restrict__ x, float* __restrict__ y,
                       long long rows, long long cols4) {
    __shared__ float2 red[NWARPS];
    cluster_softmax_body<false>(x, y, cols4, red);
}

// ---------------------------------------------------------------------------------------------
// Generic fallback (any shape / alignment): one block per row; block max, block sum, write.
// ---------------------------------------------------------------------------------------------
// Tree reduction in shared memory over all BLOCK threads; valid for any BLOCK >= 1.
// Every thread gets the result. `sh` holds BLOCK floats.
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
    __syncthreads();   // sh may be reused right after
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

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row.
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
"""

kernels = compile_kernels(cuda_src, ["softmax_cluster_full", "softmax_cluster_masked",
                                     "softmax_row_kernel"])
CLUSTER = kernels.constant("CLUSTER")
BLOCK = kernels.constant("BLOCK")
V4 = kernels.constant("V4")
CAP4 = CLUSTER * BLOCK * V4   # float4s of one row a cluster can hold in registers


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
        if (cols % 4 == 0 and cols // 4 <= CAP4
                and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
                and rows * CLUSTER <= 2**31 - 1):
            cols4 = cols // 4
            k = kernels.softmax_cluster_full if cols4 == CAP4 else kernels.softmax_cluster_masked
            k.launch(rows * CLUSTER, BLOCK, x, y, rows, cols4)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
