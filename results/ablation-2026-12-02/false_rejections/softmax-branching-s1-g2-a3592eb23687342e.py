"""Softmax over dim=1, NVRTC form, software-pipelined register path (no shared-memory staging).

One block per row, blocks persistent over rows (grid chosen so every block does the same number of
rows). Pass 1: online max with a rescaled sum; each thread keeps UNROLL independent float4 loads of
tile t+1 in flight while it does the math of tile t. One warp-shuffle (max, sum) block reduction.
Pass 2: same prefetch-ahead structure, re-reading x (hopefully from L2) with evict-first loads and
writing y with evict-first stores, while it prefetches the next row's first PREFETCH_TILES tiles into L2.
A scalar fallback kernel handles cols % 4 != 0 or misaligned storage."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;        // tune: 256 512 1024
constexpr int UNROLL = 4;          // tune: 2 4
constexpr int BLOCKS_PER_SM = 1;   // tune: 1 2
constexpr int PREFETCH_TILES = 1;  // tune: 0 1 2 4
constexpr int FULL_UNROLL_MAX = 8; // tune: 0 4 8 16

constexpr int NWARPS = (BLOCK + 31) / 32;
constexpr int TILE4 = BLOCK * UNROLL;      // float4 elements per tile
constexpr int TILE_F = TILE4 * 4;          // floats per tile

#define NEG_INF (-__int_as_float(0x7f800000))

// NaN-propagating max (like PyTorch) in one instruction (max.NaN, sm_80+).
__device__ __forceinline__ float nan_max(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// First read of x: ask L2 for 256-byte fetches.
__device__ __forceinline__ float4 ld_first(const float4* p) {
    float4 v;
    asm volatile("ld.global.L2::256B.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// Last read of x: evict-first (streaming).
__device__ __forceinline__ float4 ld_last(const float4* p) {
    float4 v;
    asm volatile("ld.global.cs.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

// Store of y: evict-first so it does not push x rows out of L2.
__device__ __forceinline__ void st_stream(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

__device__ __forceinline__ void prefetch_l2(const float* p) {
    asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
}

// Merge (om, os) into (m, s): s is a sum of exp(v - m).
__device__ __forceinline__ void combine(float& m, float& s, float om, float os) {
    const float nm = nan_max(m, om);
    if (nm == NEG_INF) return;                       // both empty / all -inf
    const float a = (m == nm) ? s : s * expf(m - nm);
    const float b = (om == nm) ? os : os * expf(om - nm);
    m = nm;
    s = a + b;
}

// Block-wide (max, sum) reduction; every thread gets the result. Two __syncthreads.
__device__ __forceinline__ void block_reduce_ms(float& m, float& s, float* sh_m, float* sh_s,
                                                float* sh_r) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, off);
        const float os = __shfl_xor_sync(0xffffffffu, s, off);
        combine(m, s, om, os);
    }
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        float wm = (lane < NWARPS) ? sh_m[lane] : NEG_INF;
        float ws = (lane < NWARPS) ? sh_s[lane] : 0.0f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, wm, off);
            const float os = __shfl_xor_sync(0xffffffffu, ws, off);
            combine(wm, ws, om, os);
        }
        if (lane == 0) { sh_r[0] = wm; sh_r[1] = ws; }
    }
    __syncthreads();
    m = sh_r[0];
    s = sh_r[1];
    // No third barrier needed: sh_m/sh_s of the next row are written only after this barrier,
    // and sh_r of the next row only after the next row's first barrier.
}

__global__ void __launch_bounds__(BLOCK, BLOCKS_PER_SM)
softmax_vec_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows, int cols) {
    __shared__ float sh_m[NWARPS];
    __shared__ float sh_s[NWARPS];
    __shared__ float sh_r[2];
    const int tid = threadIdx.x;
    const int n4 = cols >> 2;
    const int ntiles = (n4 + TILE4 - 1) / TILE4;
    const float4 ninf4 = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float4* xr = reinterpret_cast<const float4*>(x + r * (long long)cols);
        float4* yr = reinterpret_cast<float4*>(y + r * (long long)cols);

        // ---------------- pass 1: online max + rescaled sum, loads one tile ahead --------------
        float m = NEG_INF, s = 0.0f;
        float4 cur[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int i = k * BLOCK + tid;
            cur[k] = (i < n4) ? ld_first(xr + i) : ninf4;
        }
        for (int t = 0; t < ntiles; ++t) {
            float4 nxt[UNROLL];
            const int nb = (t + 1) * TILE4 + tid;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const int i = nb + k * BLOCK;
                nxt[k] = (i < n4) ? ld_first(xr + i) : ninf4;
            }
            float tm = NEG_INF;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k)
                tm = nan_max(tm, nan_max(nan_max(cur[k].x, cur[k].y), nan_max(cur[k].z, cur[k].w)));
            const float nm = nan_max(m, tm);
            if (nm != m) { s *= expf(m - nm); m = nm; }
            const float mref = (m == NEG_INF) ? 0.0f : m;
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k)
                acc += (expf(cur[k].x - mref) + expf(cur[k].y - mref)) +
                       (expf(cur[k].z - mref) + expf(cur[k].w - mref));
            s += acc;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) cur[k] = nxt[k];
        }

        block_reduce_ms(m, s, sh_m, sh_s, sh_r);
        const float inv = 1.0f / s;

        // ---------------- pass 2: write, loads one tile ahead, next row prefetched ----------
        const long long rn = r + gridDim.x;
        const bool has_next = rn < rows;
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int i = k * BLOCK + tid;
            cur[k] = (i < n4) ? ld_last(xr + i) : zero4;
        }
        for (int t = 0; t < ntiles; ++t) {
            if (t < PREFETCH_TILES && has_next) {
                const float* xn = x + rn * (long long)cols;
                const int f0 = t * TILE_F;
                const int f1 = min(f0 + TILE_F, cols);
                for (int j = f0 + tid * 32; j < f1; j += BLOCK * 32) prefetch_l2(xn + j);
            }
            float4 nxt[UNROLL];
            const int nb = (t + 1) * TILE4 + tid;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const int i = nb + k * BLOCK;
                nxt[k] = (i < n4) ? ld_last(xr + i) : zero4;
            }
            const int cb = t * TILE4 + tid;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const int i = cb + k * BLOCK;
                if (i < n4) {
                    float4 o;
                    o.x = expf(cur[k].x - m) * inv;
                    o.y = expf(cur[k].y - m) * inv;
                    o.z = expf(cur[k].z - m) * inv;
                    o.w = expf(cur[k].w - m) * inv;
                    st_stream(yr + i, o);
                }
            }
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) cur[k] = nxt[k];
        }
    }
}

// ============ FULL path: cols / 4 is a multiple of TILE4 (65536 columns: 4 tiles of 4096 float4) ====
// No bounds checks and no -inf / 0 selects. Each thread walks float4 pointers that advance by TILE4
// once per tile, so the UNROLL accesses of a tile use constant immediate offsets (k * BLOCK * 16 B).
// NT > 0: compile-time tile count, every tile loop fully unrolled (UNR = NT); NT == 0: runtime count.

__device__ __forceinline__ void load_tile_first(float4 (&v)[UNROLL], const float4* p) {
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) v[k] = ld_first(p + k * BLOCK);
}

__device__ __forceinline__ void load_tile_last(float4 (&v)[UNROLL], const float4* p) {
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) v[k] = ld_last(p + k * BLOCK);
}

// Online (max, rescaled sum) update of the thread's (m, s) with one full tile held in registers.
__device__ __forceinline__ void tile_online(float& m, float& s, const float4 (&v)[UNROLL]) {
    float km[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; ++k)
        km[k] = nan_max(nan_max(v[k].x, v[k].y), nan_max(v[k].z, v[k].w));
    float tm = km[0];
#pragma unroll
    for (int k = 1; k < UNROLL; ++k) tm = nan_max(tm, km[k]);
    const float nm = nan_max(m, tm);
    if (nm != m) { s *= expf(m - nm); m = nm; }
    const float mref = (m == NEG_INF) ? 0.0f : m;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k)
        acc += (expf(v[k].x - mref) + expf(v[k].y - mref)) +
               (expf(v[k].z - mref) + expf(v[k].w - mref));
    s += acc;
}

__device__ __forceinline__ void store_tile(float4* p, const float4 (&v)[UNROLL], const float m,
                                           const float inv) {
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
        float4 o;
        o.x = expf(v[k].x - m) * inv;
        o.y = expf(v[k].y - m) * inv;
        o.z = expf(v[k].z - m) * inv;
        o.w = expf(v[k].w - m) * inv;
        st_stream(p + k * BLOCK, o);
    }
}

// L2 prefetch of one full tile of the next row, one prefetch per 128-byte line.
__device__ __forceinline__ void prefetch_tile(const float* p, const int tid) {
    for (int j = tid * 32; j < TILE_F; j += BLOCK * 32) prefetch_l2(p + j);
}

template <int NT, int UNR>
__device__ __forceinline__ void softmax_full_body(const float* __restrict__ x, float* __restrict__ y,
                                                  long long rows, int cols, float* sh_m,
                                                  float* sh_s, float* sh_r) {
    const int tid = threadIdx.x;
    const int nt = (NT > 0) ? NT : ((cols >> 2) / TILE4);   // >= 1, checked by the host

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const long long off = r * (long long)cols;
        const float4* xp = reinterpret_cast<const float4*>(x + off) + tid;

        // ---------------- pass 1: online max + rescaled sum, loads one tile ahead --------------
        float m = NEG_INF, s = 0.0f;
        float4 cur[UNROLL];
        load_tile_first(cur, xp);
#pragma unroll (UNR)
        for (int t = 1; t < nt; ++t) {
            float4 nxt[UNROLL];
            xp += TILE4;
            load_tile_first(nxt, xp);
            tile_online(m, s, cur);
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) cur[k] = nxt[k];
        }
        tile_online(m, s, cur);

        // ---------------- pass 2 ----------------------------------------------------------------
        // The first re-read goes out before the block reduction: its shuffles and barriers hide
        // the load latency (pass-1 registers are free by now, so this costs no extra registers).
        const float4* xq = reinterpret_cast<const float4*>(x + off) + tid;
        float4* yq = reinterpret_cast<float4*>(y + off) + tid;
        load_tile_last(cur, xq);

        block_reduce_ms(m, s, sh_m, sh_s, sh_r);
        const float inv = 1.0f / s;

        const long long rn = r + gridDim.x;
        const bool has_next = rn < rows;
        const float* xn = x + rn * (long long)cols;   // dereferenced only when has_next
#pragma unroll (UNR)
        for (int t = 0; t + 1 < nt; ++t) {
            if (t < PREFETCH_TILES && has_next) prefetch_tile(xn + t * TILE_F, tid);
            float4 nxt[UNROLL];
            xq += TILE4;
            load_tile_last(nxt, xq);
            store_tile(yq, cur, m, inv);
            yq += TILE4;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) cur[k] = nxt[k];
        }
        if (nt - 1 < PREFETCH_TILES && has_next) prefetch_tile(xn + (nt - 1) * TILE_F, tid);
        store_tile(yq, cur, m, inv);
    }
}

#define FULL_KERNEL(NAME, NT, UNR)                                                           \
    extern "C" __global__ void __launch_bounds__(BLOCK, BLOCKS_PER_SM)                       \
    NAME(const float* __restrict__ x, float* __restrict__ y, long long rows, int cols) {      \
        __shared__ float sh_m[NWARPS];                                                       \
        __shared__ float sh_s[NWARPS];                                                       \
        __shared__ float sh_r[2];                                                            \
        softmax_full_body<NT, UNR>(x, y, rows, cols, sh_m, sh_s, sh_r);                      \
    }

FULL_KERNEL(softmax_full_rt, 0, 1)
FULL_KERNEL(softmax_full_1, 1, 1)
FULL_KERNEL(softmax_full_2, 2, 2)
FULL_KERNEL(softmax_full_4, 4, 4)
FULL_KERNEL(softmax_full_8, 8, 8)
FULL_KERNEL(softmax_full_16, 16, 16)

// Fallback for cols % 4 != 0 or misaligned storage: element-wise online softmax.
__global__ void __launch_bounds__(BLOCK)
softmax_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, long long rows,
                      long long cols) {
    __shared__ float sh_m[NWARPS];
    __shared__ float sh_s[NWARPS];
    __shared__ float sh_r[2];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = NEG_INF, s = 0.0f;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) {
            const float v = xr[i];
            const float nm = nan_max(m, v);
            if (nm != m) { s *= expf(m - nm); m = nm; }
            s += expf(v - ((m == NEG_INF) ? 0.0f : m));
        }
        block_reduce_ms(m, s, sh_m, sh_s, sh_r);
        const float inv = 1.0f / s;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) * inv;
    }
}
"""

