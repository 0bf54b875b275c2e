# evokernel: best kernel of run layernorm for problem layernorm
# candidate 9bd09358b5e43531, generation 3, operator idea; speedup 39.065x over eager (8.3250 ms -> 0.2131 ms, 168% of floor)
# idea: [dtypes] Replace the chunk_sum/chunk_m2 arrays, the arrival counter, the __threadfence and the last-block combine (two more block_sums on the critical tail of every row) with FP64 per-row accumulators. After the exact fp32 register two-pass, thread 0 of each stats block does atomicAdd(double) S[r] += sum_c and Q[r] += (double)M2_c + (double)sum_c*(double)sum_c/n_c; the normalize kernel turns each row into mean = S/N and var = max(Q/N - mean*mean, 0) in double, then rstd = rsqrt in float, once per row into registers/smem. This identity sum_c n_c(mean_c-mean)^2 = sum_c sum_c^2/n_c - S^2/N is exact for the given fp32 chunk sums and loses only ~1e-8 relative on the mean-1000 data in double. Zero the two 16-double buffers with a ping-pong pair chosen by call parity: block 0 of the stats kernel zeroes the buffer the next call will use, which the previous normalize has already finished reading in stream order.
# check it: evokernel check layernorm results/h200-2026-12-02-s13/report-layernorm/best_kernel.py
"""LayerNorm, NVRTC form, two kernels, FP64 per-row accumulators (no combine step).

1. ln_stats_*: block b -> chunk c = b / rows, row r = b % rows (chunk-major, so the last chunks
   of every row are read last and are what stays in L2 for the normalize pass). Each thread loads
   SV4 float4 of the chunk once (__ldcg) into registers, then the block computes the chunk sum S_c
   and M2_c = sum((x - S_c/n_c)^2) from the registers (exact two-pass, stable on offset data).
   Thread 0 adds them into per-row FP64 accumulators with two atomicAdd(double):
       S[r] += S_c,    Q[r] += M2_c + S_c^2 / n_c        (S_c^2 is exact in double)
   Then var = Q/N - (S/N)^2 evaluated in double; the first-order effect of the fp32 rounding of
   S_c cancels between the two terms, and the double cancellation costs ~1e-8 relative on
   mean-1000 data. Accumulators come in a ping-pong pair picked by call parity (per device and
   row count). The chunk-0 block of row r zeroes row r of the *other* buffer, which the previous
   call's normalize has finished reading (stream order) and which the next call accumulates into.
2. ln_normalize_*: one block per column tile, launched last tile first. It issues its weight/bias
   loads, then turns every row's (S, Q) into (mean, rstd) once, in double, into a shared float2
   table (rows <= ROW_SMEM; else per-row inline in each thread), then walks every row, last row
   first, so its first reads are the chunks the stats pass left in L2. Loads and stores are
   streaming (evict-first). COLS float4 per thread per row, ROW_UNROLL rows of loads in flight.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int SBLOCK = 256;     // tune: 128 256 512 1024
constexpr int SV4 = 16;         // tune: 2 4 8 16
constexpr int CHUNK = SBLOCK * SV4 * 4;
// 1024 resident stats threads per SM for SV4 <= 8 (64 regs), 512 for SV4 = 16 (128 regs).
constexpr int STATS_MINB_RAW = ((SV4 <= 8) ? 1024 : 512) / SBLOCK;
constexpr int STATS_MINB = STATS_MINB_RAW > 0 ? STATS_MINB_RAW : 1;

constexpr int EW_BLOCK = 256;   // tune: 128 256 512 1024
constexpr int COLS = 1;         // tune: 1 2 4
constexpr int ROW_UNROLL = 4;   // tune: 1 2 4 8
constexpr int ROW_SMEM = 512;   // tune: 64 512 2048
constexpr int TILE = EW_BLOCK * 4 * COLS;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over all NT threads of the block (NT a multiple of 32, <= 1024); every thread gets the
// same value. `sh` holds at least 32 floats and is free again when this returns.
template <int NT>
__device__ __forceinline__ float block_sum(float v, float* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float r = (lane < NT / 32) ? sh[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();
    return r;
}

template <bool VEC>
__device__ __forceinline__ void stats_impl(const float* __restrict__ x, long long N,
                                           long long rows, double* __restrict__ acc,
                                           double* __restrict__ acc_next, float* sh) {
    const long long b = blockIdx.x;
    const long long c = b / rows;
    const long long r = b - c * rows;
    const long long start = c * (long long)CHUNK;
    const int n = (N - start < (long long)CHUNK) ? (int)(N - start) : CHUNK;
    const bool full = (n == CHUNK);
    const float* xc = x + r * N + start;
    const int tid = threadIdx.x;

    // The whole chunk lives in registers: thread t owns float4 slots k * SBLOCK + t.
    float v[SV4][4];
#pragma unroll
    for (int k = 0; k < SV4; ++k) {
        const int e = (k * SBLOCK + tid) * 4;
        if (VEC) {
            float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (full || e < n) t = __ldcg(reinterpret_cast<const float4*>(xc + e));
            v[k][0] = t.x; v[k][1] = t.y; v[k][2] = t.z; v[k][3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[k][j] = (e + j < n) ? __ldcg(xc + e + j) : 0.0f;
        }
    }

    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < SV4; ++k) s += (v[k][0] + v[k][1]) + (v[k][2] + v[k][3]);
    const float sum = block_sum<SBLOCK>(s, sh);
    const float mean = sum / (float)n;

    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < SV4; ++k) {
        const int e = (k * SBLOCK + tid) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (full || e + j < n) {
                const float d = v[k][j] - mean;
                q = fmaf(d, d, q);
            }
        }
    }
    const float m2 = block_sum<SBLOCK>(q, sh);

    // FP64 per-row accumulation: S += S_c, Q += M2_c + S_c^2 / n_c (fire-and-forget REDs).
    if (tid == 0) {
        const double sd = (double)sum;
        atomicAdd(acc + 2 * r, sd);
        atomicAdd(acc + 2 * r + 1, fma(sd, sd / (double)n, (double)m2));
        if (c == 0) {   // one block per row: clear this row in the buffer the next call uses
            acc_next[2 * r] = 0.0;
            acc_next[2 * r + 1] = 0.0;
        }
    }
}

__global__ void __launch_bounds__(SBLOCK, STATS_MINB)
ln_stats_vec(const float* __restrict__ x, long long N, long long rows,
             double* __restrict__ acc, double* __restrict__ acc_next) {
    __shared__ float sh[32];
    stats_impl<true>(x, N, rows, acc, acc_next, sh);
}

__global__ void __launch_bounds__(SBLOCK, STATS_MINB)
ln_stats_scalar(const float* __restrict__ x, long long N, long long rows,
                double* __restrict__ acc, double* __restrict__ acc_next) {
    __shared__ float sh[32];
    stats_impl<false>(x, N, rows, acc, acc_next, sh);
}

// Row r's (mean, rstd) from its FP64 accumulators: mean = S/N, var = max(Q/N - mean^2, 0).
template <bool PRECISE>
__device__ __forceinline__ void row_stats(const double* __restrict__ acc, long long r,
                                          double invN, float eps, float& m, float& rs) {
    const double2 st = __ldcg(reinterpret_cast<const double2*>(acc) + r);
    const double dm = st.x * invN;
    const double var = fmax(fma(st.y, invN, -dm * dm), 0.0);
    m = (float)dm;
    if (PRECISE) rs = (float)(1.0 / sqrt(var + (double)eps));
    else rs = rsqrtf((float)var + eps);
}

// Block b handles column tile t = gridDim.x - 1 - b (last tile first). Thread columns:
// e0 + k * EW_BLOCK * 4 .. +3 for k < COLS (coalesced float4 per k). All rows, last row first;
// weight/bias stay in registers for all of them. SMEM: rows <= ROW_SMEM, and the per-row
// (mean, rstd) are computed once per block into s_st (double math, one thread per row).
template <bool VEC, bool SMEM>
__device__ __forceinline__ void normalize_impl(const float* __restrict__ x,
                                               const double* __restrict__ acc,
                                               const float* __restrict__ w,
                                               const float* __restrict__ bias,
                                               float* __restrict__ y, long long rows,
                                               long long N, float eps, float2* s_st) {
    const long long t = (long long)gridDim.x - 1 - (long long)blockIdx.x;
    const long long e0 = t * (long long)TILE + (long long)threadIdx.x * 4;

    // weight/bias first (they are zero-filled for columns >= N), so their latency overlaps
    // the statistics prologue.
    float wv[COLS][4], bv[COLS][4];
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const long long e = e0 + (long long)k * (EW_BLOCK * 4);
        if (VEC) {
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 c = a;
            if (e < N) {
                a = __ldcs(reinterpret_cast<const float4*>(w + e));
                c = __ldcs(reinterpret_cast<const float4*>(bias + e));
            }
            wv[k][0] = a.x; wv[k][1] = a.y; wv[k][2] = a.z; wv[k][3] = a.w;
            bv[k][0] = c.x; bv[k][1] = c.y; bv[k][2] = c.z; bv[k][3] = c.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                wv[k][j] = (e + j < N) ? __ldcs(w + e + j) : 0.0f;
                bv[k][j] = (e + j < N) ? __ldcs(bias + e + j) : 0.0f;
            }
        }
    }

    const double invN = 1.0 / (double)N;
    if (SMEM) {
        for (long long i = threadIdx.x; i < rows; i += EW_BLOCK) {
            float m, rs;
            row_stats<true>(acc, i, invN, eps, m, rs);
            s_st[i] = make_float2(m, rs);
        }
        __syncthreads();   // every thread of the block reaches this (no early return above)
    }
    if (e0 >= N) return;

    for (long long r0 = rows - 1; r0 >= 0; r0 -= ROW_UNROLL) {
        float xv[ROW_UNROLL][COLS][4];
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const long long r = r0 - u;
#pragma unroll
            for (int k = 0; k < COLS; ++k) {
                const long long e = e0 + (long long)k * (EW_BLOCK * 4);
#pragma unroll
                for (int j = 0; j < 4; ++j) xv[u][k][j] = 0.0f;
                if (r >= 0) {
                    const float* xr = x + r * N + e;
                    if (VEC) {
                        if (e < N) {
                            const float4 a = __ldcs(reinterpret_cast<const float4*>(xr));
                            xv[u][k][0] = a.x; xv[u][k][1] = a.y;
                            xv[u][k][2] = a.z; xv[u][k][3] = a.w;
                        }
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            if (e + j < N) xv[u][k][j] = __ldcs(xr + j);
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < ROW_UNROLL; ++u) {
            const long long r = r0 - u;
            if (r >= 0) {
                float m, rs;
                if (SMEM) {
                    const float2 st = s_st[r];
                    m = st.x;
                    rs = st.y;
                } else {
                    row_stats<false>(acc, r, invN, eps, m, rs);
                }
#pragma unroll
                for (int k = 0; k < COLS; ++k) {
                    const long long e = e0 + (long long)k * (EW_BLOCK * 4);
                    float o[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        o[j] = fmaf((xv[u][k][j] - m) * rs, wv[k][j], bv[k][j]);
                    float* yr = y + r * N + e;
                    if (VEC) {
                        if (e < N)
                            __stcs(reinterpret_cast<float4*>(yr),
                                   make_float4(o[0], o[1], o[2], o[3]));
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            if (e + j < N) __stcs(yr + j, o[j]);
                    }
                }
            }
        }
    }
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec(const float* __restrict__ x, const double* __restrict__ acc,
                 const float* __restrict__ w, const float* __restrict__ bias,
                 float* __restrict__ y, long long rows, long long N, float eps) {
    __shared__ float2 s_st[ROW_SMEM];
    normalize_impl<true, true>(x, acc, w, bias, y, rows, N, eps, s_st);
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_vec_big(const float* __restrict__ x, const double* __restrict__ acc,
                     const float* __restrict__ w, const float* __restrict__ bias,
                     float* __restrict__ y, long long rows, long long N, float eps) {
    normalize_impl<true, false>(x, acc, w, bias, y, rows, N, eps, nullptr);
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar(const float* __restrict__ x, const double* __restrict__ acc,
                    const float* __restrict__ w, const float* __restrict__ bias,
                    float* __restrict__ y, long long rows, long long N, float eps) {
    __shared__ float2 s_st[ROW_SMEM];
    normalize_impl<false, true>(x, acc, w, bias, y, rows, N, eps, s_st);
}

__global__ void __launch_bounds__(EW_BLOCK)
ln_normalize_scalar_big(const float* __restrict__ x, const double* __restrict__ acc,
                        const float* __restrict__ w, const float* __restrict__ bias,
                        float* __restrict__ y, long long rows, long long N, float eps) {
    normalize_impl<false, false>(x, acc, w, bias, y, rows, N, eps, nullptr);
}
"""

