# evokernel: best kernel of run softmax for problem softmax
# candidate eb88f13d76ef02db, generation 1, operator idea; speedup 1.698x over eager (1.0515 ms -> 0.6192 ms, 130% of floor)
# idea: [memory] Stage each 256 KiB row in distributed shared memory across a thread-block cluster of 2 blocks (__cluster_dims__(2,1,1), 512 threads each, 128 KiB dynamic smem per block set via cudaFuncSetAttribute). Each block loads its 32768-float half of the row into smem once with float4 loads while computing a local online (max, sum). The blocks swap their pair through cluster.map_shared_rank and cluster.sync(), then each rescales and writes its half from smem with float4 stores. HBM then sees exactly one read and one write per element.
# check it: evokernel check softmax results/h200-2026-12-02/frontier/softmax/best.py
"""Softmax (dim=1): one thread-block cluster per row, the row staged once in (distributed) shared memory.

Each block of a CLUSTER-block cluster owns a contiguous 1/CLUSTER slice of the row. It streams the slice
from HBM into its dynamic shared memory with float4 loads while keeping a per-thread online (max, sum).
A warp-shuffle block reduction gives the block's (max, sum); the blocks publish it in shared memory, a
cluster barrier makes it visible, thread 0 of every block reads all CLUSTER partials through
map_shared_rank and merges them in rank order (identical result in every block), then the block writes
exp(x - M) / S from shared memory with float4 streaming stores. HBM sees one read and one write per
element. The second cluster barrier is split (arrive before the write phase, wait after it) so that no
block waits for its peers before writing, while still not exiting before peers finished reading its smem.
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

constexpr int BLOCK = 512;       // tune: 128 256 512 1024
constexpr int CLUSTER = 4;       // tune: 2 4 8
constexpr int UNROLL = 4;        // tune: 1 2 4 8
constexpr int MIN_BLOCKS = 3;    // tune: 1 2 3 4
constexpr int NWARPS = BLOCK / 32;
constexpr int MINB = (MIN_BLOCKS < (2048 / BLOCK)) ? MIN_BLOCKS : (2048 / BLOCK);
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32");
static_assert(CLUSTER >= 1 && CLUSTER <= 8, "portable cluster size");

#define NEG_BIG (-FLT_MAX)

template <int VEC> struct VecT;
template <> struct VecT<4> { using type = float4; };
template <> struct VecT<1> { using type = float; };

__device__ __forceinline__ float ld_stream(const float* p) { return __ldcs(p); }
__device__ __forceinline__ float4 ld_stream(const float4* p) { return __ldcs(p); }
__device__ __forceinline__ void st_stream(float* p, float v) { __stcs(p, v); }
__device__ __forceinline__ void st_stream(float4* p, float4 v) { __stcs(p, v); }

// max that propagates NaN (like PyTorch): once a NaN is seen, it stays.
__device__ __forceinline__ float nanmax(float a, float b) { return (b > a || isnan(b)) ? b : a; }

// (m, s) <- merge of two partial softmax states: s = sum exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nanmax(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

// Online accumulation of one element / one float4.
__device__ __forceinline__ void accum(float& m, float& s, float v) {
    if (v > m || isnan(v)) { s *= expf(m - v); m = v; }
    s += expf(v - m);
}
__device__ __forceinline__ void accum(float& m, float& s, float4 v) {
    const float lm = nanmax(nanmax(v.x, v.y), nanmax(v.z, v.w));
    if (lm > m || isnan(lm)) { s *= expf(m - lm); m = lm; }
    s += (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}

__device__ __forceinline__ float normalize(float v, float M, float inv) { return expf(v - M) * inv; }
__device__ __forceinline__ float4 normalize(float4 v, float M, float inv) {
    return make_float4(expf(v.x - M) * inv, expf(v.y - M) * inv,
                       expf(v.z - M) * inv, expf(v.w - M) * inv);
}

// Block reduction of (m, s); the result is valid in thread 0 (all of warp 0).
__device__ __forceinline__ void block_reduce_ms(float& m, float& s, float* red_m, float* red_s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge_ms(m, s, m2, s2);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = (lane < NWARPS) ? red_m[lane] : NEG_BIG;
        s = (lane < NWARPS) ? red_s[lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
            const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
            merge_ms(m, s, m2, s2);
        }
    }
}

__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// One cluster per row (grid-stride over rows by cluster). Block `rank` owns V-elements
// [rank*chunk, min(n, (rank+1)*chunk)) of the row, staged in dynamic shared memory.
template <int VEC>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(BLOCK, MINB)
softmax_cluster_kernel(const float* __restrict__ x, float* __restrict__ y,
                       long long rows, long long cols, long long chunk) {
    using V = typename VecT<VEC>::type;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    V* tile = reinterpret_cast<V*>(smem_raw);
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float2 slot;    // this block's partial (m, s), read by the whole cluster
    __shared__ float2 bcast;   // the row's (M, 1/S)

    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const long long nclusters = gridDim.x / CLUSTER;
    const long long n = cols / VEC;
    const long long begin = (long long)rank * chunk;
    const long long end = (begin + chunk < n) ? (begin + chunk) : n;
    const int len = (end > begin) ? (int)(end - begin) : 0;

    for (long long row = blockIdx.x / CLUSTER; row < rows; row += nclusters) {
        const V* xr = reinterpret_cast<const V*>(x + row * cols) + begin;
        V* yr = reinterpret_cast<V*>(y + row * cols) + begin;

        // Phase 1: HBM -> smem, once, with a per-thread online (max, sum).
        float m = NEG_BIG, s = 0.0f;
        for (int base = threadIdx.x; base < len; base += BLOCK * UNROLL) {
            V v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * BLOCK;
                if (i < len) v[u] = ld_stream(xr + i);
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int i = base + u * BLOCK;
                if (i < len) { tile[i] = v[u]; accum(m, s, v[u]); }
            }
        }

        // Phase 2: block partial, then cluster-wide merge through DSMEM.
        block_reduce_ms(m, s, red_m, red_s);
        if (threadIdx.x == 0) slot = make_float2(m, s);
        cluster_arrive();      // release: slot visible to the cluster
        cluster_wait();        // acquire: every block's slot is written
        if (threadIdx.x == 0) {
            float M = NEG_BIG, S = 0.0f;
#pragma unroll
            for (int r = 0; r < CLUSTER; ++r) {
                const float2 p = *cluster.map_shared_rank(&slot, (unsigned)r);
                merge_ms(M, S, p.x, p.y);
            }
            bcast = make_float2(M, 1.0f / S);
        }
        __syncthreads();
        cluster_arrive();      // this block is done reading its peers' shared memory

        // Phase 3: smem -> HBM. Each thread reads back exactly the elements it staged.
        const float M = bcast.x, inv = bcast.y;
#pragma unroll 4
        for (int i = threadIdx.x; i < len; i += BLOCK) st_stream(yr + i, normalize(tile[i], M, inv));

        cluster_wait();        // peers finished reading our slot: safe to rewrite it / exit
    }
}

// Fallback for rows too long to stage in the cluster's shared memory: two reads, one write.
template <int VEC>
__global__ void __launch_bounds__(BLOCK)
softmax_rows_fallback(const float* __restrict__ x, float* __restrict__ y, long long rows, long long cols) {
    using V = typename VecT<VEC>::type;
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float2 bcast;
    const long long n = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const V* xr = reinterpret_cast<const V*>(x + row * cols);
        V* yr = reinterpret_cast<V*>(y + row * cols);
        float m = NEG_BIG, s = 0.0f;
        for (long long i = threadIdx.x; i < n; i += BLOCK) accum(m, s, xr[i]);
        block_reduce_ms(m, s, red_m, red_s);
        if (threadIdx.x == 0) bcast = make_float2(m, 1.0f / s);
        __syncthreads();
        const float M = bcast.x, inv = bcast.y;
        for (long long i = threadIdx.x; i < n; i += BLOCK) st_stream(yr + i, normalize(ld_stream(xr + i), M, inv));
    }
}

template <int VEC>
static void ensure_smem_attr(int dev, int bytes) {
    static int set_bytes[64] = {0};
    const int d = (dev >= 0 && dev < 64) ? dev : 0;
    if (bytes > set_bytes[d] || dev >= 64) {
        C10_CUDA_CHECK(cudaFuncSetAttribute(softmax_cluster_kernel<VEC>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        set_bytes[d] = bytes;
    }
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
    const int VEC = vec4 ? 4 : 1;
    const long long n = cols / VEC;
    const long long chunk = (n + CLUSTER - 1) / CLUSTER;
    const long long smem_bytes = chunk * VEC * (long long)sizeof(float);

    int dev = 0;
    C10_CUDA_CHECK(cudaGetDevice(&dev));
    int max_optin = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));

    const long long max_rows_grid = 1LL << 20;
    if (smem_bytes + 1024 <= (long long)max_optin) {
        const long long clusters = std::min<long long>(rows, max_rows_grid);
        const unsigned grid = (unsigned)(clusters * CLUSTER);
        if (vec4) {
            ensure_smem_attr<4>(dev, (int)smem_bytes);
            softmax_cluster_kernel<4><<<grid, BLOCK, (size_t)smem_bytes, stream>>>(xp, yp, rows, cols, chunk);
        } else {
            ensure_smem_attr<1>(dev, (int)smem_bytes);
            softmax_cluster_kernel<1><<<grid, BLOCK, (size_t)smem_bytes, stream>>>(xp, yp, rows, cols, chunk);
        }
    } else {
        const unsigned grid = (unsigned)std::min<long long>(rows, max_rows_grid);
        if (vec4) softmax_rows_fallback<4><<<grid, BLOCK, 0, stream>>>(xp, yp, rows, cols);
        else      softmax_rows_fallback<1><<<grid, BLOCK, 0, stream>>>(xp, yp, rows, cols);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(
    name="softmax_cluster_dsmem",
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
