# evokernel: best kernel of run conv2d_relu_maxpool for problem conv2d_relu_maxpool
# candidate 18dc6486b28804e3, generation 3, operator idea; speedup 2.007x over eager (1.2374 ms -> 0.6165 ms, 3136% of floor)
# idea: Vectorize the 82.5 µs max-pool pass (it reads the 116 MB intermediate at only ~1.75 TB/s with 9 scalar loads per output). Pass a row pitch OWP=56 to the conv kernel and allocate conv as [N][OC][55][56] (column 55 is never read), then launch one warp per (plane, POOL_ROWS consecutive pooled rows; tune: 1 3 9 27). Lanes 0..27 each load a float2 of conv columns 2l,2l+1 per conv row, take the NaN-propagating vertical max over rows 2i..2i+2 (keeping row 2i+2's float2 in registers as the next pooled row's first row), get column 2l+2 with __shfl_down_sync(.x, 1), and lanes 0..26 write out[plane][i][l] coalesced, so each conv row is read once with 8-byte coalesced loads.
# check it: evokernel check conv2d_relu_maxpool results/h200-2026-12-02-s11/frontier/conv2d_relu_maxpool/best.py
"""conv2d_relu_maxpool, NVRTC form.

Convolution: shared-memory-tiled direct convolution with register blocking, specialised to
11x11 / stride 4 / padding 2 (checked in Python; C, H, W, N, OC are runtime).
 * A block computes one image, ROWS consecutive conv output rows, all 55 output columns and
   OC_TILE = 8*OCG output channels. Each thread holds an 8 (oc) x 5 (contiguous ow) tile.
 * The input is staged in 4*C stages, one per (channel c, row phase k = kh mod 4). A stage holds
   the ROWS+2 input rows ih = ihbase + 4*s + k, zero padded, stored column-phase split:
   smem[s][iw' mod 4][iw' / 4] (iw' = iw + 2), row stride 247 (== 55 mod 32, conflict-free).
 * The stage loads do no index arithmetic. Before the stage loop each thread fixes its staging
   column(s): the shared destination, the global offset of (ihbase, iw), and a 64-bit mask of
   the valid (slot, phase) rows. Row validity is the same for the whole block and is AND-ed with
   the column's. A stage then issues NSLOT cp.async per column at offset c*H*W + k*W + s*4W,
   taking the byte count (4 or 0 = zero fill) from bit 4s+k of the mask.
 * A prep kernel repacks the weights once per call into a zero-padded
   [oc_block][c][k][m][kw][OC_TILE] slab. A stage's weights are then WS_SIZE/4 contiguous
   float4s: one predicate-free 16-byte cp.async per thread.
 * Double buffering with one barrier per stage: wait for stage st, barrier (stage st visible and
   everyone is done with the other buffer), prefetch stage st+1 into the other buffer, compute.
 * FP32 FMA accumulation (TWO_LEVEL=1 keeps one partial sum per input channel), bias + ReLU.
Max pooling (3x3, stride 2): the conv rows are stored with an even pitch OWP (56 for 55 columns).
One warp owns (plane, POOL_ROWS consecutive pooled rows). Lane l loads the float2 of columns
2l, 2l+1 of all 2*POOL_ROWS+1 conv rows up front (coalesced 8-byte loads, all in flight at
once), takes the NaN-propagating vertical max per pooled row, gets column 2l+2 from lane l+1 by
shuffle, and lanes l < PW store out[p][i][l] coalesced. Warps walk the planes from last to first:
the conv kernel writes the last images last, so the pool starts on data still held in L2.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int ROWS = 11;         // tune: 5 8 11 14
constexpr int OCG = 2;           // tune: 1 2 4
constexpr int MIN_BLOCKS = 3;    // tune: 1 2 3
#define TWO_LEVEL 0              // tune: 0 1
constexpr int POOL_BLOCK = 256;  // tune: 64 128 256 512
constexpr int POOL_ROWS = 9;     // tune: 1 3 9 27
constexpr int PREP_BLOCK = 256;

constexpr int KS = 11;           // conv kernel size
constexpr int CS = 4;            // conv stride
constexpr int CP = 2;            // conv padding
constexpr int OWT = 5;           // output columns per thread (contiguous)
constexpr int NOG = 11;          // column groups -> 55 output columns
constexpr int OCT = 8;           // output channels per thread
constexpr int OC_TILE = OCG * OCT;
constexpr int PP = NOG * OWT + 2;        // 57 words per column phase
constexpr int XCOLS = 4 * PP;            // 228 padded input columns (iw = -2 .. 225)
constexpr int RS = 247;                  // row stride: >= XCOLS and == 55 (mod 32)
constexpr int NSLOT = ROWS + 2;          // input rows per stage
constexpr int XS_SIZE = NSLOT * RS;
constexpr int WS_SIZE = 3 * KS * OC_TILE;
constexpr int WS4 = WS_SIZE / 4;         // float4s of weights per stage
constexpr int NPOS = NOG * ROWS;
constexpr int POS_PAD = (NPOS + 31) / 32 * 32;
constexpr int NT = OCG * POS_PAD;
constexpr int NCPT = (XCOLS + NT - 1) / NT;                       // staging columns per thread
constexpr int MINB = (MIN_BLOCKS * NT > 2048) ? (2048 / NT) : MIN_BLOCKS;

static_assert(4 * NSLOT <= 64, "the (slot, phase) validity mask has 64 bits");
static_assert(WS_SIZE % 4 == 0, "weight slab must be whole float4s");
static_assert(MINB >= 1, "block too large");

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(a) : "l"(p));
    return a;
}
// 4-byte copy; bytes = 0 reads nothing and writes a zero (padding).
__device__ __forceinline__ void cp_async4(unsigned dst, const float* src, unsigned bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const float* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                 :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// wp[idx], idx = ((((ob*C + c)*4 + k)*3 + m)*KS + kw)*OC_TILE + ocl
//   = w[ob*OC_TILE + ocl][c][k + 4m][kw], zero where k + 4m >= KS or the channel is >= OC.
__global__ void prep_weights_kernel(const float* __restrict__ w, float* __restrict__ wp,
                                    int C, int OC, int total) {
    for (int idx = blockIdx.x * PREP_BLOCK + threadIdx.x; idx < total;
         idx += gridDim.x * PREP_BLOCK) {
        const int ocl = idx % OC_TILE;
        int t = idx / OC_TILE;
        const int kw = t % KS; t /= KS;
        const int m = t % 3;   t /= 3;
        const int k = t & 3;   t >>= 2;
        const int c = t % C;
        const int ob = t / C;
        const int kh = k + 4 * m;
        const int oc = ob * OC_TILE + ocl;
        wp[idx] = (kh < KS && oc < OC) ? w[((long long)(oc * C + c) * KS + kh) * KS + kw] : 0.0f;
    }
}

// out[n][oc][oh][ow] = relu(bias[oc] + sum_c sum_{kh,kw} x[n][c][4oh-2+kh][4ow-2+kw] * w[oc][c][kh][kw])
__global__ void __launch_bounds__(NT, MINB)
conv2d_relu_tiled_kernel(const float* __restrict__ x, const float* __restrict__ wp,
                         const float* __restrict__ bias, float* __restrict__ out,
                         int C, int H, int W, int OC, int OH, int OW, int OWP) {
    __shared__ float xs[2][XS_SIZE];
    __shared__ float4 ws4[2][WS4];

    const int tid = threadIdx.x;
    const int oc0 = blockIdx.x * OC_TILE;
    const int oh0 = blockIdx.y * ROWS;
    const int n = blockIdx.z;

    const int g = tid / POS_PAD;            // channel group: warp-uniform
    const int pos = tid - g * POS_PAD;
    const int r0 = pos / NOG;
    const int og = pos - r0 * NOG;
    const bool active = r0 < ROWS;
    const int r = active ? r0 : ROWS - 1;   // idle lanes compute a duplicate, never stored

    // ---- staging state, fixed for the whole stage loop ----
    const float* xn = x + (long long)n * C * H * W;
    const float* wblk = wp + (long long)blockIdx.x * C * (4 * WS_SIZE) + 4 * tid;
    const int HW = H * W;
    const int W4 = 4 * W;
    const int ihbase = oh0 * CS - CP;
    const unsigned xs_a = smem_u32(&xs[0][0]);
    const unsigned ws_a = smem_u32(&ws4[0][0]) + 16u * (unsigned)tid;

    // bit (4s + k) set <=> input row ihbase + 4s + k lies inside the image (block-uniform)
    const int lo = ihbase < 0 ? -ihbase : 0;
    const int hi0 = H - ihbase;
    const int hi = hi0 < 4 * NSLOT ? hi0 : 4 * NSLOT;
    const unsigned long long rowmask =
        ((hi >= 64) ? ~0ull : ((1ull << hi) - 1ull)) & ~((1ull << lo) - 1ull);

    int xoff[NCPT];
    unsigned xdst[NCPT];
    unsigned long long xmask[NCPT];
    bool xon[NCPT];
#pragma unroll
    for (int j = 0; j < NCPT; ++j) {
        const int col = tid + j * NT;
        const int iw = col - CP;
        xon[j] = col < XCOLS;
        xmask[j] = (iw >= 0 && iw < W) ? rowmask : 0ull;
        xdst[j] = xs_a + 4u * (unsigned)((col & 3) * PP + (col >> 2));
        xoff[j] = ihbase * W + iw;
    }

    // Stage st = 4c + k into buffer buf: NSLOT copies per staging column, one float4 of weights.
    auto load_stage = [&](int st, int buf) {
        const int k = st & 3;
        const int cb = (st >> 2) * HW + k * W;
        const unsigned xb = (unsigned)buf * (unsigned)(XS_SIZE * 4);
#pragma unroll
        for (int j = 0; j < NCPT; ++j) {
            if (j + 1 < NCPT || xon[j]) {
                const float* src = xn + (xoff[j] + cb);
                const unsigned long long mk = xmask[j] >> k;
                const unsigned d = xdst[j] + xb;
#pragma unroll
                for (int s = 0; s < NSLOT; ++s)
                    cp_async4(d + 4u * (unsigned)(s * RS), src + s * W4,
                              ((unsigned)(mk >> (4 * s)) & 1u) << 2);
            }
        }
        const float* wsrc = wblk + st * WS_SIZE;
        const unsigned wb = ws_a + (unsigned)buf * (unsigned)(WS_SIZE * 4);
#pragma unroll
        for (int e0 = 0; e0 < WS4; e0 += NT)
            if (e0 + NT <= WS4 || e0 + tid < WS4)
                cp_async16(wb + 16u * (unsigned)e0, wsrc + 4 * e0);
    };

    float acc[OCT][OWT];
#pragma unroll
    for (int o = 0; o < OCT; ++o)
#pragma unroll
        for (int j = 0; j < OWT; ++j) acc[o][j] = 0.0f;
#if TWO_LEVEL
    float part[OCT][OWT];
#define PSUM part
#else
#define PSUM acc
#endif

    const float* xthr = &xs[0][0] + r * RS + og * OWT;
    const float* wthr = reinterpret_cast<const float*>(&ws4[0][0]) + g * OCT;

    const int S = C * 4;
    load_stage(0, 0);
    cp_async_commit();

    for (int st = 0; st < S; ++st) {
        const int buf = st & 1;
        cp_async_wait_all();
        __syncthreads();        // stage st visible; everyone finished reading buffer buf ^ 1
        if (st + 1 < S) {
            load_stage(st + 1, buf ^ 1);
            cp_async_commit();
        }

        const int k = st & 3;
#if TWO_LEVEL
        if (k == 0) {
#pragma unroll
            for (int o = 0; o < OCT; ++o)
#pragma unroll
                for (int j = 0; j < OWT; ++j) part[o][j] = 0.0f;
        }
#endif
        const float* xb = xthr + buf * XS_SIZE;
        const float* wbase = wthr + buf * WS_SIZE;
#pragma unroll
        for (int m = 0; m < 3; ++m) {
            if (m < 2 || k < 3) {                     // kh = k + 4m < 11
                const float* xr = xb + m * RS;
                const float* wr = wbase + m * KS * OC_TILE;
#pragma unroll
                for (int p = 0; p < 4; ++p) {
                    float v[OWT + 2];
#pragma unroll
                    for (int i = 0; i < OWT + 2; ++i) v[i] = xr[p * PP + i];
#pragma unroll
                    for (int q = 0; q < 3; ++q) {
                        const int kw = 4 * q + p;
                        if (kw < KS) {
                            const float4 wa = *reinterpret_cast<const float4*>(wr + kw * OC_TILE);
                            const float4 wb = *reinterpret_cast<const float4*>(wr + kw * OC_TILE + 4);
                            const float wv[OCT] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                            for (int j = 0; j < OWT; ++j)
#pragma unroll
                                for (int o = 0; o < OCT; ++o)
                                    PSUM[o][j] = fmaf(v[q + j], wv[o], PSUM[o][j]);
                        }
                    }
                }
            }
        }
#if TWO_LEVEL
        if (k == 3) {
#pragma unroll
            for (int o = 0; o < OCT; ++o)
#pragma unroll
                for (int j = 0; j < OWT; ++j) acc[o][j] += part[o][j];
        }
#endif
    }
#undef PSUM

    if (active) {
        const int oh = oh0 + r;
        if (oh < OH) {
#pragma unroll
            for (int o = 0; o < OCT; ++o) {
                const int oc = oc0 + g * OCT + o;
                if (oc < OC) {
                    const float b = bias[oc];
                    float* orow = out + (((long long)n * OC + oc) * OH + oh) * OWP + og * OWT;
#pragma unroll
                    for (int j = 0; j < OWT; ++j) {
                        if (og * OWT + j < OW) {
                            const float v = acc[o][j] + b;
                            orow[j] = (v < 0.0f) ? 0.0f : v;   // NaN passes through
                        }
                    }
                }
            }
        }
    }
}

__device__ __forceinline__ float nmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;     // NaN propagates as in PyTorch
}

// out[p][i][j] = max_{a,b < 3} in[p][2i + a][2j + b], p = flat (n, c); no padding, floor mode.
// in rows have pitch OWP (even, OWP >= OW, PW <= 31). One warp per (plane, POOL_ROWS pooled
// rows); warp wid handles the reversed index nwarps-1-wid so that the newest conv data goes first.
__global__ void __launch_bounds__(POOL_BLOCK)
maxpool3s2_rows_kernel(const float* __restrict__ in, float* __restrict__ out,
                       long long nwarps, int ngroups, int OH, int OWP, int PH, int PW) {
    const int lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * (POOL_BLOCK / 32) + (threadIdx.x >> 5);
    if (wid >= nwarps) return;                          // warp-uniform exit
    const long long rw = nwarps - 1 - wid;
    const long long p = rw / ngroups;
    const int i0 = (int)(rw - p * ngroups) * POOL_ROWS;
    const int nr = (PH - i0) < POOL_ROWS ? (PH - i0) : POOL_ROWS;
    const bool ld = 2 * lane + 1 < OWP;
    const float* ip = in + (p * OH + 2 * i0) * (long long)OWP + 2 * lane;
    float* op = out + (p * PH + i0) * (long long)PW + lane;

    // all conv rows of the group: 2*nr + 1 rows, issued before any use
    float2 r[2 * POOL_ROWS + 1];
#pragma unroll
    for (int t = 0; t < 2 * POOL_ROWS + 1; ++t) {
        r[t] = make_float2(0.0f, 0.0f);
        if (ld && t <= 2 * nr)
            r[t] = __ldg(reinterpret_cast<const float2*>(ip + (long long)t * OWP));
    }
#pragma unroll
    for (int li = 0; li < POOL_ROWS; ++li) {
        const float vx = nmax(nmax(r[2 * li].x, r[2 * li + 1].x), r[2 * li + 2].x);
        const float vy = nmax(nmax(r[2 * li].y, r[2 * li + 1].y), r[2 * li + 2].y);
        const float vr = __shfl_down_sync(0xffffffffu, vx, 1);   // column 2l + 2
        if (li < nr && lane < PW)
            op[(long long)li * PW] = nmax(nmax(vx, vy), vr);
    }
}
"""

