# evokernel: best kernel of run conv2d for problem conv2d
# candidate 66bbca83c1bc30ca, generation 3, operator idea; speedup 2.269x over eager (1.0672 ms -> 0.4704 ms, 1197% of floor)
# idea: [dtypes] Stage the raw input patches with 16-byte cp.async.ca instead of 8-byte copies. Widen each tile's staged patch to 16 rows x 20 columns starting at column 8*tx-4. That column is a multiple of 4 and W=224, so every float4 chunk lies fully inside or fully outside the image and zero-fill (src-size 0) stays exact. Use RS=20 and TSR=324 (= 4 mod 32, so the transform reads stay conflict-free; RAW grows to 82,944 B and total smem to ~223 KB), and give each thread 10 chunk copies per channel (64 tiles x 16 rows x 5 chunks / 512) instead of 16 8-byte ones, with a per-tile 5-bit column-chunk valid mask replacing the 8-bit pair mask. The input transform then reads its 4x4 samples at column offset +2, which halves the copy instructions and sector requests on the partially exposed staging path.
# check it: evokernel check conv2d results/h200-2026-12-02-s11/frontier/conv2d/best.py
"""Polyphase + Winograd F(2x2,3x3) convolution for AlexNet conv1 (NVRTC form).

Stride 4 with an 11x11 kernel (padded to 12x12) is a stride-1 3x3 convolution over 48 phase
channels (3 input channels x 4x4 phases). A prep kernel turns the weights into the Winograd
domain (in float64, then rounded once) as U[oc/32][c][xi][k][32]. The main kernel takes
64 consecutive 2x2 output tiles x 32 output channels per block (512 threads):
  * per input channel c (3 chunks of 16 phase channels), a 16-row x 20-column raw input patch
    of every tile (columns from 8*tx-4, a multiple of 4, so each float4 chunk is fully inside
    or fully outside the image) is copied to shared memory with 16-byte cp.async.ca
    (zero-filled padding), together with the chunk's U slice; thread tid owns tile tid%64 and
    patch rows tid/64 and tid/64+8 (5 chunks each), with its source offset and valid mask kept
    in registers; the next chunk is prefetched while the current one is multiplied;
  * the input transform V = B^T d B (adds only) goes to shared memory as V[xi][k][tile];
  * warp w computes M[xi=w][64 tiles][32 oc] += V[w] x U[w] with an 8 tile x 8 oc FP32-FMA
    register tile per thread (4 LDS.128 per 64 FMA);
  * at the end M goes through shared memory and each thread does the add-only output
    transform A^T M A for 4 (tile, oc) pairs, adds the bias and writes the output.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int CIN = 3;          // input channels (fixed by the polyphase layout)
constexpr int KS = 11;          // kernel size (zero-padded to 12 = 3 taps x 4 phases)
constexpr int NTHREADS = 512;   // 16 warps: warp w owns Winograd element xi = w
constexpr int BT = 64;          // 2x2 output tiles per block (GEMM M)
constexpr int OCB = 32;         // output channels per block (GEMM N)
constexpr int RS = 20;          // raw patch row stride (floats): 5 float4 chunks from col 8*tx-4
constexpr int TSR = 324;        // raw patch tile stride (floats), == 4 (mod 32): conflict-free reads
constexpr int NCH = RS / 4;     // 16-byte column chunks per patch row
constexpr int COFF = 2;         // patch column of the Winograd patch origin (8*tx-2)
constexpr int RSTEP = NTHREADS / BT;   // distance between a thread's staged patch rows (8)
constexpr int RPT = 16 / RSTEP;        // patch rows staged per thread (2)
static_assert(NTHREADS % BT == 0 && 16 % RSTEP == 0, "staging map: whole rows per thread");
static_assert(RPT * NCH <= 16, "valid mask must fit");
static_assert(TSR >= 16 * RS && (TSR % 32) == 4 && (TSR % 4) == 0, "tile stride");
constexpr int VK = 72;          // tune: 72 64 80
constexpr int RAW_FLOATS = BT * TSR;
constexpr int VS_FLOATS = 16 * 16 * VK;
constexpr int UB_FLOATS = 16 * 16 * OCB;

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm volatile("{\n\t.reg .u64 sa64;\n\tcvta.to.shared.u64 sa64, %1;\n\tcvt.u32.u64 %0, sa64;\n\t}\n"
                 : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16z(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Weight transform: for every (oc, c, phase k=p*4+q) take the 3x3 sub-kernel
// g[a][b] = w[oc][c][4a+p][4b+q] (0 outside 11x11) and write U = G g G^T (4x4) to
// ug[((oc/32)*CIN + c)][xi][k][oc%32].
extern "C" __global__ void wino_weight_prep(const float* __restrict__ w, float* __restrict__ ug,
                                            int OC) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= OC * CIN * 16) return;
    const int k = idx & 15;
    const int c = (idx >> 4) % CIN;
    const int oc = (idx >> 4) / CIN;
    const int p = k >> 2, q = k & 3;
    double g[3][3];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
#pragma unroll
        for (int b = 0; b < 3; ++b) {
            const int kh = 4 * a + p, kw = 4 * b + q;
            g[a][b] = (kh < KS && kw < KS)
                          ? (double)w[((oc * CIN + c) * KS + kh) * KS + kw] : 0.0;
        }
    }
    double t[4][3];
#pragma unroll
    for (int b = 0; b < 3; ++b) {
        t[0][b] = g[0][b];
        t[1][b] = 0.5 * (g[0][b] + g[1][b] + g[2][b]);
        t[2][b] = 0.5 * (g[0][b] - g[1][b] + g[2][b]);
        t[3][b] = g[2][b];
    }
    float* dst = ug + (long long)((oc / OCB) * CIN + c) * (16 * 16 * OCB) + k * OCB + (oc % OCB);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const double u0 = t[i][0];
        const double u1 = 0.5 * (t[i][0] + t[i][1] + t[i][2]);
        const double u2 = 0.5 * (t[i][0] - t[i][1] + t[i][2]);
        const double u3 = t[i][2];
        dst[(i * 4 + 0) * 16 * OCB] = (float)u0;
        dst[(i * 4 + 1) * 16 * OCB] = (float)u1;
        dst[(i * 4 + 2) * 16 * OCB] = (float)u2;
        dst[(i * 4 + 3) * 16 * OCB] = (float)u3;
    }
}

// Copies the raw 16x20 input patches of the block's 64 tiles for one input channel (16-byte
// cp.async.ca, zero-filled outside the image) and that channel's U slice (16-byte cp.async).
// This thread copies rows sr0 + RSTEP*h (h < RPT) of one tile: sxb is the global offset of
// its first row's chunk 0, okm bit h*NCH+j says whether chunk j of row h lies in the image.
__device__ __forceinline__ void stage_chunk(const float* __restrict__ x,
                                            const float* __restrict__ usrc,
                                            int sxb, int W, int okm,
                                            unsigned raw_dst, unsigned ub_base, int tid) {
#pragma unroll
    for (int h = 0; h < RPT; ++h) {
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const bool ok = (okm >> (h * NCH + j)) & 1;
            const float* src = ok ? (x + (sxb + h * RSTEP * W + 4 * j)) : x;
            cp_async16z(raw_dst + (unsigned)((h * RSTEP * RS + 4 * j) * 4), src, ok ? 16 : 0);
        }
    }
#pragma unroll
    for (int m = 0; m < UB_FLOATS / 4 / NTHREADS; ++m) {
        const int e = tid + m * NTHREADS;
        cp_async16(ub_base + (unsigned)(e * 16), usrc + e * 4);
    }
    cp_async_commit();
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
conv_wino_kernel(const float* __restrict__ x, const float* __restrict__ ug,
                 const float* __restrict__ bias, float* __restrict__ out,
                 int H, int W, int OC, int OH, int OW, int TY, int TX, int ntiles) {
    extern __shared__ __align__(16) float smem[];
    __shared__ int s_xb[BT];   // input offset of the tile's patch origin (row0, col0) in image n
    __shared__ int s_xm[BT];   // bits 0..15: patch row valid, bits 16..20: column chunk valid
    __shared__ int s_ob[BT];   // output offset of (n, oc=0, 2ty, 2tx)
    __shared__ int s_om[BT];   // bit0 tile valid, bit1 second row valid, bit2 second col valid

    float* RAW = smem;
    float* VS = smem + RAW_FLOATS;
    float* UB = VS + VS_FLOATS;

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int G = OC / OCB;
    const int gidx = blockIdx.x % G;
    const int tile0 = (blockIdx.x / G) * BT;
    const int HW = H * W;
    const int TT = TY * TX;

    if (tid < BT) {
        const int g = tile0 + tid;
        int xb = 0, xm = 0, ob = 0, om = 0;
        if (g < ntiles) {
            const int n = g / TT;
            const int rem = g - n * TT;
            const int ty = rem / TX;
            const int tx = rem - ty * TX;
            const int row0 = 8 * ty - 2, col0 = 8 * tx - 2 - COFF;   // col0 % 4 == 0
            xb = n * CIN * HW + row0 * W + col0;
            for (int R = 0; R < 16; ++R) {
                const int r = row0 + R;
                if (r >= 0 && r < H) xm |= 1 << R;
            }
            for (int ch = 0; ch < NCH; ++ch) {
                const int cc = col0 + 4 * ch;   // W % 4 == 0: chunk fully in or fully out
                if (cc >= 0 && cc + 3 < W) xm |= 1 << (16 + ch);
            }
            const int oh0 = 2 * ty, ow0 = 2 * tx;
            ob = n * OC * OH * OW + oh0 * OW + ow0;
            om = 1 | ((oh0 + 1 < OH) ? 2 : 0) | ((ow0 + 1 < OW) ? 4 : 0);
        }
        s_xb[tid] = xb;
        s_xm[tid] = xm;
        s_ob[tid] = ob;
        s_om[tid] = om;
    }
    __syncthreads();

    // staging roles: tile st = tid % BT (32 consecutive tiles per warp: TSR == 4 mod 32 makes
    // the 16-byte smem writes conflict-free), patch rows sr0 + RSTEP*h, all NCH chunks per row
    const int st = tid & (BT - 1);
    const int sr0 = tid / BT;
    int okm = 0;
    {
        const int xm = s_xm[st];
        const int colm = (xm >> 16) & ((1 << NCH) - 1);
#pragma unroll
        for (int h = 0; h < RPT; ++h)
            if ((xm >> (sr0 + RSTEP * h)) & 1) okm |= colm << (h * NCH);
    }
    const int sxb = s_xb[st] + sr0 * W;
    const unsigned raw_dst = smem_u32(RAW + st * TSR + sr0 * RS);
    const float* ug_blk = ug + (long long)gidx * CIN * UB_FLOATS;

    stage_chunk(x, ug_blk, sxb, W, okm, raw_dst, smem_u32(UB), tid);

    const int tg = lane & 7, og = lane >> 3;
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

#pragma unroll 1
    for (int c = 0; c < CIN; ++c) {
        cp_async_wait_all();
        __syncthreads();

        // input transform: item = (tile t, phase p, q); d[r][s] = patch[4r+p][4s+q]
#pragma unroll
        for (int it = 0; it < 2; ++it) {
            const int item = tid + it * NTHREADS;
            const int q = item & 3;
            const int t = (item >> 2) & (BT - 1);
            const int p = item >> 8;
            const float* rp = RAW + t * TSR + p * RS + COFF + q;
            float d[4][4];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int s = 0; s < 4; ++s) d[r][s] = rp[r * 4 * RS + s * 4];
            float e[4][4];
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                e[0][s] = d[0][s] - d[2][s];
                e[1][s] = d[1][s] + d[2][s];
                e[2][s] = d[2][s] - d[1][s];
                e[3][s] = d[1][s] - d[3][s];
            }
            float* vp = VS + (p * 4 + q) * VK + t;
#pragma unroll
            for (int ii = 0; ii < 4; ++ii) {
                vp[(ii * 4 + 0) * 16 * VK] = e[ii][0] - e[ii][2];
                vp[(ii * 4 + 1) * 16 * VK] = e[ii][1] + e[ii][2];
                vp[(ii * 4 + 2) * 16 * VK] = e[ii][2] - e[ii][1];
                vp[(ii * 4 + 3) * 16 * VK] = e[ii][1] - e[ii][3];
            }
        }
        __syncthreads();

        // prefetch the next channel while this one is multiplied
        if (c + 1 < CIN)
            stage_chunk(x, ug_blk + (c + 1) * UB_FLOATS, sxb + (c + 1) * HW, W, okm,
                        raw_dst, smem_u32(UB + ((c + 1) & 1) * UB_FLOATS), tid);

        // GEMM for xi = warp: tiles {tg*4..+3, 32+tg*4..+3} x oc {og*4..+3, 16+og*4..+3}
        const float* vb = VS + warp * (16 * VK) + tg * 4;
        const float* ub = UB + (c & 1) * UB_FLOATS + warp * (16 * OCB) + og * 4;
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const float4 va = *reinterpret_cast<const float4*>(vb + k * VK);
            const float4 vc = *reinterpret_cast<const float4*>(vb + k * VK + 32);
            const float4 ua = *reinterpret_cast<const float4*>(ub + k * OCB);
            const float4 uc = *reinterpret_cast<const float4*>(ub + k * OCB + 16);
            const float v[8] = {va.x, va.y, va.z, va.w, vc.x, vc.y, vc.z, vc.w};
            const float u[8] = {ua.x, ua.y, ua.z, ua.w, uc.x, uc.y, uc.z, uc.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(v[i], u[j], acc[i][j]);
        }
    }
    __syncthreads();

    // M[xi][oc][tile] through shared memory (aliases RAW/VS; no copies are in flight)
    {
        float* mw = smem + warp * (OCB * BT) + tg * 4;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int ocl = (j < 4) ? (og * 4 + j) : (16 + og * 4 + (j - 4));
                *reinterpret_cast<float4*>(mw + ocl * BT + 32 * h) =
                    make_float4(acc[4 * h + 0][j], acc[4 * h + 1][j], acc[4 * h + 2][j],
                                acc[4 * h + 3][j]);
            }
        }
    }
    __syncthreads();

    // output transform Y = A^T M A, bias, store
    const int OHW = OH * OW;
#pragma unroll
    for (int m = 0; m < (BT * OCB) / NTHREADS; ++m) {
        const int pi = tid + m * NTHREADS;
        const int t = pi % BT;
        const int ocl = pi / BT;
        const int om = s_om[t];
        if (!(om & 1)) continue;
        const float* mp = smem + ocl * BT + t;
        float mv[16];
#pragma unroll
        for (int xi = 0; xi < 16; ++xi) mv[xi] = mp[xi * (OCB * BT)];
        float z0[4], z1[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            z0[i] = mv[i * 4 + 0] + mv[i * 4 + 1] + mv[i * 4 + 2];
            z1[i] = mv[i * 4 + 1] - mv[i * 4 + 2] - mv[i * 4 + 3];
        }
        const float y00 = z0[0] + z0[1] + z0[2];
        const float y10 = z0[1] - z0[2] - z0[3];
        const float y01 = z1[0] + z1[1] + z1[2];
        const float y11 = z1[1] - z1[2] - z1[3];
        const int oc = gidx * OCB + ocl;
        const float bv = __ldg(bias + oc);
        float* op = out + s_ob[t] + oc * OHW;
        op[0] = y00 + bv;
        if (om & 4) op[1] = y01 + bv;
        if (om & 2) {
            op[OW] = y10 + bv;
            if (om & 4) op[OW + 1] = y11 + bv;
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["wino_weight_prep", "conv_wino_kernel"])
VK = int(kernels.constant("VK"))
NTHREADS = 512
BT = 64
OCB = 32
TSR = int(kernels.constant("TSR"))
CIN = 3
SMEM_BYTES = 4 * (BT * TSR + 16 * 16 * VK + 2 * 16 * 16 * OCB)


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
        if (c.in_channels != CIN or tuple(c.kernel_size) != (11, 11)
                or tuple(c.stride) != (4, 4) or tuple(c.padding) != (2, 2)
                or tuple(c.dilation) != (1, 1) or c.groups != 1 or c.bias is None
                or c.padding_mode != "zeros" or c.out_channels % OCB != 0):
            raise ValueError("conv2d: this kernel supports Conv2d(3, 32k, 11, stride=4, "
                             "padding=2) with bias")
        if x.shape[1] != CIN:
            raise ValueError(f"conv2d: x must have {CIN} channels")
        w = c.weight.detach()
        b = c.bias.detach()
        if w.dtype != torch.float32 or b.dtype != torch.float32 or not w.is_cuda:
            raise ValueError("conv2d: weights must be float32 CUDA tensors")
        nb, ch, h, wd = x.shape
        if wd % 4 != 0:
            raise ValueError("conv2d: input width must be a multiple of 4 (16-byte staging)")
        x = x.contiguous()
        if x.data_ptr() % 16 != 0:
            x = x.clone()
        w = w.contiguous()
        b = b.contiguous()
        oc = w.shape[0]
        oh = (h + 4 - 11) // 4 + 1
        ow = (wd + 4 - 11) // 4 + 1
        if oh <= 0 or ow <= 0:
            raise ValueError("conv2d: kernel larger than the padded input")
        out = torch.empty((nb, oc, oh, ow), device=x.device, dtype=torch.float32)
        if out.numel() == 0:
            return out
        if x.numel() >= 2 ** 31 - 1 or out.numel() >= 2 ** 31 - 1:
            raise ValueError("conv2d: tensors too large for 32-bit indexing")
        ty, tx = (oh + 1) // 2, (ow + 1) // 2
        ntiles = nb * ty * tx

        ug = torch.empty(oc * CIN * 16 * 16, device=x.device, dtype=torch.float32)
        nprep = oc * CIN * 16
        kernels.wino_weight_prep.launch((nprep + 255) // 256, 256, w, ug, oc)

        grid = ((ntiles + BT - 1) // BT) * (oc // OCB)
        kernels.conv_wino_kernel.launch(grid, NTHREADS, x, ug, b, out, h, wd, oc, oh, ow, ty,
                                        tx, ntiles, shared_mem=SMEM_BYTES)
        return out
