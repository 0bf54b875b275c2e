# evokernel: best kernel of run branching-s1 for problem softmax
# candidate ec759d2df6af3ec7, generation 1, operator idea; speedup 1.731x over eager (1.0516 ms -> 0.6076 ms, 125% of floor)
# idea: [memory] L2-resident two-pass online softmax: run a persistent grid of 132 blocks x 1024 threads (tune: 1 or 2 blocks per SM) that loops over rows, so only about 132 rows x 256 KiB = 33 MiB are in flight and stay in the 60 MiB L2. Pass 1 reads the row as float4 (__ldcg) and keeps a per-thread online (max, sum) pair that is merged with warp shuffles and rescaled, and pass 2 re-reads the row from L2, computes expf(x - m) * (1/s) and writes y with float4 __stcs evict-first stores so the output does not push the input out of L2. This removes one of the current three row reads completely and sends the other re-read to L2 instead of HBM.
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/branching-s1/best.py
"""Softmax (dim=1), NVRTC form. Persistent grid (SMs x BLOCKS_PER_SM blocks) looping over rows, so
only ~one row per block (256 KiB for 65536 cols) is in flight and stays cache-resident.
Pass 1: float4 loads, per-thread online (max, sum) with a rescale only when the chunk max exceeds
the running max; warp-shuffle + shared-memory merge of (max, sum) pairs.
Pass 2: the row is re-read in REVERSE order (most recently read data first: L1/L2 hits), y is
written with evict-first streaming stores so the output does not displace the input in L2."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 1024;         // tune: 256 512 1024
constexpr int BLOCKS_PER_SM = 1;    // tune: 1 2
constexpr int UNROLL = 4;           // tune: 1 2 4 8
#define LOAD_L1 1                   // tune: 0 1

#define NEG_INF (-__int_as_float(0x7f800000))

// NaN-propagating max (like PyTorch): if either is NaN the result is NaN.
__device__ __forceinline__ float nmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

__device__ __forceinline__ float4 load_pass1(const float4* p) {
#if LOAD_L1
    return __ldg(p);
#else
    return __ldcg(p);
#endif
}

__device__ __forceinline__ float load_pass1_s(const float* p) {
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

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row, persistent.
extern "C" __global__ void __launch_bounds__(BLOCK, BLOCKS_PER_SM)
softmax_l2_kernel(const float* __restrict__ x, float* __restrict__ y,
                  long long rows, long long cols, int vec) {
    constexpr int NWARPS = (BLOCK + 31) / 32;
    __shared__ float sh_m[32];
    __shared__ float sh_s[32];
    __shared__ float sh_res[2];

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const long long step = (long long)BLOCK * UNROLL;

    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = NEG_INF;
        float s = 0.0f;

        // ---------------- pass 1: online (max, sum) ----------------
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            const long long n4 = cols >> 2;
            for (long long base = tid; base < n4; base += step) {
                float4 v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long idx = base + (long long)u * BLOCK;
                    v[u] = (idx < n4) ? load_pass1(x4 + idx)
                                      : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
                }
                float lm = NEG_INF;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    lm = nmax(lm, v[u].x); lm = nmax(lm, v[u].y);
                    lm = nmax(lm, v[u].z); lm = nmax(lm, v[u].w);
                }
                online_rescale(m, s, lm);
                if (m != NEG_INF) {
                    float t = 0.0f;
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) {
                        t += (expf(v[u].x - m) + expf(v[u].y - m)) +
                             (expf(v[u].z - m) + expf(v[u].w - m));
                    }
                    s += t;
                }
            }
        } else {
            for (long long base = tid; base < cols; base += step) {
                float v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const long long idx = base + (long long)u * BLOCK;
                    v[u] = (idx < cols) ? load_pass1_s(xr + idx) : NEG_INF;
                }
                float lm = NEG_INF;
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) lm = nmax(lm, v[u]);
                online_rescale(m, s, lm);
                if (m != NEG_INF) {
                    float t = 0.0f;
#pragma unroll
                    for (int u = 0; u < UNROLL; ++u) t += expf(v[u] - m);
                    s += t;
                }
            }
        }

        // ---------------- block merge of (max, sum) ----------------
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
        const float rm = sh_res[0];
        const float inv = 1.0f / sh_res[1];

        // ---------------- pass 2: reverse re-read, streaming write ----------------
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            float4* y4 = reinterpret_cast<float4*>(yr);
            const long long n4 = cols >> 2;
            const long long nit = (n4 + step - 1) / step;
            for (long long k = nit - 1; k >= 0; --k) {
                const long long base = k * step + tid;
                float4 v[UNROLL];
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) {
                    const long long idx = base + (long long)u * BLOCK;
                    if (idx < n4) v[u] = __ldcs(x4 + idx);
                }
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) {
                    const long long idx = base + (long long)u * BLOCK;
                    if (idx < n4) {
                        float4 o;
                        o.x = expf(v[u].x - rm) * inv;
                        o.y = expf(v[u].y - rm) * inv;
                        o.z = expf(v[u].z - rm) * inv;
                        o.w = expf(v[u].w - rm) * inv;
                        __stcs(y4 + idx, o);
                    }
                }
            }
        } else {
            const long long nit = (cols + step - 1) / step;
            for (long long k = nit - 1; k >= 0; --k) {
                const long long base = k * step + tid;
                float v[UNROLL];
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) {
                    const long long idx = base + (long long)u * BLOCK;
                    if (idx < cols) v[u] = __ldcs(xr + idx);
                }
#pragma unroll
                for (int u = UNROLL - 1; u >= 0; --u) {
                    const long long idx = base + (long long)u * BLOCK;
                    if (idx < cols) __stcs(yr + idx, expf(v[u] - rm) * inv);
                }
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_l2_kernel"])
BLOCK = kernels.constant("BLOCK")
BLOCKS_PER_SM = kernels.constant("BLOCKS_PER_SM")

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
        vec = int(cols % 4 == 0 and x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0)
        grid = max(1, min(rows, _num_sms(x.device) * BLOCKS_PER_SM))
        kernels.softmax_l2_kernel.launch(grid, BLOCK, x, y, rows, cols, vec)
        return y