kernels = compile_kernels(cuda_src, ["prep_weights_kernel", "conv2d_relu_tiled_kernel",
                                     "maxpool3s2_rows_kernel"])
ROWS = int(kernels.constant("ROWS"))
OCG = int(kernels.constant("OCG"))
POOL_BLOCK = int(kernels.constant("POOL_BLOCK"))
POOL_ROWS = int(kernels.constant("POOL_ROWS"))
PREP_BLOCK = int(kernels.constant("PREP_BLOCK"))

_KS, _CS, _CP = 11, 4, 2
_OWT, _NOG, _OCT = 5, 11, 8
OC_TILE = OCG * _OCT
NT = OCG * ((_NOG * ROWS + 31) // 32 * 32)
WS_SIZE = 3 * _KS * OC_TILE


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _blocks(total, block):
    return max(1, min((total + block - 1) // block, 1 << 30))


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, pool_kernel_size: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel_size, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, p = self.conv, self.pool
        pk, ps = _pair(p.kernel_size), _pair(p.stride)
        if pk != (3, 3) or ps != (2, 2) or p.padding not in (0, (0, 0)) or p.ceil_mode \
                or p.dilation not in (1, (1, 1)):
            raise ValueError("this kernel supports MaxPool2d(3, stride=2), unpadded, floor mode")
        if _pair(c.kernel_size) != (_KS, _KS) or _pair(c.stride) != (_CS, _CS) \
                or not isinstance(c.padding, (tuple, list, int)) \
                or _pair(c.padding) != (_CP, _CP) or _pair(c.dilation) != (1, 1) \
                or c.groups != 1 or c.padding_mode != "zeros":
            raise ValueError("conv2d_relu_maxpool: kernel specialised to 11x11, stride 4, "
                             "padding 2, dilation 1, groups 1")
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4
                and x.shape[1] == c.weight.shape[1] and x.shape[1] >= 1):
            raise ValueError("conv2d_relu_maxpool: x must be a float32 NCHW CUDA tensor with "
                             f"{c.weight.shape[1]} channels")
        if c.weight.dtype != torch.float32 or not c.weight.is_cuda:
            raise ValueError("conv2d_relu_maxpool: float32 CUDA weights required")
        x, w = x.contiguous(), c.weight.contiguous()
        nb, ch, h, wd = x.shape
        oc = w.shape[0]
        if c.bias is not None:
            if c.bias.dtype != torch.float32:
                raise ValueError("conv2d_relu_maxpool: float32 bias required")
            b = c.bias.contiguous()
        else:
            b = torch.zeros(oc, device=x.device, dtype=torch.float32)
        oh, ow = (h + 2 * _CP - _KS) // _CS + 1, (wd + 2 * _CP - _KS) // _CS + 1
        if oh < pk[0] or ow < pk[0]:
            raise ValueError("conv2d_relu_maxpool: pool larger than the convolution's output")
        if ow > _NOG * _OWT:
            raise ValueError("conv2d_relu_maxpool: at most 55 output columns supported")
        if nb > 65535:
            raise ValueError("conv2d_relu_maxpool: batch too large for the grid")
        nocb = (oc + OC_TILE - 1) // OC_TILE
        wtot = nocb * ch * 4 * WS_SIZE
        if ch * h * wd + 128 * wd >= 2 ** 31 or wtot >= 2 ** 31 or oc * ch * _KS * _KS >= 2 ** 31:
            raise ValueError("conv2d_relu_maxpool: tensor too large for 32-bit offsets")
        ph_out, pw_out = (oh - pk[0]) // ps[0] + 1, (ow - pk[0]) // ps[0] + 1
        owp = ow + (ow & 1)                      # even pitch: float2-aligned rows
        conv = torch.empty((nb, oc, oh, owp), device=x.device, dtype=x.dtype)
        out = torch.empty((nb, oc, ph_out, pw_out), device=x.device, dtype=x.dtype)
        if out.numel() == 0:
            return out
        wp = torch.empty(wtot, device=x.device, dtype=torch.float32)
        kernels.prep_weights_kernel.launch(_blocks(wtot, PREP_BLOCK), PREP_BLOCK, w, wp,
                                           ch, oc, wtot)
        grid = (nocb, (oh + ROWS - 1) // ROWS, nb)
        kernels.conv2d_relu_tiled_kernel.launch(grid, NT, x, wp, b, conv,
                                                ch, h, wd, oc, oh, ow, owp)
        ngroups = (ph_out + POOL_ROWS - 1) // POOL_ROWS
        nwarps = nb * oc * ngroups
        kernels.maxpool3s2_rows_kernel.launch(_blocks(nwarps * 32, POOL_BLOCK), POOL_BLOCK,
                                              conv, out, nwarps, ngroups, oh, owp,
                                              ph_out, pw_out)
        return out
