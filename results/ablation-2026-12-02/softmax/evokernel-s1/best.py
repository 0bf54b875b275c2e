# evokernel: best kernel of run evokernel-s1 for problem softmax
# candidate 8b84770bf00f4ab9, generation 4, operator idea; speedup 1.882x over eager (1.0524 ms -> 0.5593 ms, 114% of floor)
# idea: [compute] Cut the per-element exp cost from libdevice expf (about 8-10 SASS ops with range reduction) to three ops: keep d = a - ms exact in FP32, then compute e = ex2.approx.f32(d * 1.4426950408889634f) with inline PTX, using the non-ftz form so denormal outputs survive. Use the same helper for the rescale factor s *= ex2((m - gm)*LOG2E), for merge_ms, and for the epilogue factor f_g = ex2((ref[g] - M)*LOG2E) * invS, where invS = 1.0f/S is computed once per thread instead of doing 8 IEEE divisions. Put it behind `#define FAST_EXP 1 // tune: 0 1`, where 0 keeps expf, so the gate can settle the offset and heavy-tail accuracy by measurement.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/evokernel-s1/best.py
"""Softmax (dim=1), NVRTC form. Fast path: one 8-block thread-block cluster per row. Each block
stages its slice of the row in static shared memory with cp.async (16-byte, coalesced, float4
stride-1 layout), turns it into exp(x - m_thread) in place while summing, the block reduces its
(max, sum) pair with warp shuffles, the cluster exchanges the block pairs through distributed
shared memory, and every block scales its staged slice and streams it out with float4 stores.
HBM traffic: one read and one write per element. Other shapes use the general one-block-per-row
kernel."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

CLUSTER = 8        # blocks per row (portable cluster size)
SLICE_F4 = 2048    # float4 per block staged in static shared memory (32 KiB); 8 * 2048 * 4 = 65536 cols

cuda_src = r"""
constexpr int BLOCK = 256;  // tune: 128 256 512 1024

#ifndef CLUSTER
#define CLUSTER 8
#endif
#ifndef SLICE_F4
#define SLICE_F4 2048
#endif

#define NEG_INF (-__int_as_float(0x7f800000))
#define FULL_MASK 0xffffffffu

#define FAST_EXP 1  // tune: 0 1

// Exponents are kept in "exp_u units": t = x * KSCALE, exp_u(t) = e^x.
// FAST_EXP=1: base 2 (KSCALE = log2 e, one MUFU ex2, non-ftz so subnormal results survive).
// FAST_EXP=0: natural units (KSCALE = 1, libdevice expf); fmaf(x, 1, -m) == x - m exactly.
// Each reference max is stored already scaled (mk = fl(m*KSCALE)), and every merge and the
// epilogue use differences of those same stored floats. A shared shift cancels in softmax, so
// rounding m*KSCALE adds no error. Each element's exponent is fmaf(x, KSCALE, -mk): rounded once.
#if FAST_EXP
#define KSCALE 1.4426950408889634f
__device__ __forceinline__ float exp_u(float t) {
    float r;
    asm("ex2.approx.f32 %0, %1;\n" : "=f"(r) : "f"(t));
    return r;
}
#else
#define KSCALE 1.0f
__device__ __forceinline__ float exp_u(float t) { return expf(t); }
#endif

constexpr int NWARPS = (BLOCK + 31) / 32;
constexpr int VPT = (SLICE_F4 + BLOCK - 1) / BLOCK;   // float4 per thread
constexpr int MAX_GROUPS = 8;                          // tune: 1 2 4 8
static_assert(MAX_GROUPS >= 1 && MAX_GROUPS <= 8, "wait_group switch covers 0..7");
constexpr int NGRP = (VPT < MAX_GROUPS) ? VPT : MAX_GROUPS;   // cp.async commit groups per thread
constexpr int KPG = (VPT + NGRP - 1) / NGRP;                  // float4 per group per thread

__device__ __forceinline__ float nanmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;    // propagate NaN like PyTorch
}

