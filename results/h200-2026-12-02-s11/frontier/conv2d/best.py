# evokernel: best kernel of run conv2d for problem conv2d
# candidate 642fc99f4db55278, generation 1, operator idea; speedup 2.081x over eager (1.0666 ms -> 0.5126 ms, 1290% of floor)
# idea: [memory] Shared-memory tiled direct convolution with zero-padded input staging: each 256-thread block handles one image n, 4 output rows (all 55 columns) and 32 output channels (grid = 100 x 14 row-tiles x 3 OC-groups). It copies the input patch (3 ch x 27 rows x 228 cols, the 2-pixel padding stored as zeros, ~74 KB in dynamic smem through cudaFuncSetAttribute) with coalesced row-wise loads, and the 32x363 weight slice transposed to [c][kh][kw][oc] (~46 KB). Each thread then keeps a 4-oc x 4-ow (or 8x2) accumulator tile in registers and runs the 363-tap loop without bounds checks, reading weights as a warp-uniform float4 broadcast; it keeps one partial sum per input channel (3 x 121 taps), adds the bias, and stores with ow as the fastest thread index so the writes are coalesced.
# check it: evokernel check conv2d results/h200-2026-12-02-s11/frontier/conv2d/best.py
"""AlexNet conv1 (3->96, k=11, s=4, p=2) on NCHW fp32: shared-memory tiled direct convolution,
NVRTC form.

Each block handles one image, ROWS output rows (all 55 columns, flattened to ROWS*55 pixels) and
OCB output channels. Input channels are staged one at a time into static shared memory with
cp.async (the zero padding comes from cp.async zero-fill). The staged input is split by
stride phase in both dimensions, so tap (kh, kw) of output pixel (r, ow) is at
    (kh%4)*RPP*RW + (r + kh/4)*RW + (kw%4)*PP + ow + kw/4
and, because RW == 55 (mod 32), any 32 consecutive flattened pixels use 32 different banks.
A small kernel transposes the weights to [c][kh][kw][oc], so a warp reads the 8 output channels
of one tap as two broadcast float4 loads. Each thread accumulates 8 oc x PXT pixels in FP32 FMA.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int C = 3;
constexpr int H = 224;
constexpr int W = 224;
constexpr int OC = 96;
constexpr int K = 11;
constexpr int S = 4;
constexpr int PAD = 2;
constexpr int OH = 55;
constexpr int OW = 55;
constexpr int TAPS = K * K;                // 121
constexpr int PADW = W + 2 * PAD;          // 228 padded columns

constexpr int ROWS = 4;      // tune: 2 3 4 5
constexpr int PXL = 32;      // tune: 32 64
constexpr int OCB = 32;      // tune: 16 32
#define MIN_BLOCKS 4         // tune: 3 4 5

constexpr int OCT = 8;                         // output channels per thread (2 x float4)
constexpr int NG = OCB / OCT;                  // oc sub-groups per block (one per PXL threads)
constexpr int THREADS = PXL * NG;
constexpr int P = ROWS * OW;                   // flattened pixels per block
constexpr int PXT = (P + PXL - 1) / PXL;       // pixels per thread (strided by PXL)
constexpr int RT = (OH + ROWS - 1) / ROWS;     // row tiles
constexpr int OCG = OC / OCB;                  // oc groups
constexpr int PP = PADW / 4;                   // 57 columns per column phase
constexpr int RW = 247;                        // smem row pitch: >= 4*PP and == 55 (mod 32)
constexpr int RPP = ROWS + 2;                  // smem rows per row phase
constexpr int LROWS = 4 * RPP;                 // staged input rows
constexpr int XS = LROWS * RW;                 // input floats per stage
constexpr int WS = TAPS * OCB;                 // weight floats per stage

static_assert(S == 4, "phase layout assumes stride 4");
static_assert(PADW % 4 == 0, "padded width must split into 4 phases");
static_assert(PP >= OW + (K - 1) / S, "column phase too short");
static_assert(RW >= 4 * PP && (RW % 32) == (OW % 32), "row pitch");
static_assert(OC % OCB == 0 && OCB % OCT == 0, "oc split");
static_assert(PXL % 32 == 0, "pixel lanes must be whole warps");
static_assert(LROWS >= S * (ROWS - 1) + K, "not enough staged rows");
static_assert(XS % 4 == 0, "weight stage must be 16-byte aligned");
static_assert((XS + WS) * 4 <= 48 * 1024, "static shared memory limit");

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm volatile("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }"
                 : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async4(float* dst, const float* src, int nbytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(nbytes) : "memory");
}
__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// wt[(c*TAPS + t)*OC + oc] = w[oc][c][t]
extern "C" __global__ void transpose_w_kernel(const float* __restrict__ w,
                                              float* __restrict__ wt) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= OC * C * TAPS) return;
    const int oc = i % OC;
    const int ct = i / OC;
    wt[i] = w[oc * (C * TAPS) + ct];
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv_s4k11_kernel(const float* __restrict__ x, const float* __restrict__ wt,
                  const float* __restrict__ bias, float* __restrict__ out, int N) {
    __shared__ __align__(16) float smem[XS + WS];
    float* xs = smem;
    float* ws = smem + XS;

    const int tid = threadIdx.x;
    int bid = blockIdx.x;
    const int og = bid % OCG;
    bid /= OCG;
    const int rt = bid % RT;
    const int n = bid / RT;
    if (n >= N) return;
    const int oh0 = rt * ROWS;
    const int g = tid / PXL;            // warp-uniform oc sub-group
    const int pl = tid - g * PXL;

    // per-pixel smem offsets (invalid pixels clamped to a valid one; never stored)
    int poff[PXT];
#pragma unroll
    for (int j = 0; j < PXT; ++j) {
        int p = pl + j * PXL;
        p = p < P ? p : P - 1;
        const int r = p / OW;
        poff[j] = r * RW + (p - r * OW);
    }

    float acc[OCT][PXT];
#pragma unroll
    for (int o = 0; o < OCT; ++o)
#pragma unroll
        for (int j = 0; j < PXT; ++j) acc[o][j] = 0.0f;

    const int ih_base = oh0 * S - PAD;

    for (int c = 0; c < C; ++c) {
        if (c > 0) __syncthreads();   // previous stage fully consumed

        // ---- stage input channel c: LROWS rows x 228 padded columns, phase de-interleaved
        const float* xc = x + ((long long)n * C + c) * (H * W);
        for (int pc = tid; pc < PADW; pc += THREADS) {
            const int iw = pc - PAD;
            const bool okw = (unsigned)iw < (unsigned)W;
            float* dcol = xs + (pc & 3) * PP + (pc >> 2);
#pragma unroll
            for (int lr = 0; lr < LROWS; ++lr) {
                const int ih = ih_base + lr;
                const bool ok = okw && ((unsigned)ih < (unsigned)H);
                const float* src = ok ? (xc + (ih * W + iw)) : xc;
                cp_async4(dcol + ((lr & 3) * RPP + (lr >> 2)) * RW, src, ok ? 4 : 0);
            }
        }
        // ---- stage weights of channel c for this oc group: [tap][OCB]
        const float* wsrc = wt + (long long)c * TAPS * OC + og * OCB;
        for (int e = tid; e < TAPS * (OCB / 4); e += THREADS) {
            const int t = e / (OCB / 4);
            const int q = e - t * (OCB / 4);
            cp_async16(ws + t * OCB + q * 4, wsrc + t * OC + q * 4);
        }
        cp_async_commit();
        cp_async_wait_all();
        __syncthreads();

        // ---- 121 taps, no bounds checks (padding is staged as zeros)
        const float* wg = ws + g * OCT;
#pragma unroll 1
        for (int kh = 0; kh < K; ++kh) {
            const float* xr = xs + (kh & 3) * (RPP * RW) + (kh >> 2) * RW;
            const float* wr = wg + kh * K * OCB;
#pragma unroll
            for (int kw = 0; kw < K; ++kw) {
                const float4 wa = *reinterpret_cast<const float4*>(wr + kw * OCB);
                const float4 wb = *reinterpret_cast<const float4*>(wr + kw * OCB + 4);
                const int co = (kw & 3) * PP + (kw >> 2);
#pragma unroll
                for (int j = 0; j < PXT; ++j) {
                    const float v = xr[poff[j] + co];
                    acc[0][j] = fmaf(v, wa.x, acc[0][j]);
                    acc[1][j] = fmaf(v, wa.y, acc[1][j]);
                    acc[2][j] = fmaf(v, wa.z, acc[2][j]);
                    acc[3][j] = fmaf(v, wa.w, acc[3][j]);
                    acc[4][j] = fmaf(v, wb.x, acc[4][j]);
                    acc[5][j] = fmaf(v, wb.y, acc[5][j]);
                    acc[6][j] = fmaf(v, wb.z, acc[6][j]);
                    acc[7][j] = fmaf(v, wb.w, acc[7][j]);
                }
            }
        }
    }

    // ---- epilogue: the tile's pixels are contiguous in each (n, oc) plane
    const int rem = (OH - oh0) * OW;
    const int valid = rem < P ? rem : P;
    const int ocb = og * OCB + g * OCT;
    float* ob = out + ((long long)n * OC + ocb) * (OH * OW) + oh0 * OW;
#pragma unroll
    for (int o = 0; o < OCT; ++o) {
        const float b = __ldg(bias + ocb + o);
#pragma unroll
        for (int j = 0; j < PXT; ++j) {
            const int p = pl + j * PXL;
            if (p < valid) ob[(long long)o * (OH * OW) + p] = acc[o][j] + b;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["conv_s4k11_kernel", "transpose_w_kernel"])
ROWS = kernels.constant("ROWS")
PXL = kernels.constant("PXL")
OCB = kernels.constant("OCB")
THREADS = PXL * (OCB // 8)
RT = (55 + ROWS - 1) // ROWS
OCG = 96 // OCB
W_NUMEL = 96 * 3 * 121


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4):
            raise ValueError("conv2d: x must be a float32 NCHW CUDA tensor")
        w, b = c.weight, c.bias
        if (tuple(x.shape[1:]) != (3, 224, 224) or tuple(w.shape) != (96, 3, 11, 11)
                or tuple(c.stride) != (4, 4) or tuple(c.padding) != (2, 2)
                or tuple(c.dilation) != (1, 1) or c.groups != 1 or b is None
                or w.dtype != torch.float32 or b.dtype != torch.float32):
            raise ValueError("conv2d: this kernel is specialized for Conv2d(3, 96, 11, "
                             "stride=4, padding=2) with bias on 3x224x224 float32 inputs")
        x = x.contiguous()
        w = w.contiguous()
        b = b.contiguous()
        nb = x.shape[0]
        out = torch.empty((nb, 96, 55, 55), device=x.device, dtype=torch.float32)
        if nb == 0:
            return out
        wt = torch.empty(W_NUMEL, device=x.device, dtype=torch.float32)
        kernels.transpose_w_kernel.launch((W_NUMEL + 255) // 256, 256, w, wt)
        kernels.conv_s4k11_kernel.launch(nb * RT * OCG, THREADS, x, wt, b, out, nb)
        return out
