# evokernel: best kernel of run softmax for problem softmax
# candidate 2f13d5f8df6ca26d, generation 3, operator idea; speedup 1.864x over eager (1.0514 ms -> 0.5639 ms, 118% of floor)
# idea: [dtypes] Use 32-bit immediate-offset float4 addressing on the FULL path. Form the 64-bit row pointer once per row as `const float4* p = xr + tid` and index only with compile-time offsets `p[u*BLOCK]` (u < VPT), and do the same for the store pointer. Every LDG.E.128/STG.E.128 then becomes `[R+imm]` with no per-vector 64-bit IMAD/IADD, which cuts the address registers by about 2*VPT and lets `__launch_bounds__` reach MINB 5-6 at BLOCK=256, VPT=8 without spills.
# check it: evokernel check softmax results/h200-2026-12-02/frontier/softmax/best.py
"""Softmax (dim=1): the row lives in registers across a thread-block cluster; one ex2.approx per element.

A cluster of CLUSTER blocks (BLOCK threads each) owns one row; every thread holds VPT float4 of it in
registers (coalesced stride-BLOCK loads, all issued before any use), so HBM sees exactly one read and
one write per element. Per thread:
  m_t  = max of its values (plain FMNMX: a NaN poisons the sum below, so it still propagates)
  mL_t = m_t * LOG2E (rounded once; the same value is used everywhere it appears, so its rounding cancels)
  e_i  = ex2.approx(fmaf(v_i, LOG2E, -mL_t))   -> kept in the registers in place of v_i
  s_t  = tree sum of the e_i
(mL, s) partials are merged by a warp-shuffle tree, a cross-warp tree, and a cluster-wide merge that
warp 0 of every block does over the blocks' DSMEM slots (identical result in every block). The write
pass is then one FMUL per element: y_i = e_i * (ex2(mL_t - M) * (1/S)). No expf range reduction, no
per-element division, and only one exponential per element instead of two.
Rows too long for the register budget use a two-read fallback with the same ex2 math.
When the row is exactly CLUSTER*BLOCK*VPT vectors (FULL), each thread forms one 64-bit base pointer per
row and addresses its VPT vectors with compile-time offsets only ([R+imm] LDG/STG, no predicates), which
frees the per-vector address registers so that __launch_bounds__ can ask for FULL_MINB blocks per SM.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor softmax_cuda(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cooperative_groups.h>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <algorithm>

namespace cg = cooperative_groups;

constexpr int BLOCK = 256;       // tune: 128 256 512 1024
constexpr int CLUSTER = 8;       // tune: 2 4 8
constexpr int FB_BLOCK = 1024;   // fallback kernel (rows that do not fit in the cluster's registers)
constexpr int FULL_MINB = 5;     // tune: 4 5 6
constexpr int ROW_WAVES = 0;     // tune: 0 1 2 4
// FULL_MINB: blocks/SM requested for the exact-fit path (still capped by a data+8 register estimate).
// ROW_WAVES: 0 = one cluster per row; k > 0 = grid capped at k x resident clusters (persistent grid-stride).
constexpr int NWARPS = BLOCK / 32;
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");
static_assert(CLUSTER >= 1 && CLUSTER <= 8, "portable cluster size");

constexpr float LOG2E = 1.4426950408889634f;
#define NEG_BIG (-FLT_MAX)
#define NEG_INF (__int_as_float(0xff800000))

// Register budget of the row-in-registers kernel for VPT vectors of VEC floats per thread.
template <int VEC, int VPT>
struct RegCfg {
    static constexpr int FLOATS = VEC * VPT;
    static constexpr int REGS = ((FLOATS + 24 + 7) / 8) * 8;          // data + bookkeeping estimate
    static constexpr int REG_CAP = (65536 / BLOCK) < 255 ? (65536 / BLOCK) : 255;
    static constexpr bool FEASIBLE = (FLOATS <= 64) && (REGS <= REG_CAP);
    static constexpr int BY_REGS = 65536 / (BLOCK * REGS);
    static constexpr int BY_THREADS = 2048 / BLOCK;
    static constexpr int MINB = BY_REGS < 1 ? 1 : (BY_REGS < BY_THREADS ? BY_REGS : BY_THREADS);
};

// Exact-fit path: no padding, no predicates, one base pointer -> only ~8 registers beyond the data.
template <int VEC, int VPT>
struct FullCfg {
    static constexpr int REGS = ((VEC * VPT + 8 + 7) / 8) * 8;
    static constexpr int BY_REGS = 65536 / (BLOCK * REGS);
    static constexpr int BY_THREADS = 2048 / BLOCK;
    static constexpr int A = FULL_MINB < BY_REGS ? FULL_MINB : BY_REGS;
    static constexpr int B = A < BY_THREADS ? A : BY_THREADS;
    static constexpr int MINB = B < 1 ? 1 : B;
};

template <int VEC, int VPT, bool FULL>
struct KMinB {
    static constexpr int value = FULL ? FullCfg<VEC, VPT>::MINB : RegCfg<VEC, VPT>::MINB;
};

// 2^x with MUFU.EX2; non-.ftz so subnormal results survive.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <int VEC> __device__ __forceinline__ void load_vec(const float* p, long long i, long long n, float* a);
template <> __device__ __forceinline__ void load_vec<4>(const float* p, long long i, long long n, float* a) {
    if (i < n) {
        const float4 t = __ldcs(reinterpret_cast<const float4*>(p) + i);
        a[0] = t.x; a[1] = t.y; a[2] = t.z; a[3] = t.w;
    } else {
        a[0] = NEG_INF; a[1] = NEG_INF; a[2] = NEG_INF; a[3] = NEG_INF;
    }
}
template <> __device__ __forceinline__ void load_vec<1>(const float* p, long long i, long long n, float* a) {
    a[0] = (i < n) ? __ldcs(p + i) : NEG_INF;
}

template <int VEC> __device__ __forceinline__ void store_vec(float* p, long long i, long long n, const float* a);
template <> __device__ __forceinline__ void store_vec<4>(float* p, long long i, long long n, const float* a) {
    if (i < n) __stcs(reinterpret_cast<float4*>(p) + i, make_float4(a[0], a[1], a[2], a[3]));
}
template <> __device__ __forceinline__ void store_vec<1>(float* p, long long i, long long n, const float* a) {
    if (i < n) __stcs(p + i, a[0]);
}

// FULL path: p is the thread's first element, `off` a compile-time vector offset after unrolling,
// so each access is [R+imm] off one 64-bit register (no per-vector IMAD.WIDE / compare).
template <int VEC> __device__ __forceinline__ void load_full(const float* __restrict__ p, int off, float* a);
template <> __device__ __forceinline__ void load_full<4>(const float* __restrict__ p, int off, float* a) {
    const float4 t = __ldcs(reinterpret_cast<const float4*>(p) + off);
    a[0] = t.x; a[1] = t.y; a[2] = t.z; a[3] = t.w;
}
template <> __device__ __forceinline__ void load_full<1>(const float* __restrict__ p, int off, float* a) {
    a[0] = __ldcs(p + off);
}

template <int VEC> __device__ __forceinline__ void store_full(float* __restrict__ p, int off, const float* a);
template <> __device__ __forceinline__ void store_full<4>(float* __restrict__ p, int off, const float* a) {
    __stcs(reinterpret_cast<float4*>(p) + off, make_float4(a[0], a[1], a[2], a[3]));
}
template <> __device__ __forceinline__ void store_full<1>(float* __restrict__ p, int off, const float* a) {
    __stcs(p + off, a[0]);
}

template <int VEC> __device__ __forceinline__ float vsum(const float* a);
template <> __device__ __forceinline__ float vsum<4>(const float* a) { return (a[0] + a[1]) + (a[2] + a[3]); }
template <> __device__ __forceinline__ float vsum<1>(const float* a) { return a[0]; }

// (m, s) <- merge of two partial states in the log2 domain: s = sum 2^(v*LOG2E - m).
// m is never NaN (maxima use fmaxf); a NaN input makes s NaN, which then poisons the whole row.
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    s = s * ex2_approx(m - M) + s2 * ex2_approx(m2 - M);
    m = M;
}

__device__ __forceinline__ void warp_reduce_ms(float& m, float& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge_ms(m, s, m2, s2);
    }
}

// Block reduction of (m, s); the result is valid in warp 0 (thread 0 included).
template <int NW>
__device__ __forceinline__ void block_reduce_ms(float& m, float& s, float* red_m, float* red_s) {
    warp_reduce_ms(m, s);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < NW) ? red_m[lane] : NEG_BIG;
        s = (lane < NW) ? red_s[lane] : 0.0f;
        warp_reduce_ms(m, s);
    }
}

__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// One cluster per row (grid-stride over rows by cluster). Block `rank` owns vectors
// [rank*BLOCK*VPT, (rank+1)*BLOCK*VPT) of the row; thread t holds vectors rank*BLOCK*VPT + j*BLOCK + t.
// FULL: n == CLUSTER*BLOCK*VPT exactly (checked on the host): no bounds checks, immediate offsets.
template <int VEC, int VPT, bool FULL>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(BLOCK, KMinB<VEC, VPT, FULL>::value)
softmax_reg_cluster(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float2 slot;    // this block's partial (mL, s), read by the whole cluster
    __shared__ float2 bcast;   // the row's (M, 1/S)

    cg::cluster_group cluster = cg::this_cluster();
    const int rank = (int)cluster.block_rank();
    const long long nclusters = gridDim.x / CLUSTER;
    const int n = (int)(cols / VEC);                 // <= CLUSTER*BLOCK*VPT, checked on the host
    const int base = rank * (BLOCK * VPT) + (int)threadIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

    for (long long row = blockIdx.x / CLUSTER; row < rows; row += nclusters) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;

        // HBM -> registers, all loads in flight at once. FULL: one 64-bit base, [R+imm] per vector.
        float a[VPT][VEC];
        if constexpr (FULL) {
            const float* __restrict__ xt = xr + (long long)base * VEC;
#pragma unroll
            for (int j = 0; j < VPT; ++j) load_full<VEC>(xt, j * BLOCK, a[j]);
        } else {
#pragma unroll
            for (int j = 0; j < VPT; ++j) load_vec<VEC>(xr, base + j * BLOCK, n, a[j]);
        }

        // Thread max, then one FFMA + one ex2 per element against it.
        float m = NEG_BIG;
#pragma unroll
        for (int j = 0; j < VPT; ++j)
#pragma unroll
            for (int k = 0; k < VEC; ++k) m = fmaxf(m, a[j][k]);
        const float mL = fmaxf(m * LOG2E, NEG_BIG);   // finite even for a thread of only -inf / padding
        const float nmL = -mL;

        float ps[VPT];
#pragma unroll
        for (int j = 0; j < VPT; ++j) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[j][k] = ex2_approx(fmaf(a[j][k], LOG2E, nmL));
            ps[j] = vsum<VEC>(a[j]);
        }
#pragma unroll
        for (int w = 1; w < VPT; w <<= 1)
#pragma unroll
            for (int j = 0; j + w < VPT; j += 2 * w) ps[j] += ps[j + w];

        // Block partial, then cluster-wide merge through DSMEM.
        float bm = mL, bs = ps[0];
        block_reduce_ms<NWARPS>(bm, bs, red_m, red_s);
        if (threadIdx.x == 0) slot = make_float2(bm, bs);
        cluster_arrive();      // release: slot visible to the cluster
        cluster_wait();        // acquire: every block's slot is written
        if (warp == 0) {
            float cm = NEG_BIG, cs = 0.0f;
            if (lane < CLUSTER) {
                const float2 p = *cluster.map_shared_rank(&slot, (unsigned)lane);
                cm = p.x; cs = p.y;
            }
            warp_reduce_ms(cm, cs);
            if (lane == 0) bcast = make_float2(cm, 1.0f / cs);
        }
        __syncthreads();
        cluster_arrive();      // this block is done reading its peers' slots

        // Registers -> HBM: one FMUL per element.
        const float2 b = bcast;
        const float c = ex2_approx(mL - b.x) * b.y;
        if constexpr (FULL) {
            float* __restrict__ yt = yr + (long long)base * VEC;
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) a[j][k] *= c;
                store_full<VEC>(yt, j * BLOCK, a[j]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < VPT; ++j) {
#pragma unroll
                for (int k = 0; k < VEC; ++k) a[j][k] *= c;
                store_vec<VEC>(yr, base + j * BLOCK, n, a[j]);
            }
        }

        cluster_wait();        // peers finished reading our slot: safe to rewrite it / exit
    }
}

// Fallback for rows too long for the cluster's registers: two reads, one write, same ex2 math.
template <int VEC>
__global__ void __launch_bounds__(FB_BLOCK)
softmax_rows_fallback(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
    constexpr int FB_NW = FB_BLOCK / 32;
    __shared__ float red_m[FB_NW];
    __shared__ float red_s[FB_NW];
    __shared__ float2 bcast;
    const long long n = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + row * cols;
        float* yr = y + row * cols;
        float mL = NEG_BIG, s = 0.0f;
        for (long long i = threadIdx.x; i < n; i += FB_BLOCK) {
            float a[VEC];
            load_vec<VEC>(xr, i, n, a);
            float lm = a[0];
#pragma unroll
            for (int k = 1; k < VEC; ++k) lm = fmaxf(lm, a[k]);
            const float lmL = lm * LOG2E;
            if (lmL > mL) { s *= ex2_approx(mL - lmL); mL = lmL; }
            const float nmL = -mL;
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[k] = ex2_approx(fmaf(a[k], LOG2E, nmL));
            s += vsum<VEC>(a);
        }
        block_reduce_ms<FB_NW>(mL, s, red_m, red_s);
        if (threadIdx.x == 0) bcast = make_float2(mL, 1.0f / s);
        __syncthreads();
        const float nM = -bcast.x, inv = bcast.y;
        for (long long i = threadIdx.x; i < n; i += FB_BLOCK) {
            float a[VEC];
            load_vec<VEC>(xr, i, n, a);
#pragma unroll
            for (int k = 0; k < VEC; ++k) a[k] = ex2_approx(fmaf(a[k], LOG2E, nM)) * inv;
            store_vec<VEC>(yr, i, n, a);
        }
    }
}

// Launch the register kernel for (VEC, VPT) if that configuration fits the register budget and the row.
template <int VEC, int VPT, bool OK = RegCfg<VEC, VPT>::FEASIBLE>
struct RegLaunch {
    static bool run(const float*, float*, long long, long long, cudaStream_t) { return false; }
};
template <int VEC, int VPT>
struct RegLaunch<VEC, VPT, true> {
    template <bool FULL>
    static void go(const float* xp, float* yp, long long rows, long long cols, cudaStream_t stream) {
        long long clusters = std::min<long long>(rows, 1LL << 20);
        if (ROW_WAVES > 0) {
            static int resident = -1;    // clusters resident at once (per instantiation), computed once
            if (resident < 0) {
                int nb = 0;
                if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, softmax_reg_cluster<VEC, VPT, FULL>,
                                                                  BLOCK, 0) != cudaSuccess) {
                    (void)cudaGetLastError();
                    nb = 0;
                }
                const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
                resident = (nb * sms) / CLUSTER;
            }
            if (resident > 0) clusters = std::min<long long>(clusters, (long long)ROW_WAVES * resident);
        }
        softmax_reg_cluster<VEC, VPT, FULL><<<(unsigned)(clusters * CLUSTER), BLOCK, 0, stream>>>(xp, yp, rows, cols);
    }
    static bool run(const float* xp, float* yp, long long rows, long long cols, cudaStream_t stream) {
        const long long n = cols / VEC;
        const long long cap = (long long)CLUSTER * BLOCK * VPT;
        if (n > cap) return false;
        if (n == cap) go<true>(xp, yp, rows, cols, stream);
        else          go<false>(xp, yp, rows, cols, stream);
        return true;
    }
};

static bool launch_reg4(const float* xp, float* yp, long long rows, long long cols, cudaStream_t st) {
    return RegLaunch<4, 1>::run(xp, yp, rows, cols, st) || RegLaunch<4, 2>::run(xp, yp, rows, cols, st) ||
           RegLaunch<4, 4>::run(xp, yp, rows, cols, st) || RegLaunch<4, 8>::run(xp, yp, rows, cols, st) ||
           RegLaunch<4, 16>::run(xp, yp, rows, cols, st);
}
static bool launch_reg1(const float* xp, float* yp, long long rows, long long cols, cudaStream_t st) {
    return RegLaunch<1, 2>::run(xp, yp, rows, cols, st) || RegLaunch<1, 8>::run(xp, yp, rows, cols, st) ||
           RegLaunch<1, 32>::run(xp, yp, rows, cols, st);
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_cuda: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax_cuda: x must be float32");
    TORCH_CHECK(x.dim() == 2, "softmax_cuda: x must be 2D (softmax over dim 1)");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const long long rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0) return y;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec4 = (cols % 4 == 0) &&
                      (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                      (reinterpret_cast<uintptr_t>(yp) % 16 == 0);

    const bool done = vec4 ? launch_reg4(xp, yp, rows, cols, stream)
                           : launch_reg1(xp, yp, rows, cols, stream);
    if (!done) {
        const unsigned grid = (unsigned)std::min<long long>(rows, 1LL << 20);
        if (vec4) softmax_rows_fallback<4><<<grid, FB_BLOCK, 0, stream>>>(xp, yp, rows, cols);
        else      softmax_rows_fallback<1><<<grid, FB_BLOCK, 0, stream>>>(xp, yp, rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(
    name="softmax_reg_cluster_ex2_imm",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["softmax_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32 or x.dim() != 2:
            raise ValueError("ModelNew expects a 2D float32 CUDA tensor")
        return module.softmax_cuda(x)
