# evokernel: best kernel of run branching-s1 for problem layernorm
# candidate 6308e93a85005eaf, generation 2, operator idea; speedup 38.347x over eager (8.3388 ms -> 0.2175 ms, 172% of floor)
# idea: [dtypes] Replace the two-pass chunk statistics with a single streaming pass that uses shifted data and wider accumulators. Use a persistent grid of rows x SPLIT blocks (SPLIT=64, so 1024 blocks of 256 threads, each striding over N/SPLIT floats with 4 independent float4 loads in flight per iteration). Each thread forms d = x - K, where the pivot K = x[row*N] is read once per block. It folds each float4 into FP32 partials s4 = (d.x+d.y)+(d.z+d.w) and q4 = fma chain of d*d, then adds s4 and q4 to per-thread FP64 accumulators, so there is only 1 float->double conversion pair per 4 elements. Blocks reduce in double and write (double sum_d, double sumsq_d); the combine is a plain double sum, with mean = K + S/N and var = SS/N - (S/N)^2 in double. On mean-1000 data this removes the cancellation that gets a float one-pass variance rejected. It also removes the second read of each chunk, the mid-block barrier between the passes, and the Chan correction term.
# check it: evokernel check layernorm results/ablation-2026-12-02/layernorm/branching-s1/best.py
"""LayerNorm, NVRTC form.

Statistics: one streaming pass. Every row is cut into chunks of SBLOCK*SUNROLL float4; the
`split` blocks of a row take the chunks round-robin, so all blocks sweep their rows from the
first column to the last in lockstep (the grid is sized to one resident wave). Each thread forms
d = x - K with the pivot K = x[row*N], folds each float4 into FP32 partials
s4 = (d.x+d.y)+(d.z+d.w), q4 = fma chain of d*d, and adds them to FP64 accumulators. Blocks
reduce in double and write (sum_d, sumsq_d); the last block of each row (atomic counter) adds
the row's partials in double: mean = K + S/N, var = SS/N - (S/N)^2.

Normalize: a column-tiled kernel that reads weight/bias once into registers and loops over all
rows (last row first, last tile first: the columns the stats kernel read last, still in L2)
with 128-bit loads/stores."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int SBLOCK = 256;    // tune: 128 256 512 1024
constexpr int SUNROLL = 4;     // tune: 2 4 8
constexpr int SBPS = 4;        // tune: 2 3 4 6 8
constexpr int SWAVES = 1;      // tune: 1 2 3
constexpr int EW_BLOCK = 256;  // tune: 128 256 512 1024
constexpr int VEC4 = 1;        // tune: 1 2
constexpr int ROW_UNROLL = 2;  // tune: 1 2 4

constexpr int SNWARPS = SBLOCK / 32;
constexpr int SMINB = (SBPS * SBLOCK <= 2048) ? SBPS : (2048 / SBLOCK);

// Shifted float4 -> FP32 partials -> FP64 accumulators (one conversion pair per 4 elements).
__device__ __forceinline__ void fold4(const float4 v, const float K, double& as, double& aq) {
    const float dx = v.x - K, dy = v.y - K, dz = v.z - K, dw = v.w - K;
    const float s4 = (dx + dy) + (dz + dw);
    const float q4 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, dw * dw)));
    as += (double)s4;
    aq += (double)q4;
}

__device__ __forceinline__ double ld_cg_d(const double* p) {
    double v;
    asm volatile("ld.global.cg.f64 %0, [%1];" : "=d"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block sums of a and b in double; the totals are valid in thread 0.
__device__ __forceinline__ void block_sum2_d(double& a, double& b, double* ra, double* rb) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    a = warp_sum_d(a);
    b = warp_sum_d(b);
    if (lane == 0) {
        ra[wid] = a;
        rb[wid] = b;
    }
    __syncthreads();
    if (wid == 0) {
        a = lane < SNWARPS ? ra[lane] : 0.0;
        b = lane < SNWARPS ? rb[lane] : 0.0;
        a = warp_sum_d(a);
        b = warp_sum_d(b);
    }
    __syncthreads();
}

// Block blk: row r = blk / split, part c = blk % split. A unit is a float4 when vec != 0
// (x 16-byte aligned and N % 4 == 0, so every row start is aligned), else one float; the row
// has nunits units, cut into chunks of SBLOCK*SUNROLL units, and part c owns chunks
// c, c + split, c + 2*split, ... (only the row's last chunk can be partial).
// The last block of row r to finish (counter[r]) combines the row's partials and resets
// counter[r] to 0 for the next call.
__global__ void __launch_bounds__(SBLOCK, SMINB) ln_stats_kernel(
    const float* __restrict__ x, long long N, long long nunits, long long split, int vec,
    float eps, double* psum, double* psq, int* counter,
    float* __restrict__ mean_out, float* __restrict__ rstd_out) {
    __shared__ double red_a[SNWARPS];
    __shared__ double red_b[SNWARPS];
    __shared__ int s_last;
    const long long blk = blockIdx.x;
    const long long r = blk / split, c = blk % split;
    const float* xr = x + r * N;
    const float K = __ldg(xr);
    const long long CH = (long long)SBLOCK * SUNROLL;
    const long long step = split * CH;
    double as = 0.0, aq = 0.0;
    long long base = c * CH;
    if (vec) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (; base + CH <= nunits; base += step) {
            const float4* p = x4 + base + threadIdx.x;
            float4 v[SUNROLL];
#pragma unroll
            for (int u = 0; u < SUNROLL; ++u) v[u] = __ldg(p + u * SBLOCK);
#pragma unroll
            for (int u = 0; u < SUNROLL; ++u) fold4(v[u], K, as, aq);
        }
        if (base < nunits) {
            for (long long i = base + threadIdx.x; i < nunits; i += SBLOCK)
                fold4(__ldg(x4 + i), K, as, aq);
        }
    } else {
        for (; base < nunits; base += step) {
            const long long lim = (base + CH < nunits) ? base + CH : nunits;
            for (long long i = base + threadIdx.x; i < lim; i += SBLOCK) {
                const double d = (double)(__ldg(xr + i) - K);
                as += d;
                aq = fma(d, d, aq);
            }
        }
    }
    block_sum2_d(as, aq, red_a, red_b);
    if (threadIdx.x == 0) {
        psum[blk] = as;
        psq[blk] = aq;
        __threadfence();
        const int old = atomicAdd(counter + r, 1);
        s_last = (old == (int)split - 1) ? 1 : 0;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    double ts = 0.0, tq = 0.0;
    for (long long k = threadIdx.x; k < split; k += SBLOCK) {
        ts += ld_cg_d(psum + r * split + k);
        tq += ld_cg_d(psq + r * split + k);
    }
    block_sum2_d(ts, tq, red_a, red_b);
    if (threadIdx.x == 0) {
        const double m = ts / (double)N;
        double var = tq / (double)N - m * m;
        if (var < 0.0) var = 0.0;
        mean_out[r] = (float)((double)K + m);
        rstd_out[r] = (float)(1.0 / sqrt(var + (double)eps));
        counter[r] = 0;
    }
}

__device__ __forceinline__ float4 ln4(const float4 xv, const float m, const float s,
                                      const float4 w, const float4 b) {
    float4 o;
    o.x = fmaf((xv.x - m) * s, w.x, b.x);
    o.y = fmaf((xv.y - m) * s, w.y, b.y);
    o.z = fmaf((xv.z - m) * s, w.z, b.z);
    o.w = fmaf((xv.w - m) * s, w.w, b.w);
    return o;
}

// Vectorized normalize: x, y, weight, bias 16-byte aligned and N % 4 == 0; n4 = N / 4.
// A tile is EW_BLOCK * VEC4 float4 columns; thread t of a tile owns float4 columns
// base + v * EW_BLOCK (v < VEC4), loads their weight/bias once, then walks all rows (last row
// first, ROW_UNROLL rows of loads in flight before the stores). Tiles are taken from the end of
// the row first, so the earliest blocks touch the data the stats kernel read last (still in L2).
// Grid-stride over tiles, so any grid size is correct.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_vec_kernel(
    const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ y,
    long long rows, long long n4) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    float4* y4 = reinterpret_cast<float4*>(y);
    const long long tile_elems = (long long)EW_BLOCK * VEC4;
    const long long ntiles = (n4 + tile_elems - 1) / tile_elems;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (long long tile = (long long)(gridDim.x - 1 - blockIdx.x); tile < ntiles;
         tile += gridDim.x) {
        const long long base = tile * tile_elems + threadIdx.x;
        float4 wv[VEC4], bv[VEC4];
        bool ok[VEC4];
#pragma unroll
        for (int v = 0; v < VEC4; ++v) {
            const long long j = base + (long long)v * EW_BLOCK;
            ok[v] = j < n4;
            wv[v] = ok[v] ? __ldg(w4 + j) : zero4;
            bv[v] = ok[v] ? __ldg(b4 + j) : zero4;
        }
        long long r = rows;
        while (r >= ROW_UNROLL) {
            r -= ROW_UNROLL;
            float4 xv[ROW_UNROLL][VEC4];
            float m[ROW_UNROLL], s[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const long long rr = r + (ROW_UNROLL - 1 - u);
                m[u] = __ldg(mean + rr);
                s[u] = __ldg(rstd + rr);
                const float4* xr = x4 + rr * n4 + base;
#pragma unroll
                for (int v = 0; v < VEC4; ++v)
                    xv[u][v] = ok[v] ? __ldcs(xr + v * EW_BLOCK) : zero4;
            }
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; ++u) {
                const long long rr = r + (ROW_UNROLL - 1 - u);
                float4* yr = y4 + rr * n4 + base;
#pragma unroll
                for (int v = 0; v < VEC4; ++v)
                    if (ok[v]) __stcs(yr + v * EW_BLOCK, ln4(xv[u][v], m[u], s[u], wv[v], bv[v]));
            }
        }
        while (r > 0) {
            --r;
            const float m = __ldg(mean + r), s = __ldg(rstd + r);
            const float4* xr = x4 + r * n4 + base;
            float4* yr = y4 + r * n4 + base;
            float4 xv[VEC4];
#pragma unroll
            for (int v = 0; v < VEC4; ++v) xv[v] = ok[v] ? __ldcs(xr + v * EW_BLOCK) : zero4;
#pragma unroll
            for (int v = 0; v < VEC4; ++v)
                if (ok[v]) __stcs(yr + v * EW_BLOCK, ln4(xv[v], m, s, wv[v], bv[v]));
        }
    }
}

// Scalar fallback (N % 4 != 0 or unaligned pointers): thread owns column i, reads weight/bias
// once, walks all rows. Grid-stride over columns, so any grid size is correct.
__global__ void __launch_bounds__(EW_BLOCK) ln_normalize_scalar_kernel(
    const float* __restrict__ x, const float* __restrict__ mean, const float* __restrict__ rstd,
    const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ y,
    long long rows, long long N) {
    for (long long i = (long long)blockIdx.x * EW_BLOCK + threadIdx.x; i < N;
         i += (long long)gridDim.x * EW_BLOCK) {
        const float w = weight[i], b = bias[i];
        for (long long r = rows - 1; r >= 0; --r) {
            const long long k = r * N + i;
            y[k] = fmaf((x[k] - __ldg(mean + r)) * __ldg(rstd + r), w, b);
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["ln_stats_kernel", "ln_normalize_vec_kernel",
                                     "ln_normalize_scalar_kernel"])
SBLOCK, SUNROLL, SBPS, SWAVES, EW_BLOCK, VEC4 = (
    kernels.constant(n) for n in ("SBLOCK", "SUNROLL", "SBPS", "SWAVES", "EW_BLOCK", "VEC4"))

# Host mirror of the stats kernel's launch bounds: resident stats blocks per SM.
_SMINB = SBPS if SBPS * SBLOCK <= 2048 else max(1, 2048 // SBLOCK)
_SBPS_EFF = max(1, min(_SMINB, 2048 // SBLOCK, 32))

_MAX_GRID = (1 << 31) - 1
_SM_COUNT = {}


def _sm_count(device):
    key = device.index if device.index is not None else torch.cuda.current_device()
    c = _SM_COUNT.get(key)
    if c is None:
        c = torch.cuda.get_device_properties(key).multi_processor_count
        _SM_COUNT[key] = c
    return c


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
        self._counters = {}

    def _counter(self, device, rows):
        # Per-row arrival counters; the stats kernel leaves them at 0 after every call.
        key = device.index if device.index is not None else torch.cuda.current_device()
        c = self._counters.get(key)
        if c is None or c.numel() < rows:
            c = torch.zeros(max(rows, 1), dtype=torch.int32, device=device)
            self._counters[key] = c
        return c

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
        mean = torch.empty(rows, device=x.device, dtype=x.dtype)
        rstd = torch.empty_like(mean)

        # Statistics: split each row over `split` blocks, one resident wave in all, balanced so
        # every block of a row gets the same number of chunks.
        x_vec = (n % 4 == 0) and (x.data_ptr() % 16 == 0)
        nunits = n // 4 if x_vec else n
        ch = SBLOCK * SUNROLL
        nch = (nunits + ch - 1) // ch
        slots = SWAVES * _SBPS_EFF * _sm_count(x.device)
        split = max(1, min(nch, slots // rows))
        per = (nch + split - 1) // split
        split = (nch + per - 1) // per
        nblk = rows * split
        if nblk > _MAX_GRID:
            raise ValueError("layernorm: too many rows")
        psum = torch.empty(nblk, device=x.device, dtype=torch.float64)
        psq = torch.empty_like(psum)
        counter = self._counter(x.device, rows)
        kernels.ln_stats_kernel.launch(nblk, SBLOCK, x, n, nunits, split, 1 if x_vec else 0,
                                       float(self.ln.eps), psum, psq, counter, mean, rstd)

        all_vec = (x_vec and y.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0
                   and b.data_ptr() % 16 == 0)
        if all_vec:
            n4 = n // 4
            tile = EW_BLOCK * VEC4
            grid = min((n4 + tile - 1) // tile, _MAX_GRID)
            kernels.ln_normalize_vec_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                   rows, n4)
        else:
            grid = min((n + EW_BLOCK - 1) // EW_BLOCK, _MAX_GRID)
            kernels.ln_normalize_scalar_kernel.launch(grid, EW_BLOCK, x, mean, rstd, w, b, y,
                                                      rows, n)
        return y