_FULL_NTS = (1, 2, 4, 8, 16)
kernels = compile_kernels(
    cuda_src,
    ["softmax_vec_kernel", "softmax_scalar_kernel", "softmax_full_rt"]
    + ["softmax_full_%d" % nt for nt in _FULL_NTS])
BLOCK = kernels.constant("BLOCK")
BLOCKS_PER_SM = kernels.constant("BLOCKS_PER_SM")
UNROLL = kernels.constant("UNROLL")
FULL_UNROLL_MAX = kernels.constant("FULL_UNROLL_MAX")
TILE4 = BLOCK * UNROLL   # float4 elements per tile, as in the source
_FULL_UNROLLED = {nt: getattr(kernels, "softmax_full_%d" % nt)
                  for nt in _FULL_NTS if nt <= FULL_UNROLL_MAX}

_SM_COUNT = {}


def _num_sms(device):
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
        # Persistent grid: at most BLOCKS_PER_SM blocks per SM, shrunk so every block runs the
        # same number of rows (4096 rows on 132 SMs -> 128 blocks x 32 rows).
        slots = max(1, _num_sms(x.device) * BLOCKS_PER_SM)
        rounds = (rows + slots - 1) // slots
        grid = min((rows + rounds - 1) // rounds, 1 << 30)
        vec_ok = (cols % 4 == 0 and cols < (1 << 31) - (1 << 20)
                  and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0)
        n4 = cols // 4
        if vec_ok and n4 % TILE4 == 0:
            # No tails: predicate-free kernel, fully unrolled when the tile count is small.
            kern = _FULL_UNROLLED.get(n4 // TILE4, kernels.softmax_full_rt)
            kern.launch(grid, BLOCK, x, y, rows, cols)
        elif vec_ok:
            kernels.softmax_vec_kernel.launch(grid, BLOCK, x, y, rows, cols)
        else:
            kernels.softmax_scalar_kernel.launch(grid, BLOCK, x, y, rows, cols)
        return y