// Merge (m, s) with (m2, s2), where s = sum exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float mn = nanmax(m, m2);
    if (mn == NEG_INF) { s = s + s2; m = mn; return; }   // both empty
    s = s * exp_u(m - mn) + s2 * exp_u(m2 - mn);   // m, m2 are in exp_u units
    m = mn;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Wait until at most n of this thread's most recent commit groups are still pending.
// n is a compile-time constant after unrolling, so the switch folds to one instruction.
__device__ __forceinline__ void cp_async_wait_pending(int n) {
    switch (n) {
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    case 7: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    }
}

__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Load a float2 from the shared memory of block `rank` of this cluster, at the address of `p`.
__device__ __forceinline__ float2 ld_dsmem_f2(const float2* p, unsigned rank) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
    float2 v;
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
                 : "=f"(v.x), "=f"(v.y) : "r"(ra) : "memory");
    return v;
}

// One cluster of CLUSTER blocks per row; block `rank` owns float4s [rank*n4, (rank+1)*n4).
// Requires cols % (4*CLUSTER) == 0, cols / CLUSTER <= 4*SLICE_F4, 16-byte aligned x and y.
__global__ void __launch_bounds__(BLOCK) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ float4 tile[SLICE_F4];
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ __align__(8) float2 part;   // this block's (max, sum), read by the whole cluster
    __shared__ float fin[2];    // the row's (max, sum)

    const unsigned rank = cluster_ctarank();
    const long long row = blockIdx.x / CLUSTER;
    const int n4 = (int)(cols / (4 * CLUSTER));
    const float4* src = reinterpret_cast<const float4*>(x + row * cols) + (long long)rank * n4;
    float4* dst = reinterpret_cast<float4*>(y + row * cols) + (long long)rank * n4;
    const int tid = threadIdx.x;

    // 1. Stage this block's slice: every copy is issued at once, in NGRP commit groups
    //    (group g holds float4 rounds k = g*KPG .. g*KPG+KPG-1), so no registers are held.
#pragma unroll
    for (int g = 0; g < NGRP; ++g) {
#pragma unroll
        for (int kk = 0; kk < KPG; ++kk) {
            const int k = g * KPG + kk;
            const int i = tid + k * BLOCK;
            if (k < VPT && i < n4) cp_async16(&tile[i], src + i);
        }
        cp_async_commit();   // possibly empty; keeps the group count fixed
    }

    // 2+3. Consume group by group as it lands (each thread reads back only its own copies):
    //      online thread max, tile = exp(x - ref_g) in place, running sum rescaled when the
    //      max grows. ref[g] is the max the group's exps are relative to.
    float m = NEG_INF;      // running max of this thread's x (x units: comparisons, NaN)
    float mk = NEG_INF;     // fl(m * KSCALE): the reference exponent the sum is relative to
    float s = 0.0f;
    float ref[NGRP];        // per-group reference, in exp_u units
