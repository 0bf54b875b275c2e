# evokernel: best kernel of run branching-s1 for problem softmax
# candidate 97723d6ff8d171d2, generation 2, operator idea; speedup 1.836x over eager (1.0500 ms -> 0.5720 ms, 120% of floor)
# idea: [dtypes] Move all in-row index math from `long long` to 32-bit `int`: compute the 64-bit row base pointers once per row, then walk the row with int offsets and a pointer increment of BLOCK*UNROLL float4 per iteration (raise ValueError in Python if cols >= 2^31). Also replace the runtime `vec` flag with two separately compiled kernels (float4 and scalar), so the float4 kernel carries no dead branch. Spend the registers this frees (64 now, target about 40) on UNROLL=8 (tune: 4 8), which gives 8 independent 16-byte loads per thread in both passes without spilling.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/branching-s1/best.py
"""Softmax (dim=1), NVRTC form. Persistent grid (SMs x BLOCKS_PER_SM blocks) looping over rows, so
only ~one row per block (256 KiB for 65536 cols) is in flight and stays cache-resident.

All in-row index math is 32-bit: the 64-bit row base pointers are formed once per row, then the
row is walked with a pointer that steps by one tile (BLOCK*UNROLL vectors) plus compile-time
per-slot offsets (u*BLOCK). Each row is split into FULL tiles (every slot in range: no compares,
no predication in the hot loop) and at most one partial TAIL tile (guarded, padded with -inf).
Pass 1: UNROLL independent float4 loads per thread per tile, per-thread online (max, sum) with a
rescale only when the tile max exceeds the running max, the tile's exp terms summed as a tree;
warp-shuffle + shared-memory merge of (max, sum) pairs.
Pass 2: the row is re-read in REVERSE order (tail first, then the full tiles backwards, so the most
recently read data comes first: L1/L2 hits), y is written with evict-first streaming stores so the
output does not displace the input in L2.
The float4 path and the scalar fallback are separate kernels, so the float4 kernel has no dead
branch."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;         // tune: 256 512 1024
constexpr int BLOCKS_PER_SM = 1;    // tune: 1 2
constexpr int UNROLL = 8;           // tune: 4 8
#define LOAD_L1 1                   // tune: 0 1

static_assert((UNROLL & (UNROLL - 1)) == 0, "UNROLL must be a power of two");
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");

constexpr int NWARPS = BLOCK / 32;
constexpr int TILE = BLOCK * UNROLL;    // vectors (float4 or float) per tile

#define NEG_INF (-__int_as_float(0x7f800000))

// NaN-propagating max (like PyTorch): if either is NaN the result is NaN.
__device__ __forceinline__ float nmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

__device__ __forceinline__ float4 ld_first4(const float4* p) {
#if LOAD_L1
    return __ldg(p);
#else
    return __ldcg(p);
#endif
}

__device__ __forceinline__ float ld_first1(const float* p) {
#if LOAD_L1
    return __ldg(p);
#else
    return __ldcg(p);
#endif
}

// Raise the running max m to include lm, rescaling the running sum s.
__device__ __forceinline__ void online_rescale(float& m, float& s, float lm) {
    if (lm > m || (isnan(lm) && !isnan(m))) {
        s = (m == NEG_INF) ? 0.0f : s * expf(m - lm);
        m = lm;
    }
}

// Merge (mo, so) into (m, s).
__device__ __forceinline__ void merge_ms(float& m, float& s, float mo, float so) {
    const float mn = nmax(m, mo);
    if (mn == NEG_INF) return;   // both empty / all -inf: s stays 0
    const float a = (m == NEG_INF) ? 0.0f : s * expf(m - mn);
    const float b = (mo == NEG_INF) ? 0.0f : so * expf(mo - mn);
    m = mn;
    s = a + b;
}

__device__ __forceinline__ float max4(const float4 v) {
    return nmax(nmax(v.x, v.y), nmax(v.z, v.w));
}

__device__ __forceinline__ float exp_sum4(const float4 v, const float m) {
    return (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}

__device__ __forceinline__ float4 softmax4(const float4 v, const float m, const float inv) {
    float4 o;
    o.x = expf(v.x - m) * inv;
    o.y = expf(v.y - m) * inv;
    o.z = expf(v.z - m) * inv;
    o.w = expf(v.w - m) * inv;
    return o;
}

// Tree sum of UNROLL partial terms (UNROLL is a power of two).
__device__ __forceinline__ float tree_sum(float (&t)[UNROLL]) {
#pragma unroll
    for (int w = UNROLL / 2; w > 0; w >>= 1) {
#pragma unroll
        for (int u = 0; u < w; ++u) t[u] += t[u + w];
    }
    return t[0];
}

// Online update of (m, s) with one float4 tile held in registers (padding slots hold -inf).
__device__ __forceinline__ void tile_update4(float& m, float& s, const float4 (&v)[UNROLL]) {
    float lm = NEG_INF;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) lm = nmax(lm, max4(v[u]));
    online_rescale(m, s, lm);
    if (m != NEG_INF) {
        float t[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) t[u] = exp_sum4(v[u], m);
        s += tree_sum(t);
    }
}

// Online update of (m, s) with one scalar tile held in registers (padding slots hold -inf).
__device__ __forceinline__ void tile_update1(float& m, float& s, const float (&v)[UNROLL]) {
    float lm = NEG_INF;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) lm = nmax(lm, v[u]);
    online_rescale(m, s, lm);
    if (m != NEG_INF) {
        float t[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) t[u] = expf(v[u] - m);
        s += tree_sum(t);
    }
}

// Block-wide (max, sum) merge; every thread gets the result. Two barriers: sh_m/sh_s of the next
// row are written only after the second one, sh_res of the next row only after the next row's
// first one, so no trailing barrier is needed.
__device__ __forceinline__ void block_reduce_ms(float& m, float& s, float* sh_m, float* sh_s,
                                                float* sh_res) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, off);
        const float so = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, mo, so);
    }
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        float wm = (lane < NWARPS) ? sh_m[lane] : NEG_INF;
        float ws = (lane < NWARPS) ? sh_s[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float mo = __shfl_xor_sync(0xffffffffu, wm, off);
            const float so = __shfl_xor_sync(0xffffffffu, ws, off);
            merge_ms(wm, ws, mo, so);
        }
        if (lane == 0) { sh_res[0] = wm; sh_res[1] = ws; }
    }
    __syncthreads();
    m = sh_res[0];
    s = sh_res[1];
}

// float4 path: cols % 4 == 0, 16-byte aligned rows, n4 = cols / 4 (< 2^29).
extern "C" __global__ void __launch_bounds__(BLOCK, BLOCKS_PER_SM)
softmax_vec_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows, int n4) {
    __shared__ float sh_m[32];
    __shared__ float sh_s[32];
    __shared__ float sh_res[2];

    const int tid = threadIdx.x;
    const int nfull = n4 / TILE;          // tiles whose every slot is in range
    const int tail = nfull * TILE;        // first float4 of the partial tile
    const bool has_tail = tail < n4;
    const float4 ninf4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        // the only 64-bit address math: once per row
        const float4* xr = reinterpret_cast<const float4*>(x) + r * n4;
        float4* yr = reinterpret_cast<float4*>(y) + r * n4;
        float m = NEG_INF;
        float s = 0.0f;

        // ---------------- pass 1: online (max, sum) ----------------
        {
            const float4* p = xr + tid;
#pragma unroll 1
            for (int t = 0; t < nfull; ++t, p += TILE) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = ld_first4(p + u * BLOCK);
                tile_update4(m, s, v);
            }
        }
        if (has_tail) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int idx = tail + u * BLOCK + tid;
                v[u] = (idx < n4) ? ld_first4(xr + idx) : ninf4;
            }
            tile_update4(m, s, v);
        }

        // ---------------- block merge of (max, sum) ----------------
        block_reduce_ms(m, s, sh_m, sh_s, sh_res);
        const float rm = m;
        const float inv = 1.0f / s;

        // ---------------- pass 2: reverse re-read, streaming write ----------------
        if (has_tail) {
            float4 v[UNROLL];
#pragma unroll
            for (int u = UNROLL - 1; u >= 0; --u) {
                const int idx = tail + u * BLOCK + tid;
                v[u] = (idx < n4) ? __ldcs(xr + idx) : ninf4;
            }
#pragma unroll
            for (int u = UNROLL - 1; u >= 0; --u) {
                const int idx = tail + u * BLOCK + tid;
                if (idx < n4) __stcs(yr + idx, softmax4(v[u], rm, inv));
            }
        }
        {
            const float4* p = xr + tail + tid;    // one tile past the last full tile
            float4* q = yr + tail + tid;
#pragma unroll 1
            for (int t = nfull; t > 0; --t) {
                p -= TILE;
                q -= TILE;
                float4 v[UNROLL];
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) v[u] = __ldcs(p + u * BLOCK);
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) __stcs(q + u * BLOCK, softmax4(v[u], rm, inv));
            }
        }
    }
}

// Scalar fallback for any cols / alignment (cols < 2^31 - 2^16).
extern "C" __global__ void __launch_bounds__(BLOCK, BLOCKS_PER_SM)
softmax_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows,
                      int cols) {
    __shared__ float sh_m[32];
    __shared__ float sh_s[32];
    __shared__ float sh_res[2];

    const int tid = threadIdx.x;
    const int nfull = cols / TILE;
    const int tail = nfull * TILE;
    const bool has_tail = tail < cols;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = NEG_INF;
        float s = 0.0f;

        // ---------------- pass 1: online (max, sum) ----------------
        {
            const float* p = xr + tid;
#pragma unroll 1
            for (int t = 0; t < nfull; ++t, p += TILE) {
                float v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) v[u] = ld_first1(p + u * BLOCK);
                tile_update1(m, s, v);
            }
        }
        if (has_tail) {
            float v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const int idx = tail + u * BLOCK + tid;
                v[u] = (idx < cols) ? ld_first1(xr + idx) : NEG_INF;
            }
            tile_update1(m, s, v);
        }

        // ---------------- block merge of (max, sum) ----------------
        block_reduce_ms(m, s, sh_m, sh_s, sh_res);
        const float rm = m;
        const float inv = 1.0f / s;

        // ---------------- pass 2: reverse re-read, streaming write ----------------
        if (has_tail) {
            float v[UNROLL];
#pragma unroll
            for (int u = UNROLL - 1; u >= 0; --u) {
                const int idx = tail + u * BLOCK + tid;
                v[u] = (idx < cols) ? __ldcs(xr + idx) : NEG_INF;
            }
#pragma unroll
            for (int u = UNROLL - 1; u >= 0; --u) {
                const int idx = tail + u * BLOCK + tid;
                if (idx < cols) __stcs(yr + idx, expf(v[u] - rm) * inv);
            }
        }
        {
            const float* p = xr + tail + tid;
            float* q = yr + tail + tid;
#pragma unroll 1
            for (int t = nfull; t > 0; --t) {
                p -= TILE;
                q -= TILE;
                float v[UNROLL];
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) v[u] = __ldcs(p + u * BLOCK);
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) __stcs(q + u * BLOCK, expf(v[u] - rm) * inv);
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_vec_kernel", "softmax_scalar_kernel"])
BLOCK = kernels.constant("BLOCK")
BLOCKS_PER_SM = kernels.constant("BLOCKS_PER_SM")

# In-row offsets are 32-bit: offset + one tile (at most 1024 * 8) must stay below 2^31.
_MAX_COLS = (1 << 31) - (1 << 16)

_SM_COUNT = {}


def _num_sms(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    n = _SM_COUNT.get(idx)
    if n is None:
        n = torch.cuda.get_device_properties(idx).multi_processor_count
        _SM_COUNT[idx] = n
    return n


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
        if cols >= _MAX_COLS:
            raise ValueError("softmax: rows of about 2^31 elements or more are not supported "
                             "(32-bit in-row offsets)")
        grid = max(1, min(rows, _num_sms(x.device) * BLOCKS_PER_SM))
        if cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0:
            kernels.softmax_vec_kernel.launch(grid, BLOCK, x, y, rows, cols // 4)
        else:
            kernels.softmax_scalar_kernel.launch(grid, BLOCK, x, y, rows, cols)
        return y
