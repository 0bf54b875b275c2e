# evokernel: best kernel of run best_of_n-s1 for problem softmax
# candidate 5bead4475d7bd47f, generation 1, operator idea; speedup 1.917x over eager (1.0516 ms -> 0.5485 ms, 113% of floor)
# idea: [control_flow] Restructure the per-row loops into one fused online-softmax pass followed by one write pass. The first loop reads the row once as float4 (cols/4 = 16384 vectors), unrolled 4x with 32-bit int indexing (`const float4* xr4`, `i = threadIdx.x; i < n4; i += BLOCK*4` with 4 independent loads issued before any math). Each thread keeps a running (max, sum) pair and rescales the sum with `s = s*expf(m_old-m_new) + expf(v-m_new)`, using a -inf guard so exp(-inf - -inf) never produces NaN. The (m, s) pairs are merged with warp-shuffle butterflies (`__shfl_xor_sync`) and one 32-entry shared array instead of the BLOCK-wide shared-memory tree with a __syncthreads per level. The final loop, also float4 and unrolled 4x, writes `expf(v-m) * inv_s` with a single reciprocal per row, plus a scalar tail loop when cols % 4 != 0. This cuts global reads from three passes to two, and the second read mostly hits L2 since 1-2 rows (256-512 KiB) per SM are in flight. Use BLOCK = 1024 (tune: 256 512 1024).
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/best_of_n-s1/best.py
"""Softmax (dim=1), NVRTC form: one block per row.
Pass 1 reads the row once as float4 (4 independent vector loads per thread per iteration) and keeps an
online (max, sum-of-exp) pair per thread; pairs are merged with warp-shuffle butterflies and one
32-entry shared array. Pass 2 re-reads the row (mostly from L2) and writes exp(x - m) * (1/s) with
streaming stores. A scalar path handles cols % 4 != 0 or unaligned pointers."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;  // tune: 256 512 1024
constexpr int NWARPS = BLOCK / 32;
static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK must be a multiple of 32, at most 1024");

#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float4 ld_cs4(const float4* p) {
    float4 v;
    asm("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ void st_cs4(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

__device__ __forceinline__ float max4(float4 v) {
    return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
}

// sum of exp(v - ms); ms is finite or 0 (never -inf), so no (-inf) - (-inf)
__device__ __forceinline__ float expsum4(float4 v, float ms) {
    return (expf(v.x - ms) + expf(v.y - ms)) + (expf(v.z - ms) + expf(v.w - ms));
}

__device__ __forceinline__ float4 expmul4(float4 v, float m, float inv) {
    float4 o;
    o.x = expf(v.x - m) * inv;
    o.y = expf(v.y - m) * inv;
    o.z = expf(v.z - m) * inv;
    o.w = expf(v.w - m) * inv;
    return o;
}

// Fold a batch with max bm and exp-sum t (taken relative to ms) into the running (m, s).
// ms = mn unless mn == -inf, in which case ms = 0 so exp(-inf - ms) = 0 and NaNs still propagate.
__device__ __forceinline__ float safe_ref(float mn) {
    return (mn == NEG_INF) ? 0.0f : mn;
}

// Merge (om, os) into (m, s). Symmetric in its operands, so butterflies give every lane the same value.
__device__ __forceinline__ void merge_ms(float& m, float& s, float om, float os) {
    const float mn = fmaxf(m, om);
    const float ms = safe_ref(mn);
    s = s * expf(m - ms) + os * expf(om - ms);
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, off);
        const float os = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, om, os);
    }
}

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row (grid-stride).
// vec != 0: rows are 16-byte aligned and cols % 4 == 0, so the row is read/written as float4.
extern "C" __global__ void __launch_bounds__(BLOCK)
softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                   long long rows, int cols, int vec) {
    __shared__ float sh_m[NWARPS];
    __shared__ float sh_s[NWARPS];
    __shared__ float sh_res[2];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int n4 = vec ? (cols >> 2) : 0;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * (long long)cols;
        float* yr = y + r * (long long)cols;
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        float4* yr4 = reinterpret_cast<float4*>(yr);

        // ---- pass 1: online max / sum of exp ----
        float m = NEG_INF, s = 0.0f;
        int i = tid;
        for (; i + 3 * BLOCK < n4; i += 4 * BLOCK) {
            const float4 v0 = xr4[i];
            const float4 v1 = xr4[i + BLOCK];
            const float4 v2 = xr4[i + 2 * BLOCK];
            const float4 v3 = xr4[i + 3 * BLOCK];
            const float bm = fmaxf(fmaxf(max4(v0), max4(v1)), fmaxf(max4(v2), max4(v3)));
            const float mn = fmaxf(m, bm);
            const float ms = safe_ref(mn);
            const float t = (expsum4(v0, ms) + expsum4(v1, ms)) + (expsum4(v2, ms) + expsum4(v3, ms));
            s = s * expf(m - ms) + t;
            m = mn;
        }
        for (; i < n4; i += BLOCK) {
            const float4 v0 = xr4[i];
            const float mn = fmaxf(m, max4(v0));
            const float ms = safe_ref(mn);
            s = s * expf(m - ms) + expsum4(v0, ms);
            m = mn;
        }
        for (int j = 4 * n4 + tid; j < cols; j += BLOCK) {
            const float v = xr[j];
            const float mn = fmaxf(m, v);
            const float ms = safe_ref(mn);
            s = s * expf(m - ms) + expf(v - ms);
            m = mn;
        }

        // ---- block merge of (m, s): warp butterflies + one 32-entry shared array ----
        warp_merge(m, s);
        if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }
        __syncthreads();
        if (warp == 0) {
            m = (lane < NWARPS) ? sh_m[lane] : NEG_INF;
            s = (lane < NWARPS) ? sh_s[lane] : 0.0f;
            warp_merge(m, s);
            if (lane == 0) { sh_res[0] = m; sh_res[1] = s; }
        }
        __syncthreads();
        m = sh_res[0];
        s = sh_res[1];
        const float inv = 1.0f / s;

        // ---- pass 2: write exp(x - m) / s (re-read mostly hits L2) ----
        i = tid;
        for (; i + 3 * BLOCK < n4; i += 4 * BLOCK) {
            const float4 v0 = ld_cs4(xr4 + i);
            const float4 v1 = ld_cs4(xr4 + i + BLOCK);
            const float4 v2 = ld_cs4(xr4 + i + 2 * BLOCK);
            const float4 v3 = ld_cs4(xr4 + i + 3 * BLOCK);
            st_cs4(yr4 + i, expmul4(v0, m, inv));
            st_cs4(yr4 + i + BLOCK, expmul4(v1, m, inv));
            st_cs4(yr4 + i + 2 * BLOCK, expmul4(v2, m, inv));
            st_cs4(yr4 + i + 3 * BLOCK, expmul4(v3, m, inv));
        }
        for (; i < n4; i += BLOCK) {
            const float4 v0 = ld_cs4(xr4 + i);
            st_cs4(yr4 + i, expmul4(v0, m, inv));
        }
        for (int j = 4 * n4 + tid; j < cols; j += BLOCK) {
            yr[j] = expf(xr[j] - m) * inv;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel"])
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
        if cols >= (1 << 31) - 8 * 1024:
            raise ValueError("softmax: cols too large for 32-bit in-row indexing")
        vec = 1 if (cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0) else 0
        kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols, vec)
        return y