#pragma unroll
    for (int g = 0; g < NGRP; ++g) {
        cp_async_wait_pending(NGRP - 1 - g);
        float4 a[KPG];
        float gm = m;
#pragma unroll
        for (int kk = 0; kk < KPG; ++kk) {
            const int k = g * KPG + kk;
            const int i = tid + k * BLOCK;
            if (k < VPT && i < n4) {
                a[kk] = tile[i];
                gm = nanmax(gm, nanmax(nanmax(a[kk].x, a[kk].y), nanmax(a[kk].z, a[kk].w)));
            }
        }
        if (gm != m) {              // max grew (or became NaN): rescale the running sum
            const float gk = gm * KSCALE;
            s *= exp_u(mk - gk);    // m == -inf: s is 0 and stays 0
            m = gm;
            mk = gk;
        }
        const float msk = (m == NEG_INF) ? 0.0f : mk;
#pragma unroll
        for (int kk = 0; kk < KPG; ++kk) {
            const int k = g * KPG + kk;
            const int i = tid + k * BLOCK;
            if (k < VPT && i < n4) {
                float4 e;
                e.x = exp_u(fmaf(a[kk].x, KSCALE, -msk));
                e.y = exp_u(fmaf(a[kk].y, KSCALE, -msk));
                e.z = exp_u(fmaf(a[kk].z, KSCALE, -msk));
                e.w = exp_u(fmaf(a[kk].w, KSCALE, -msk));
                s += (e.x + e.y) + (e.z + e.w);
                tile[i] = e;
            }
        }
        ref[g] = mk;
    }

    // 4. Block reduce (mk, s), all in exp_u units from here on.
    float bm = mk, bs = s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(FULL_MASK, bm, o);
        const float s2 = __shfl_xor_sync(FULL_MASK, bs, o);
        merge_ms(bm, bs, m2, s2);
    }
    const int lane = tid & 31;
    const int warp = tid >> 5;
    if (lane == 0) { red_m[warp] = bm; red_s[warp] = bs; }
    __syncthreads();
    if (warp == 0) {
        float wm = (lane < NWARPS) ? red_m[lane] : NEG_INF;
        float ws = (lane < NWARPS) ? red_s[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(FULL_MASK, wm, o);
            const float s2 = __shfl_xor_sync(FULL_MASK, ws, o);
            merge_ms(wm, ws, m2, s2);
        }
        if (lane == 0) part = make_float2(wm, ws);
    }

    // 5. Cluster exchange through DSMEM.
    cluster_arrive();
    cluster_wait();     // every block's part[] is written and visible
    if (warp == 0) {
        float cm = NEG_INF, cs = 0.0f;
        if (lane < CLUSTER) {
            const float2 p = ld_dsmem_f2(&part, (unsigned)lane);
            cm = p.x;
            cs = p.y;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(FULL_MASK, cm, o);
            const float s2 = __shfl_xor_sync(FULL_MASK, cs, o);
            merge_ms(cm, cs, m2, s2);
        }
        if (lane == 0) { fin[0] = cm; fin[1] = cs; }
    }
    cluster_arrive();   // done reading remote shared memory (waited on before exit)
    __syncthreads();

    // 6. y = exp(x - ref_g) * exp(ref_g - M) / S, streamed out from shared memory.
    const float M = fin[0];          // row max, exp_u units
    const float S = fin[1];
    const float invS = 1.0f / S;     // one IEEE division per thread
#pragma unroll
    for (int g = 0; g < NGRP; ++g) {
        // ref_g == -inf: every exp of the group is exactly 0 (unless the whole row is -inf,
        // where the NaN of exp(-inf - -inf) matches PyTorch).
        const float f = (ref[g] == NEG_INF && M != NEG_INF) ? 0.0f : exp_u(ref[g] - M) * invS;
#pragma unroll
        for (int kk = 0; kk < KPG; ++kk) {
            const int k = g * KPG + kk;
            const int i = tid + k * BLOCK;
            if (k < VPT && i < n4) {
                float4 a = tile[i];
                a.x *= f; a.y *= f; a.z *= f; a.w *= f;
                __stcs(dst + i, a);
            }
        }
    }
    cluster_wait();     // no block leaves while another may still read its part[]
}

// General fallback: one block per row; block max, block sum of exp, then write.
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

__global__ void __launch_bounds__(BLOCK)
softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
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

kernels = compile_kernels(cuda_src, ["softmax_cluster_kernel", "softmax_row_kernel"],
                          options=[f"-DCLUSTER={CLUSTER}", f"-DSLICE_F4={SLICE_F4}"])
BLOCK = kernels.constant("BLOCK")


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
        use_cluster = (
            cols % (4 * CLUSTER) == 0
            and cols // CLUSTER <= 4 * SLICE_F4
            and rows * CLUSTER <= 2 ** 31 - 1
            and x.data_ptr() % 16 == 0
            and y.data_ptr() % 16 == 0
        )
        if use_cluster:
            kernels.softmax_cluster_kernel.launch(rows * CLUSTER, BLOCK, x, y, cols)
        else:
            kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