kernels = compile_kernels(cuda_src, ["ln_stats_vec", "ln_stats_scalar",
                                     "ln_normalize_vec", "ln_normalize_vec_big",
                                     "ln_normalize_scalar", "ln_normalize_scalar_big"])
SBLOCK, SV4, EW_BLOCK, COLS, ROW_SMEM = (int(kernels.constant(n))
                                         for n in ("SBLOCK", "SV4", "EW_BLOCK", "COLS",
                                                   "ROW_SMEM"))
CHUNK = SBLOCK * SV4 * 4
TILE = EW_BLOCK * 4 * COLS

# Per (device, row count): two FP64 accumulator buffers [S0, Q0, S1, Q1, ...] and the parity of
# the next call. Call k accumulates into buffer k % 2 and its stats kernel zeroes buffer
# (k + 1) % 2 (which call k - 1's normalize finished reading, in stream order), so each buffer
# is zero when its call starts. They hold no data between calls.
_ACC = {}


def _accumulators(device: torch.device, rows: int):
    idx = device.index if device.index is not None else torch.cuda.current_device()
    key = (idx, rows)
    st = _ACC.get(key)
    if st is None:
        st = [torch.zeros(2 * rows, device=device, dtype=torch.float64),
              torch.zeros(2 * rows, device=device, dtype=torch.float64), 0]
        _ACC[key] = st
    p = st[2]
    st[2] = 1 - p
    return st[p], st[1 - p]


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.ln.weight, self.ln.bias
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() >= w.dim()
                and tuple(x.shape[x.dim() - w.dim():]) == tuple(w.shape)):
            raise ValueError("layernorm: x must be a float32 CUDA tensor whose trailing dims "
                             "are normalized_shape")
        if w.dtype != torch.float32 or b.dtype != torch.float32:
            raise ValueError("layernorm: weight and bias must be float32")
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        y = torch.empty_like(x)
        n = w.numel()
        if x.numel() == 0:
            return y
        rows = x.numel() // n
        nchunks = (n + CHUNK - 1) // CHUNK
        if rows * nchunks >= 1 << 31:
            raise ValueError("layernorm: too many (row, chunk) blocks")
        ntiles = (n + TILE - 1) // TILE
        if ntiles >= 1 << 31 or rows >= 1 << 31:
            raise ValueError("layernorm: normalized size or row count too large")
        stats_vec = n % 4 == 0 and x.data_ptr() % 16 == 0
        norm_vec = (stats_vec and y.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
                    and b.data_ptr() % 16 == 0)

        acc, acc_next = _accumulators(x.device, rows)
        eps = float(self.ln.eps)

        stats = kernels.ln_stats_vec if stats_vec else kernels.ln_stats_scalar
        stats.launch(rows * nchunks, SBLOCK, x, n, rows, acc, acc_next)
        small = rows <= ROW_SMEM
        if norm_vec:
            norm = kernels.ln_normalize_vec if small else kernels.ln_normalize_vec_big
        else:
            norm = kernels.ln_normalize_scalar if small else kernels.ln_normalize_scalar_big
        norm.launch(ntiles, EW_BLOCK, x, acc, w, b, y, rows, n, eps)
        return y
