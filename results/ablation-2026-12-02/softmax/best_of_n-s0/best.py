# evokernel: best kernel of run best_of_n-s0 for problem softmax
# candidate 79c286a791439df1, generation 1, operator idea; speedup 1.889x over eager (1.0514 ms -> 0.5565 ms, 115% of floor)
# idea: [compute] Fuse the max and sum passes into one online-softmax pass: each thread of a 1024-thread block (one block per row) reads its part of the row with float4 loads and keeps a running (m, s) pair, updating s = s*exp2f((m_old-m_new)*LOG2E) + exp2f(fmaf(v, LOG2E, -m_new*LOG2E)) with all exponents in exp2f/FMA form. Then merge the (m, s) pairs with warp __shfl_xor_sync butterflies followed by one 32-entry shared-memory step instead of the log2(BLOCK) __syncthreads tree, and write y = exp2f(fmaf(x, LOG2E, -m*LOG2E)) * inv_s with float4 stores, where inv_s = 1/s is computed once per row, so each element is read twice instead of three times and the per-element divide goes away.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/best_of_n-s0/best.py
"""Online-softmax (dim=1), NVRTC form: one block per row. Pass 1 reads the row once with float4
loads and keeps a running (max, sum-of-exp) pair per thread; the pairs are merged with warp
butterflies and one shared-memory step; pass 2 re-reads the row (mostly from L2) and writes
exp2(x*log2e - m*log2e) * (1/s) with streaming stores."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;  // tune: 128 256 512 1024
constexpr int UNROLL = 4;    // tune: 1 2 4 8
constexpr int NWARPS = BLOCK / 32;
#define LOG2E_F 1.4426950408889634f

// max that propagates NaN like PyTorch
__device__ __forceinline__ float fmax_nan(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

// Scaled max: always computed with __fmul_rn so the rounding of m*log2e is identical
// everywhere it is used (partial sums, rescales and the final write), and cancels out.
__device__ __forceinline__ float scaled(float m) { return __fmul_rn(m, LOG2E_F); }

// Merge (mo, so) into (m, s); s values are sums of exp2(x*log2e - scaled(m)).
__device__ __forceinline__ void merge_ms(float& m, float& s, float mo, float so) {
    const float mn = fmax_nan(m, mo);
    const float mnL = scaled(mn);
    const float a = (m == mn) ? s : s * exp2f(scaled(m) - mnL);
    const float b = (mo == mn) ? so : so * exp2f(scaled(mo) - mnL);
    s = a + b;
    m = mn;
}

__device__ __forceinline__ void warp_merge(float& m, float& s) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, off);
        const float so = __shfl_xor_sync(0xffffffffu, s, off);
        merge_ms(m, s, mo, so);
    }
}

// Streaming (evict-first) 128-bit load / store: last use of x, y is never re-read.
__device__ __forceinline__ float4 ld_cs4(const float4* p) {
    float4 r;
    asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w) : "l"(p));
    return r;
}
__device__ __forceinline__ void st_cs4(float4* p, float4 v) {
    asm volatile("st.global.cs.v4.f32 [%0], {%1,%2,%3,%4};"
                 :: "l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
}

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row.
// vec != 0 requires cols % 4 == 0 and 16-byte aligned x and y.
__global__ void __launch_bounds__(BLOCK)
softmax_online_kernel(const float* __restrict__ x, float* __restrict__ y,
                      long long rows, long long cols, int vec) {
    __shared__ float sh_m[2][32];
    __shared__ float sh_s[2][32];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const float NEG_INF = -__int_as_float(0x7f800000);

    int buf = 0;
    for (long long r = blockIdx.x; r < rows; r += gridDim.x, buf ^= 1) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;

        // ---- pass 1: online (max, sum) ----
        float m = NEG_INF;
        float s = 0.0f;
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            const long long n4 = cols >> 2;
            for (long long base = tid; base < n4; base += (long long)BLOCK * UNROLL) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    v[u] = (i < n4) ? x4[i] : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
                }
                float bm = NEG_INF;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u)
                    bm = fmax_nan(bm, fmax_nan(fmax_nan(v[u].x, v[u].y), fmax_nan(v[u].z, v[u].w)));
                const float mn = fmax_nan(m, bm);
                if (mn != m) {
                    s *= exp2f(scaled(m) - scaled(mn));
                    m = mn;
                }
                if (m != NEG_INF) {
                    const float nmL = -scaled(m);
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) {
                        const float e0 = exp2f(fmaf(v[u].x, LOG2E_F, nmL));
                        const float e1 = exp2f(fmaf(v[u].y, LOG2E_F, nmL));
                        const float e2 = exp2f(fmaf(v[u].z, LOG2E_F, nmL));
                        const float e3 = exp2f(fmaf(v[u].w, LOG2E_F, nmL));
                        s += (e0 + e1) + (e2 + e3);
                    }
                }
            }
        } else {
            for (long long i = tid; i < cols; i += BLOCK) {
                const float v = xr[i];
                const float mn = fmax_nan(m, v);
                if (mn != m) {
                    s *= exp2f(scaled(m) - scaled(mn));
                    m = mn;
                }
                if (m != NEG_INF) s += exp2f(fmaf(v, LOG2E_F, -scaled(m)));
            }
        }

        // ---- block merge: warp butterflies, one shared step (double-buffered by row) ----
        warp_merge(m, s);
        if (lane == 0) {
            sh_m[buf][warp] = m;
            sh_s[buf][warp] = s;
        }
        __syncthreads();
        m = (lane < NWARPS) ? sh_m[buf][lane] : NEG_INF;
        s = (lane < NWARPS) ? sh_s[buf][lane] : 0.0f;
        warp_merge(m, s);   // every warp computes the identical result

        const float inv_s = 1.0f / s;
        const float nmL = -scaled(m);

        // ---- pass 2: write ----
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            float4* y4 = reinterpret_cast<float4*>(yr);
            const long long n4 = cols >> 2;
            for (long long base = tid; base < n4; base += (long long)BLOCK * UNROLL) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < n4) v[u] = ld_cs4(x4 + i);
                    else v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long i = base + (long long)u * BLOCK;
                    if (i < n4) {
                        float4 o;
                        o.x = exp2f(fmaf(v[u].x, LOG2E_F, nmL)) * inv_s;
                        o.y = exp2f(fmaf(v[u].y, LOG2E_F, nmL)) * inv_s;
                        o.z = exp2f(fmaf(v[u].z, LOG2E_F, nmL)) * inv_s;
                        o.w = exp2f(fmaf(v[u].w, LOG2E_F, nmL)) * inv_s;
                        st_cs4(y4 + i, o);
                    }
                }
            }
        } else {
            for (long long i = tid; i < cols; i += BLOCK)
                yr[i] = exp2f(fmaf(xr[i], LOG2E_F, nmL)) * inv_s;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_online_kernel"])
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
        vec = 1 if (cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0) else 0
        kernels.softmax_online_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols, vec)
        return y
