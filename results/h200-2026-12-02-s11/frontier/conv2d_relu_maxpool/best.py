# evokernel: best kernel of run conv2d_relu_maxpool for problem conv2d_relu_maxpool
# candidate 86ff6df2ec222ea1, generation 1, operator idea; speedup 1.874x over eager (1.2390 ms -> 0.6611 ms, 3323% of floor)
# idea: [memory] Fuse ReLU and max pooling into the tiled conv so the 116 MB conv intermediate never reaches HBM. Each block computes the conv rows one pooled-row tile needs: for 4 pooled rows that is 9 conv rows (2*4+1) x 55 columns, for 16 or 32 output channels. The block writes bias+ReLU results into a shared-memory tile (16 x 9 x 56 floats = 32 KB), calls __syncthreads, then has threads read 3x3 windows from shared memory to write the 27-wide pooled rows coalesced, using NaN-propagating max. This removes the second kernel and about 230 MB of global traffic; the extra cost is recomputing one overlapping conv row per tile.
# check it: evokernel check conv2d_relu_maxpool results/h200-2026-12-02-s11/frontier/conv2d_relu_maxpool/best.py
"""Fused conv2d(3->96, 11x11, stride 4, pad 2) + bias + ReLU + MaxPool2d(3, 2), NVRTC form.

One block = (image n, band of pooled rows, tile of OC_TILE output channels). The block walks its
band in chunks of ROWS conv rows (55 columns, padded to 56):
  * per input channel it stages the 4*(ROWS-1)+11 input rows the chunk needs into shared memory,
    split by column phase (p mod 4), so a conv column's stride-4 taps become consecutive words
    (conflict-free, and a thread's 7 neighbouring columns reuse a 9-wide register window across
    the kw taps of one phase), plus that channel's weights in [kh][kw][oc] order (float4 loads);
  * each thread accumulates a 7-column x TOC-channel register tile for one conv row;
  * bias + ReLU results go to a shared tile (aliasing the staging buffers), then pooling threads
    write the pooled rows whose 3 conv rows are complete. The pooled row that straddles two
    chunks uses a per-thread register carry = max of the previous chunk's last two conv rows, so
    conv rows are never recomputed inside a band and the 116 MB conv output never reaches HBM.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
// ---- problem constants (checked in Python) ----
constexpr int C_IN = 3;
constexpr int KS = 11;      // conv kernel
constexpr int STR = 4;      // conv stride (the phase split below assumes 4)
constexpr int PAD = 2;      // conv padding
constexpr int H = 224;
constexpr int W = 224;
constexpr int OC = 96;
constexpr int POH = 27;     // pooled rows
constexpr int POW = 27;     // pooled cols
constexpr int PS = 2;       // pool stride (pool kernel 3)

// ---- tunables ----
constexpr int TOC = 8;       // tune: 4 8
constexpr int OC_TILE = 32;  // tune: 8 16 32
constexpr int ROWS = 4;      // tune: 2 4
constexpr int NBANDS = 3;    // tune: 1 2 3 5

// ---- derived ----
constexpr int COLS = 7;                    // conv columns per thread (consecutive)
constexpr int CT = 8;                      // column threads: CT*COLS = 56 >= 55
constexpr int CW = CT * COLS;              // 56: conv tile row width
constexpr int OCG = OC_TILE / TOC;
constexpr int NTHREADS = CT * ROWS * OCG;
constexpr int QW = 58;                     // words per phase (q = 0..57)
constexpr int ROWP = 4 * QW + 2;           // 234: row pitch (4*ROWP = 8 mod 32 -> conflict-free)
constexpr int IR = STR * (ROWS - 1) + KS;  // input rows per chunk
constexpr int IN_FLOATS = IR * ROWP;
constexpr int WSTR = OC_TILE + 4;          // weight row pitch (float4 aligned, conflict-free fill)
constexpr int WT_OFF = (IN_FLOATS + 3) & ~3;
constexpr int WT_FLOATS = KS * KS * WSTR;
constexpr int CV_FLOATS = OC_TILE * ROWS * CW;
constexpr int SMEM_FLOATS = (WT_OFF + WT_FLOATS > CV_FLOATS) ? (WT_OFF + WT_FLOATS) : CV_FLOATS;
constexpr int NPAIRS = OC_TILE * POW;
constexpr int POOL_IT = (NPAIRS + NTHREADS - 1) / NTHREADS;
constexpr int NS = (KS + STR - 1) / STR;   // taps per phase, at most 3
constexpr int NOCB = OC / OC_TILE;
constexpr int XQ = W / 4 + 3;              // float4 slots per staged row: m = 0..58

static_assert(OC % OC_TILE == 0, "OC_TILE must divide OC");
static_assert(OC_TILE % TOC == 0 && TOC % 4 == 0, "TOC must be a multiple of 4 dividing OC_TILE");
static_assert(ROWS % 2 == 0 && ROWS >= 2, "ROWS must be even");
static_assert(W % 4 == 0 && XQ == QW + 1, "row staging layout");
static_assert(SMEM_FLOATS * 4 <= 48 * 1024, "static shared memory limit");

__device__ __forceinline__ float nmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;     // NaN propagates as in PyTorch
}
__device__ __forceinline__ float hmax3(const float* p) {
    return nmax(nmax(p[0], p[1]), p[2]);
}

extern "C" __global__ void __launch_bounds__(NTHREADS)
conv_relu_maxpool_fused(const float* __restrict__ x, const float* __restrict__ w,
                        const float* __restrict__ bias, float* __restrict__ out, int nbatch) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];

    const int tid = threadIdx.x;
    const int ct = tid & (CT - 1);
    const int rt = (tid / CT) % ROWS;
    const int g = tid / (CT * ROWS);

    int bid = blockIdx.x;
    const int ocb = bid % NOCB; bid /= NOCB;
    const int band = bid % NBANDS;
    const int n = bid / NBANDS;
    if (n >= nbatch) return;
    const int oc0 = ocb * OC_TILE;
    const int pa = band * POH / NBANDS;
    const int pb = (band + 1) * POH / NBANDS;
    if (pa >= pb) return;
    const int nchunks = (2 * (pb - pa)) / ROWS + 1;

    float bv[TOC];
#pragma unroll
    for (int o = 0; o < TOC; ++o) bv[o] = __ldg(bias + oc0 + g * TOC + o);

    float carry[POOL_IT];
#pragma unroll
    for (int it = 0; it < POOL_IT; ++it) carry[it] = -__int_as_float(0x7f800000);

    const float* xbase = smem + (rt * STR) * ROWP + ct * COLS;
    const float* wbase = smem + WT_OFF + g * TOC;

#pragma unroll 1
    for (int ch = 0; ch < nchunks; ++ch) {
        const int base = 2 * pa + ch * ROWS;   // first conv row of this chunk
        const int ih0 = base * STR - PAD;      // first input row staged

        float acc[TOC][COLS];
#pragma unroll
        for (int o = 0; o < TOC; ++o)
#pragma unroll
            for (int k = 0; k < COLS; ++k) acc[o][k] = 0.0f;

#pragma unroll 1
        for (int c = 0; c < C_IN; ++c) {
            // ---- stage input rows ih0 .. ih0+IR-1 of channel c, phase-split ----
            // padded column p = iw + 2 is stored at [p & 3][p >> 2]
            const float* xc = x + ((long long)n * C_IN + c) * (long long)(H * W);
#pragma unroll 4
            for (int e = tid; e < IR * XQ; e += NTHREADS) {
                const int r = e / XQ;
                const int m = e - r * XQ;          // float4 covering iw = 4(m-1) .. 4(m-1)+3
                const int ih = ih0 + r;
                float4 v4 = make_float4(0.f, 0.f, 0.f, 0.f);
                if (ih >= 0 && ih < H && m >= 1 && m <= W / 4)
                    v4 = __ldg(reinterpret_cast<const float4*>(xc + ih * W + 4 * (m - 1)));
                float* srow = smem + r * ROWP;
                if (m >= 1) { srow[2 * QW + m - 1] = v4.x; srow[3 * QW + m - 1] = v4.y; }
                if (m < QW) { srow[m] = v4.z; srow[QW + m] = v4.w; }
            }
            // ---- stage this channel's weights as [kh*KS+kw][oc] ----
            const float* wsrc = w + ((long long)oc0 * C_IN + c) * (KS * KS);
            for (int e = tid; e < OC_TILE * KS * KS; e += NTHREADS) {
                const int olo = e & 3;
                const int t = e >> 2;
                const int ohi = t / (KS * KS);
                const int khkw = t - ohi * (KS * KS);
                const int o = ohi * 4 + olo;
                smem[WT_OFF + khkw * WSTR + o] =
                    __ldg(wsrc + (long long)o * (C_IN * KS * KS) + khkw);
            }
            __syncthreads();

            // ---- accumulate: conv row base+rt, cols 7ct..7ct+6, channels oc0+g*TOC.. ----
#pragma unroll 1
            for (int kh = 0; kh < KS; ++kh) {
                const float* xrow = xbase + kh * ROWP;
                const float* wrow = wbase + kh * (KS * WSTR);
#pragma unroll
                for (int ph = 0; ph < STR; ++ph) {
                    const int nkw = (KS - ph + STR - 1) / STR;   // taps kw = ph + 4s
                    float v[COLS + NS - 1];
#pragma unroll
                    for (int q = 0; q < COLS + NS - 1; ++q)
                        if (q < COLS + nkw - 1) v[q] = xrow[ph * QW + q];
#pragma unroll
                    for (int s = 0; s < NS; ++s) {
                        if (s < nkw) {
                            const int kw = ph + STR * s;
                            const float4* wp = reinterpret_cast<const float4*>(wrow + kw * WSTR);
                            float wv[TOC];
#pragma unroll
                            for (int j = 0; j < TOC / 4; ++j) {
                                const float4 t = wp[j];
                                wv[4 * j + 0] = t.x; wv[4 * j + 1] = t.y;
                                wv[4 * j + 2] = t.z; wv[4 * j + 3] = t.w;
                            }
#pragma unroll
                            for (int k = 0; k < COLS; ++k)
#pragma unroll
                                for (int o = 0; o < TOC; ++o)
                                    acc[o][k] = fmaf(v[k + s], wv[o], acc[o][k]);
                        }
                    }
                }
            }
            __syncthreads();
        }

        // ---- bias + ReLU into the conv tile (aliases the staging buffers) ----
#pragma unroll
        for (int o = 0; o < TOC; ++o) {
            float* dst = smem + ((g * TOC + o) * ROWS + rt) * CW + ct * COLS;
#pragma unroll
            for (int k = 0; k < COLS; ++k) {
                const float v = acc[o][k] + bv[o];
                dst[k] = (v < 0.0f) ? 0.0f : v;   // NaN passes through as in torch.relu
            }
        }
        __syncthreads();

        // ---- pool the rows completed by this chunk ----
        // pooled row i0 + li uses conv rows base + 2li - 2 .. base + 2li; li = 0 takes the carry
        const int i0 = base / 2 - 1;
#pragma unroll
        for (int it = 0; it < POOL_IT; ++it) {
            const int pair = tid + it * NTHREADS;
            if (pair < NPAIRS) {
                const int o = pair / POW;
                const int pj = pair - o * POW;
                const float* cvo = smem + o * (ROWS * CW) + PS * pj;
                float* op = out + ((long long)n * OC + oc0 + o) * (long long)(POH * POW) + pj;
                float h0 = hmax3(cvo);
                float m = nmax(carry[it], h0);
                if (i0 >= pa && i0 < pb) op[(long long)i0 * POW] = m;
#pragma unroll
                for (int li = 1; li < ROWS / 2; ++li) {
                    const float h1 = hmax3(cvo + (2 * li - 1) * CW);
                    const float h2 = hmax3(cvo + (2 * li) * CW);
                    m = nmax(nmax(h0, h1), h2);
                    const int i = i0 + li;
                    if (i < pb) op[(long long)i * POW] = m;
                    h0 = h2;
                }
                carry[it] = nmax(h0, hmax3(cvo + (ROWS - 1) * CW));
            }
        }
        __syncthreads();
    }
}
"""

