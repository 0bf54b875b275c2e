# evokernel: best kernel of run evokernel-s1 for problem softmax
# candidate d7b279903864b99f, generation 1, operator idea; speedup 1.841x over eager (1.0508 ms -> 0.5708 ms, 119% of floor)
# idea: [memory] Stage the row in shared memory across a 2-block cluster: each 1024-thread block copies its 32768-float half of the row (128 KiB of dynamic shared memory, with cudaFuncAttributeMaxDynamicSharedMemorySize set) into smem using coalesced float4 loads and computes an online max/sum while it copies. The two blocks swap their (max, sum) partials through DSMEM and a cluster barrier, then each writes expf(smem - m) * inv_s from shared memory with float4 stores. HBM traffic is then exactly one read plus one write per element, and the smem layout is float4 stride-1 so there are no bank conflicts.
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

constexpr int NWARPS = (BLOCK + 31) / 32;
constexpr int VPT = (SLICE_F4 + BLOCK - 1) / BLOCK;   // float4 per thread

__device__ __forceinline__ float nanmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;    // propagate NaN like PyTorch
}

// Merge (m, s) with (m2, s2), where s = sum exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float mn = nanmax(m, m2);
    if (mn == NEG_INF) { s = s + s2; m = mn; return; }   // both empty
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
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
// Load a float from the shared memory of block `rank` of this cluster, at the address of `p`.
__device__ __forceinline__ float ld_dsmem(const float* p, unsigned rank) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(ra) : "r"(a), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(ra) : "memory");
    return v;
}

// One cluster of CLUSTER blocks per row; block `rank` owns float4s [rank*n4, (rank+1)*n4).
// Requires cols % (4*CLUSTER) == 0, cols / CLUSTER <= 4*SLICE_F4, 16-byte aligned x and y.
__global__ void __launch_bounds__(BLOCK) __cluster_dims__(CLUSTER, 1, 1)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y, long long cols) {
    __shared__ float4 tile[SLICE_F4];
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float part[2];   // this block's (max, sum), read by the whole cluster
    __shared__ float fin[2];    // the row's (max, sum)

    const unsigned rank = cluster_ctarank();
    const long long row = blockIdx.x / CLUSTER;
    const int n4 = (int)(cols / (4 * CLUSTER));
    const float4* src = reinterpret_cast<const float4*>(x + row * cols) + (long long)rank * n4;
    float4* dst = reinterpret_cast<float4*>(y + row * cols) + (long long)rank * n4;
    const int tid = threadIdx.x;

    // 1. Stage this block's slice: all copies in flight at once, no registers held.
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = tid + k * BLOCK;
        if (i < n4) cp_async16(&tile[i], src + i);
    }
    cp_async_wait_all();   // each thread only reads back what it copied itself

    // 2. Thread max over its own float4s.
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = tid + k * BLOCK;
        if (i < n4) {
            const float4 a = tile[i];
            m = nanmax(m, nanmax(nanmax(a.x, a.y), nanmax(a.z, a.w)));
        }
    }
    const float mr = (m == NEG_INF) ? 0.0f : m;   // reference point of this thread's exps

    // 3. In place: tile = exp(x - mr), and the thread's sum.
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = tid + k * BLOCK;
        if (i < n4) {
            float4 a = tile[i];
            a.x = expf(a.x - mr);
            a.y = expf(a.y - mr);
            a.z = expf(a.z - mr);
            a.w = expf(a.w - mr);
            s += (a.x + a.y) + (a.z + a.w);
            tile[i] = a;
        }
    }

    // 4. Block reduce (m, s).
    float bm = m, bs = s;
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
        if (lane == 0) { part[0] = wm; part[1] = ws; }
    }

    // 5. Cluster exchange through DSMEM.
    cluster_arrive();
    cluster_wait();     // every block's part[] is written and visible
    if (warp == 0) {
        float cm = NEG_INF, cs = 0.0f;
        if (lane < CLUSTER) {
            cm = ld_dsmem(&part[0], (unsigned)lane);
            cs = ld_dsmem(&part[1], (unsigned)lane);
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

    // 6. y = exp(x - mr) * exp(mr - M) / S, streamed out from shared memory.
    const float M = fin[0];
    const float S = fin[1];
    const float f = expf(mr - M) / S;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int i = tid + k * BLOCK;
        if (i < n4) {
            float4 a = tile[i];
            a.x *= f; a.y *= f; a.z *= f; a.w *= f;
            __stcs(dst + i, a);
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
