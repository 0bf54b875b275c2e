# evokernel: best kernel of run softmax for problem softmax
# candidate 48ec26fa874b3e87, generation 2, operator idea; speedup 1.859x over eager (1.0486 ms -> 0.5642 ms, 117% of floor)
# idea: [compute] Strip the loop overhead. Use 32-bit indices on precomputed row pointers instead of the int64_t `i < cols` induction, and add a templated fast path for cols % (BLOCK*4*UNROLL) == 0 (UNROLL=4: each thread issues 4 independent LDG.128/__ldcs per iteration, fully unrolled, no per-element predicates), with the current guarded loop kept only for the tail. Writes use __stcs float4 streaming stores, so each element costs a fraction of an address/compare instruction instead of a 64-bit IMAD plus a compare and branch.
# check it: evokernel check softmax results/h200-2026-12-02/frontier/softmax/best.py
"""Softmax (dim=1): one block per row, online (max, sum) read pass + reversed normalize pass.

Pass 1 reads the row once with UNROLL independent float4 loads per thread per iteration (no predicates
on the fast path: the host picks the TAIL=false instantiation when the row length in vectors is a
multiple of BLOCK*UNROLL), takes one nan-propagating max over the UNROLL*4 values, rescales the running
sum at most once per group and adds a pairwise sum of the group's exps. A warp-shuffle block reduction
merges the per-thread (max, sum). Pass 2 walks the row from its end to its start, so the most recently
loaded lines (still in L1 / L2) are re-read first, and writes exp(x - M) * (1/S) with streaming
stores. All per-element indices are 32-bit offsets from a row pointer computed once per row; inside a
group the UNROLL loads use immediate offsets (u * BLOCK * 16 bytes).
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
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <algorithm>

constexpr int BLOCK = 1024;      // tune: 128 256 512 1024
constexpr int UNROLL = 4;        // tune: 1 2 4 8
constexpr int MIN_BLOCKS = 1;    // tune: 1 2
constexpr int NWARPS = BLOCK / 32;
constexpr int MINB_RAW = (MIN_BLOCKS < (2048 / BLOCK)) ? MIN_BLOCKS : (2048 / BLOCK);
constexpr int MINB = (MINB_RAW < 1) ? 1 : MINB_RAW;
constexpr int STEP = BLOCK * UNROLL;   // vectors per block iteration
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");
static_assert(UNROLL >= 1, "UNROLL >= 1");

#define NEG_BIG (-FLT_MAX)

template <int VEC> struct VecT;
template <> struct VecT<4> { using type = float4; };
template <> struct VecT<1> { using type = float; };

// First read: cached (L1 + L2), since the row is read again in pass 2.
__device__ __forceinline__ float  ld_first(const float* p)  { return __ldg(p); }
__device__ __forceinline__ float4 ld_first(const float4* p) { return __ldg(p); }
// Last read: streaming (evict-first).
__device__ __forceinline__ float  ld_last(const float* p)  { return __ldcs(p); }
__device__ __forceinline__ float4 ld_last(const float4* p) { return __ldcs(p); }
__device__ __forceinline__ void st_stream(float* p, float v)   { __stcs(p, v); }
__device__ __forceinline__ void st_stream(float4* p, float4 v) { __stcs(p, v); }

// max that propagates NaN (like PyTorch): once a NaN is seen, it stays.
__device__ __forceinline__ float nanmax(float a, float b) { return (b > a || isnan(b)) ? b : a; }

__device__ __forceinline__ float vmax(float v)  { return v; }
__device__ __forceinline__ float vmax(float4 v) { return nanmax(nanmax(v.x, v.y), nanmax(v.z, v.w)); }

__device__ __forceinline__ float vexpsum(float v, float m)  { return expf(v - m); }
__device__ __forceinline__ float vexpsum(float4 v, float m) {
    return (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}

__device__ __forceinline__ float  normalize(float v, float M, float inv) { return expf(v - M) * inv; }
__device__ __forceinline__ float4 normalize(float4 v, float M, float inv) {
    return make_float4(expf(v.x - M) * inv, expf(v.y - M) * inv,
                       expf(v.z - M) * inv, expf(v.w - M) * inv);
}

// (m, s) <- merge of two partial softmax states: s = sum exp(x - m).
__device__ __forceinline__ void merge_ms(float& m, float& s, float m2, float s2) {
    const float M = nanmax(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

// Online accumulation of one vector (tail path).
template <typename V>
__device__ __forceinline__ void accum(float& m, float& s, V v) {
    const float lm = vmax(v);
    if (lm > m || isnan(lm)) { s *= expf(m - lm); m = lm; }
    s += vexpsum(v, m);
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

// One block per row (grid-stride over rows). n = vectors per row, cols = floats per row.
// TAIL=false requires n % STEP == 0 (checked on the host).
template <int VEC, bool TAIL>
__global__ void __launch_bounds__(BLOCK, MINB)
softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int n, int cols) {
    using V = typename VecT<VEC>::type;
    __shared__ float red_m[NWARPS];
    __shared__ float red_s[NWARPS];
    __shared__ float2 bcast;   // the row's (M, 1/S)

    const int tid = threadIdx.x;
    const int nfull = TAIL ? (n / STEP) * STEP : n;

    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const V* __restrict__ xr = reinterpret_cast<const V*>(x + (long long)row * cols);
        V* __restrict__ yr = reinterpret_cast<V*>(y + (long long)row * cols);
        const V* __restrict__ xt = xr + tid;
        V* __restrict__ yt = yr + tid;

        // ---- Pass 1: online (max, sum), UNROLL independent unpredicated loads per iteration.
        float m = NEG_BIG, s = 0.0f;
        for (int base = 0; base < nfull; base += STEP) {
            const V* __restrict__ pb = xt + base;
            V v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = ld_first(pb + u * BLOCK);
            float lm = vmax(v[0]);
#pragma unroll
            for (int u = 1; u < UNROLL; ++u) lm = nanmax(lm, vmax(v[u]));
            if (lm > m || isnan(lm)) { s *= expf(m - lm); m = lm; }
            float e[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) e[u] = vexpsum(v[u], m);
#pragma unroll
            for (int w = 1; w < UNROLL; w <<= 1) {
#pragma unroll
                for (int u = 0; u + w < UNROLL; u += 2 * w) e[u] += e[u + w];
            }
            s += e[0];
        }
        if (TAIL) {
            for (int i = nfull + tid; i < n; i += BLOCK) accum(m, s, ld_first(xr + i));
        }

        // ---- Block-wide (M, S).
        block_reduce_ms(m, s, red_m, red_s);
        if (tid == 0) bcast = make_float2(m, 1.0f / s);
        __syncthreads();
        const float M = bcast.x, inv = bcast.y;

        // ---- Pass 2: normalize, walking the row backwards (most recently loaded lines first).
        if (TAIL) {
            for (int i = nfull + tid; i < n; i += BLOCK) st_stream(yr + i, normalize(ld_last(xr + i), M, inv));
        }
        for (int base = nfull - STEP; base >= 0; base -= STEP) {
            const V* __restrict__ pb = xt + base;
            V* __restrict__ qb = yt + base;
            V v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) v[u] = ld_last(pb + (UNROLL - 1 - u) * BLOCK);
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) st_stream(qb + (UNROLL - 1 - u) * BLOCK, normalize(v[u], M, inv));
        }
    }
}

template <int VEC, bool TAIL>
static void launch_rows(const float* xp, float* yp, int rows, int n, int cols, unsigned grid, cudaStream_t stream) {
    softmax_rows_kernel<VEC, TAIL><<<grid, BLOCK, 0, stream>>>(xp, yp, rows, n, cols);
}

torch::Tensor softmax_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "softmax_cuda: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax_cuda: x must be float32");
    TORCH_CHECK(x.dim() == 2, "softmax_cuda: x must be 2D (softmax over dim 1)");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t rows64 = x.size(0), cols64 = x.size(1);
    if (rows64 == 0 || cols64 == 0) return y;
    TORCH_CHECK(cols64 <= (int64_t)(INT_MAX - 2 * STEP), "softmax_cuda: row too long for 32-bit indexing");
    TORCH_CHECK(rows64 <= (int64_t)INT_MAX, "softmax_cuda: too many rows");
    const int rows = (int)rows64, cols = (int)cols64;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec4 = (cols % 4 == 0) &&
                      (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                      (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    const int n = vec4 ? cols / 4 : cols;
    const bool tail = (n % STEP) != 0;
    const unsigned grid = (unsigned)std::min<int64_t>(rows64, 1LL << 20);

    if (vec4) {
        if (tail) launch_rows<4, true >(xp, yp, rows, n, cols, grid, stream);
        else      launch_rows<4, false>(xp, yp, rows, n, cols, grid, stream);
    } else {
        if (tail) launch_rows<1, true >(xp, yp, rows, n, cols, grid, stream);
        else      launch_rows<1, false>(xp, yp, rows, n, cols, grid, stream);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(
    name="softmax_online_rev32",
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