kernels = compile_kernels(cuda_src, ["conv_relu_maxpool_fused"])
TOC = int(kernels.constant("TOC"))
OC_TILE = int(kernels.constant("OC_TILE"))
ROWS = int(kernels.constant("ROWS"))
NBANDS = int(kernels.constant("NBANDS"))
_CT = 8
NTHREADS = _CT * ROWS * (OC_TILE // TOC)

_C_IN, _OC, _KS, _H, _W = 3, 96, 11, 224, 224
_POH, _POW = 27, 27


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, pool_kernel_size: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel_size, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, p = self.conv, self.pool
        if (tuple(c.weight.shape) != (_OC, _C_IN, _KS, _KS) or c.bias is None
                or _pair(c.stride) != (4, 4) or not isinstance(c.padding, (int, tuple))
                or _pair(c.padding) != (2, 2) or _pair(c.dilation) != (1, 1) or c.groups != 1
                or c.padding_mode != "zeros" or c.weight.dtype != torch.float32
                or c.bias.dtype != torch.float32):
            raise ValueError("this kernel supports Conv2d(3, 96, 11, stride=4, padding=2) only")
        pk = _pair(p.kernel_size)
        ps = _pair(p.stride if p.stride is not None else p.kernel_size)
        if pk != (3, 3) or ps != (2, 2) or _pair(p.padding) != (0, 0) \
                or _pair(p.dilation) != (1, 1) or p.ceil_mode:
            raise ValueError("this kernel supports MaxPool2d(3, stride=2) only")
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4
                and tuple(x.shape[1:]) == (_C_IN, _H, _W)):
            raise ValueError("conv2d_relu_maxpool: x must be a float32 CUDA tensor of shape "
                             f"(N, {_C_IN}, {_H}, {_W})")
        x = x.contiguous()
        if x.data_ptr() % 16 != 0:
            x = x.clone()
        w, b = c.weight.contiguous(), c.bias.contiguous()
        nb = x.shape[0]
        out = torch.empty((nb, _OC, _POH, _POW), device=x.device, dtype=x.dtype)
        if nb == 0:
            return out
        grid = nb * NBANDS * (_OC // OC_TILE)
        kernels.conv_relu_maxpool_fused.launch(grid, NTHREADS, x, w, b, out, nb)
        return out
