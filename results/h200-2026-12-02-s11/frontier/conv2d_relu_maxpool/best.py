# evokernel: best kernel of run conv2d_relu_maxpool for problem conv2d_relu_maxpool
# candidate 51479d362aac6868, generation 2, operator idea; speedup 2.000x over eager (1.2380 ms -> 0.6190 ms, 3159% of floor)
# idea: [compute] Cut the multiply count with a polyphase (space-to-depth) rewrite plus Winograd F(2x2,3x3). A cheap prepass rearranges the padded input into 48 phase planes (c, ih%4, iw%4) of 57x57, and __init__ zero-pads the 11x11 weights to 12x12 and reshapes them to a 3x3 stride-1 kernel over 48 channels; the weights are pre-transformed once to U = G g G^T ([16][48][96]). The main kernel then transforms 4x4 input tiles (B^T d B, coefficients only 0/±1) for 28x28 output tiles and runs 16 batched FP32 GEMMs (tiles x 48 -> 96) with 8x8 register tiles. The inverse transform A^T m A (0/±1 only) adds bias and ReLU, which gives about 1.9x fewer FMAs than the direct 363-term dot product. The transform has only exact small coefficients and the sums stay in FP32, so the error should stay within a few times direct FP32, well inside the 16x bound.
# check it: evokernel check conv2d_relu_maxpool results/h200-2026-12-02-s11/frontier/conv2d_relu_maxpool/best.py
"""Conv2d(3,96,11,s4,p2)+bias -> ReLU -> MaxPool(3,2), NVRTC form, polyphase + Winograd F(2x2,3x3).

1. phase_split: x (zero padded by 2) -> P[n][c*16 + (ih%4)*4 + iw%4][58][58], so the 11x11 / stride 4
   convolution becomes a 3x3 / stride 1 convolution over 48 channels (weights zero padded to 12x12).
2. wino_weights: U[xi][k][oc] = (G g G^T)[xi] for each 3x3 phase kernel g (computed in double).
3. wino_conv_relu_pool: each 192-thread block owns 32 consecutive 2x2 output tiles (linear over
   images) and all 96 output channels. For each of the 16 Winograd components it builds
   V[xi][48][32] = B^T d B (0/+-1 only) from P into shared memory, copies U[xi] with cp.async
   (double buffered), runs a 32x96x48 FP32 GEMM with a 4-tile x 4-channel register tile and folds the
   component straight into the thread's 2x2 outputs with the exact A^T (.) A coefficients (0/+-1).
   The epilogue adds bias, applies ReLU, stores per-tile partial window maxima in shared memory and
   writes each 3x3/2 pooled value: a plain store when all four contributing tiles are in the block,
   an atomicMax on the (non-negative) float bits otherwise (output zero-initialised).
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int CIN = 3;
constexpr int HIN = 224;
constexpr int WIN = 224;
constexpr int OCN = 96;
constexpr int KS = 11;
constexpr int PAD = 2;
constexpr int KCH = CIN * 16;          // 48 phase channels (c, ih%4, iw%4)
constexpr int TDIM = 28;               // 2x2 output tiles per dimension (conv 55 -> 56)
constexpr int TPI = TDIM * TDIM;       // 784 tiles per image
constexpr int PD = 2 * TDIM + 2;       // 58: phase-plane side (57 used + 1 zero row/col)
constexpr int PLANE = PD * PD;         // 3364
constexpr int POOLD = 27;              // pooled output side

constexpr int TPB = 32;                // tiles per block (GEMM M)
constexpr int NTHR = 192;              // 24 oc-groups x 8 tile-groups, 4x4 register tile each
constexpr int MINB = 2;                // tune: 1 2 3
constexpr int PRE_BLOCK = 256;         // tune: 128 256 512
constexpr int WGT_BLOCK = 128;

constexpr int USZ = KCH * OCN;                   // 4608 floats per component
constexpr int VSZ = KCH * TPB;                   // 1536 floats per component
constexpr int SMEM_FLOATS = 2 * VSZ + 2 * USZ;   // 12288 floats = 48 KiB
constexpr int KPT = KCH * TPB / NTHR;            // 8 V entries built per thread per component

static_assert(NTHR == 6 * TPB, "thread layout");
static_assert(KPT * NTHR == KCH * TPB, "V build split");
static_assert(4 * OCN * TPB <= SMEM_FLOATS, "epilogue staging must fit");
static_assert((USZ / 4) % NTHR == 0, "U copy split");
static_assert(TPB + TDIM + 1 <= 64, "pool anchors per block");
static_assert(NTHR % 64 == 0 && OCN % (NTHR / 64) == 0, "pool split");

// ---------------------------------------------------------------------------------------------
// P[n][c*16 + r*4 + s][i][j] = x[n][c][4i + r - 2][4j + s - 2] (0 outside), i, j < 58.
// One thread per (n, c, r, i, j): two float2 loads, four coalesced plane stores.
extern "C" __global__ void __launch_bounds__(PRE_BLOCK)
phase_split(const float* __restrict__ x, float* __restrict__ P, int N) {
    const int total = N * (CIN * 4 * PLANE);
    const int idx = blockIdx.x * PRE_BLOCK + threadIdx.x;
    if (idx >= total) return;
    const int j = idx % PD;
    int t = idx / PD;
    const int i = t % PD;
    t /= PD;
    const int r = t & 3;
    t >>= 2;
    const int c = t % CIN;
    const int n = t / CIN;
    const int row = 4 * i + r - PAD;
    float v0 = 0.f, v1 = 0.f, v2 = 0.f, v3 = 0.f;
    if (row >= 0 && row < HIN) {
        const float* xr = x + ((long long)(n * CIN + c) * HIN + row) * WIN;
        if (j >= 1 && 4 * j <= WIN) {            // cols 4j-2, 4j-1
            const float2 a = __ldg(reinterpret_cast<const float2*>(xr + 4 * j - 2));
            v0 = a.x; v1 = a.y;
        }
        if (4 * j + 2 <= WIN) {                  // cols 4j, 4j+1
            const float2 b = __ldg(reinterpret_cast<const float2*>(xr + 4 * j));
            v2 = b.x; v3 = b.y;
        }
    }
    float* dst = P + ((long long)(n * KCH + c * 16 + r * 4) * PD + i) * PD + j;
    dst[0] = v0;
    dst[PLANE] = v1;
    dst[2 * PLANE] = v2;
    dst[3 * PLANE] = v3;
}

// ---------------------------------------------------------------------------------------------
// U[(al*4+be)][k][oc] = (G g G^T)[al][be], g[a][b] = w[oc][c][4a+r][4b+s] (0 if the tap is >= 11).
extern "C" __global__ void __launch_bounds__(WGT_BLOCK)
wino_weights(const float* __restrict__ w, float* __restrict__ U) {
    const int idx = blockIdx.x * WGT_BLOCK + threadIdx.x;
    if (idx >= KCH * OCN) return;
    const int oc = idx % OCN, k = idx / OCN;
    const int c = k >> 4, r = (k >> 2) & 3, s = k & 3;
    double g[3][3];
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int b = 0; b < 3; ++b) {
            const int kh = 4 * a + r, kw = 4 * b + s;
            g[a][b] = (kh < KS && kw < KS) ? (double)w[((oc * CIN + c) * KS + kh) * KS + kw] : 0.0;
        }
    double t[4][3];
#pragma unroll
    for (int b = 0; b < 3; ++b) {
        t[0][b] = g[0][b];
        t[1][b] = 0.5 * (g[0][b] + g[1][b] + g[2][b]);
        t[2][b] = 0.5 * (g[0][b] - g[1][b] + g[2][b]);
        t[3][b] = g[2][b];
    }
#pragma unroll
    for (int al = 0; al < 4; ++al) {
        float* d = U + ((long long)(al * 4) * KCH + k) * OCN + oc;
        d[0] = (float)t[al][0];
        d[USZ] = (float)(0.5 * (t[al][0] + t[al][1] + t[al][2]));
        d[2 * USZ] = (float)(0.5 * (t[al][0] - t[al][1] + t[al][2]));
        d[3 * USZ] = (float)t[al][2];
    }
}

// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm volatile("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}"
                 : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(smem_u32(dst)), "l"(src)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ float relu_f(float v) { return v < 0.f ? 0.f : v; }   // NaN passes
__device__ __forceinline__ float pmax(float a, float b) { return (b > a || isnan(b)) ? b : a; }

// U[xi] (48 x 96 floats) -> shared, 16-byte cp.async chunks
__device__ __forceinline__ void load_u(float* dst, const float* __restrict__ src, int tid) {
#pragma unroll
    for (int c = 0; c < USZ / 4 / NTHR; ++c) {
        const int i = (tid + c * NTHR) * 4;
        cp_async16(dst + i, src + i);
    }
}

// Loads the 4 phase values that component xi = (al, be) of B^T d B needs, for the thread's tile
// and its KPT channels (kb + 6j). B^T rows: 0: d0-d2, 1: d1+d2, 2: d2-d1, 3: d1-d3.
__device__ __forceinline__ void fetch_d(const float* __restrict__ pb, int xi, float (&r)[KPT][4],
                                        float& sa, float& sb) {
    const int A = xi >> 2, B = xi & 3;
    const int up = (A == 0) ? 0 : ((A == 2) ? 2 : 1);
    const int um = (A <= 1) ? 2 : ((A == 2) ? 1 : 3);
    const int vp = (B == 0) ? 0 : ((B == 2) ? 2 : 1);
    const int vm = (B <= 1) ? 2 : ((B == 2) ? 1 : 3);
    sa = (A == 1) ? 1.f : -1.f;
    sb = (B == 1) ? 1.f : -1.f;
    const int opp = up * PD + vp, opm = up * PD + vm, omp = um * PD + vp, omm = um * PD + vm;
#pragma unroll
    for (int j = 0; j < KPT; ++j) {
        const float* s = pb + (long long)j * (NTHR / TPB) * PLANE;
        r[j][0] = __ldg(s + opp);
        r[j][1] = __ldg(s + opm);
        r[j][2] = __ldg(s + omp);
        r[j][3] = __ldg(s + omm);
    }
}

// V = (d[up][vp] + sb d[up][vm]) + sa (d[um][vp] + sb d[um][vm])   (signs are exact +-1)
__device__ __forceinline__ void store_v(float* vw, const float (&r)[KPT][4], float sa, float sb) {
#pragma unroll
    for (int j = 0; j < KPT; ++j) {
        const float t1 = fmaf(sb, r[j][1], r[j][0]);
        const float t2 = fmaf(sb, r[j][3], r[j][2]);
        vw[j * NTHR] = fmaf(sa, t2, t1);
    }
}

// m[ti*4+oi] += sum_k V[k][tile ti] * U[k][oc oi]
__device__ __forceinline__ void gemm_xi(const float* va, const float* ub, float (&m)[16]) {
#pragma unroll 8
    for (int k = 0; k < KCH; ++k) {
        const float4 a = *reinterpret_cast<const float4*>(va + k * TPB);
        const float4 b = *reinterpret_cast<const float4*>(ub + k * OCN);
        const float av[4] = {a.x, a.y, a.z, a.w};
        const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                m[i * 4 + j] = fmaf(av[i], bv[j], m[i * 4 + j]);
    }
}

// Y[i*2+j] += A^T[i][A] * A^T[j][B] * M,  A^T = [[1,1,1,0],[0,1,-1,-1]]  (exact adds/subs)
template <int A, int B>
__device__ __forceinline__ void y_upd(float (&Y)[4][16], const float (&m)[16]) {
    constexpr int a0 = (A < 3) ? 1 : 0;
    constexpr int a1 = (A == 0) ? 0 : ((A == 1) ? 1 : -1);
    constexpr int b0 = (B < 3) ? 1 : 0;
    constexpr int b1 = (B == 0) ? 0 : ((B == 1) ? 1 : -1);
    constexpr int c00 = a0 * b0, c01 = a0 * b1, c10 = a1 * b0, c11 = a1 * b1;
#pragma unroll
    for (int p = 0; p < 16; ++p) {
        if (c00 > 0) Y[0][p] += m[p]; else if (c00 < 0) Y[0][p] -= m[p];
        if (c01 > 0) Y[1][p] += m[p]; else if (c01 < 0) Y[1][p] -= m[p];
        if (c10 > 0) Y[2][p] += m[p]; else if (c10 < 0) Y[2][p] -= m[p];
        if (c11 > 0) Y[3][p] += m[p]; else if (c11 < 0) Y[3][p] -= m[p];
    }
}

#define YU_CASE(A, B) case ((A) * 4 + (B)): y_upd<A, B>(Y, m); break;

extern "C" __global__ void __launch_bounds__(NTHR, MINB)
wino_conv_relu_pool(const float* __restrict__ P, const float* __restrict__ U,
                    const float* __restrict__ bias, float* __restrict__ out, int N) {
    __shared__ __align__(16) float smem[SMEM_FLOATS];
    float* const Vs = smem;              // [2][48][TPB]
    float* const Us = smem + 2 * VSZ;    // [2][48][96]
    const int tid = threadIdx.x;
    const int ntiles = N * TPI;
    const int g0 = blockIdx.x * TPB;

    // ---- V-build role: fixed tile bt, channels kb + 6j ----
    const int bt = tid % TPB;
    const int kb = tid / TPB;
    int gb = g0 + bt;
    if (gb > ntiles - 1) gb = ntiles - 1;          // tail: duplicate a real tile, never used
    const int nb = gb / TPI;
    const int rb = gb - nb * TPI;
    const int tyb = rb / TDIM, txb = rb - tyb * TDIM;
    const float* const pb = P + ((long long)nb * KCH + kb) * PLANE + (2 * tyb) * PD + 2 * txb;
    float* const vw = Vs + tid;                    // = Vs + kb*TPB + bt

    // ---- GEMM role: 4 tiles x 4 output channels ----
    const int lane = tid & 31, warp = tid >> 5;
    const int ocg = (warp % 3) * 8 + (lane & 7);   // 0..23
    const int tg = (warp / 3) * 4 + (lane >> 3);   // 0..7
    const float* const va0 = Vs + tg * 4;
    const float* const ub0 = Us + ocg * 4;

    float r[KPT][4];
    float sa, sb;
    load_u(Us, U, tid);
    cp_async_commit();
    fetch_d(pb, 0, r, sa, sb);
    store_v(vw, r, sa, sb);
    cp_async_wait_all();
    __syncthreads();

    float Y[4][16];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int p = 0; p < 16; ++p) Y[q][p] = 0.f;

#pragma unroll 1
    for (int xi = 0; xi < 16; ++xi) {
        const int cur = xi & 1;
        const int nxt = cur ^ 1;
        const bool more = xi < 15;
        if (more) {
            load_u(Us + nxt * USZ, U + (xi + 1) * USZ, tid);
            cp_async_commit();
        }
        fetch_d(pb, (xi + 1) & 15, r, sa, sb);     // loads in flight during the GEMM

        float m[16];
#pragma unroll
        for (int p = 0; p < 16; ++p) m[p] = 0.f;
        gemm_xi(va0 + cur * VSZ, ub0 + cur * USZ, m);

        switch (xi) {
            YU_CASE(0, 0) YU_CASE(0, 1) YU_CASE(0, 2) YU_CASE(0, 3)
            YU_CASE(1, 0) YU_CASE(1, 1) YU_CASE(1, 2) YU_CASE(1, 3)
            YU_CASE(2, 0) YU_CASE(2, 1) YU_CASE(2, 2) YU_CASE(2, 3)
            YU_CASE(3, 0) YU_CASE(3, 1) YU_CASE(3, 2) YU_CASE(3, 3)
            default: break;
        }

        if (more) store_v(vw + nxt * VSZ, r, sa, sb);
        cp_async_wait_all();
        __syncthreads();
    }

    // ---- epilogue: bias + ReLU, per-tile partial window maxima -> smem [4][96][TPB] ----
    {
        const int oc0 = ocg * 4;
        float bv[4];
#pragma unroll
        for (int oi = 0; oi < 4; ++oi) bv[oi] = __ldg(bias + oc0 + oi);
#pragma unroll
        for (int ti = 0; ti < 4; ++ti)
#pragma unroll
            for (int oi = 0; oi < 4; ++oi) {
                const int p = ti * 4 + oi;
                const float y00 = relu_f(Y[0][p] + bv[oi]);
                const float y01 = relu_f(Y[1][p] + bv[oi]);
                const float y10 = relu_f(Y[2][p] + bv[oi]);
                const float y11 = relu_f(Y[3][p] + bv[oi]);
                Y[0][p] = pmax(pmax(y00, y01), pmax(y10, y11));   // whole tile (anchor's own)
                Y[1][p] = pmax(y00, y01);                         // top row (tile below anchor)
                Y[2][p] = pmax(y00, y10);                         // left col (tile right of anchor)
                Y[3][p] = y00;                                    // corner (diagonal tile)
            }
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int oi = 0; oi < 4; ++oi)
                *reinterpret_cast<float4*>(smem + (q * OCN + oc0 + oi) * TPB + tg * 4) =
                    make_float4(Y[q][oi], Y[q][4 + oi], Y[q][8 + oi], Y[q][12 + oi]);
    }
    __syncthreads();

    // ---- pooling: anchor tile a=(n,p,q) covers tiles a, a+1, a+28, a+29 ----
    {
        constexpr int OCSTEP = NTHR / 64;
        const int jj = tid & 63;
        const int ocb = tid >> 6;
        const int a = g0 - (TDIM + 1) + jj;
        if (jj < TPB + TDIM + 1 && a >= 0 && a < ntiles) {
            const int n = a / TPI;
            const int ra = a - n * TPI;
            const int ty = ra / TDIM, tx = ra - ty * TDIM;
            if (ty < POOLD && tx < POOLD) {
                const int l = a - g0;
                const bool i0 = (unsigned)l < (unsigned)TPB;
                const bool i1 = (unsigned)(l + TDIM) < (unsigned)TPB;
                const bool i2 = (unsigned)(l + 1) < (unsigned)TPB;
                const bool i3 = (unsigned)(l + TDIM + 1) < (unsigned)TPB;
                const bool full = i0 && i1 && i2 && i3;
                float* dst = out + (((long long)n * OCN + ocb) * POOLD + ty) * POOLD + tx;
#pragma unroll 4
                for (int oc = ocb; oc < OCN; oc += OCSTEP) {
                    const int base = oc * TPB + l;
                    float mx = -__int_as_float(0x7f800000);
                    if (i0) mx = pmax(mx, smem[base]);
                    if (i1) mx = pmax(mx, smem[OCN * TPB + base + TDIM]);
                    if (i2) mx = pmax(mx, smem[2 * OCN * TPB + base + 1]);
                    if (i3) mx = pmax(mx, smem[3 * OCN * TPB + base + TDIM + 1]);
                    if (full) {
                        *dst = mx;
                    } else {
                        if (isnan(mx)) mx = __int_as_float(0x7fffffff);
                        atomicMax(reinterpret_cast<int*>(dst), __float_as_int(mx));  // values >= 0
                    }
                    dst += (long long)OCSTEP * POOLD * POOLD;
                }
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["phase_split", "wino_weights", "wino_conv_relu_pool"])
TPB = kernels.constant("TPB")
NTHR = kernels.constant("NTHR")
PRE_BLOCK = kernels.constant("PRE_BLOCK")
WGT_BLOCK = kernels.constant("WGT_BLOCK")

_CIN, _H, _W, _OC, _KS = 3, 224, 224, 96, 11
_PD = 58
_TPI = 28 * 28
_POOLD = 27


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
        if (_pair(p.kernel_size) != (3, 3) or _pair(p.stride) != (2, 2)
                or _pair(p.padding) != (0, 0) or _pair(p.dilation) != (1, 1) or p.ceil_mode):
            raise ValueError("this kernel supports MaxPool2d(3, stride=2) only")
        if (c.in_channels != _CIN or c.out_channels != _OC or _pair(c.kernel_size) != (_KS, _KS)
                or _pair(c.stride) != (4, 4) or _pair(c.padding) != (2, 2)
                or _pair(c.dilation) != (1, 1) or c.groups != 1 or c.bias is None
                or c.padding_mode != "zeros"):
            raise ValueError("this kernel supports Conv2d(3, 96, 11, stride=4, padding=2) only")
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4
                and tuple(x.shape[1:]) == (_CIN, _H, _W)):
            raise ValueError("conv2d_relu_maxpool: x must be a float32 CUDA tensor of shape "
                             "(N, 3, 224, 224)")
        if c.weight.dtype != torch.float32 or c.bias.dtype != torch.float32 or not c.weight.is_cuda:
            raise ValueError("conv2d_relu_maxpool: float32 CUDA parameters required")
        nb = x.shape[0]
        if nb * _CIN * 4 * _PD * _PD >= 2 ** 31:
            raise ValueError("conv2d_relu_maxpool: batch too large for 32-bit indexing")
        out = torch.zeros((nb, _OC, _POOLD, _POOLD), device=x.device, dtype=torch.float32)
        if nb == 0:
            return out
        x = x.contiguous()
        if x.data_ptr() % 16 != 0:
            x = x.clone()
        w = c.weight.detach().contiguous()
        b = c.bias.detach().contiguous()

        u = torch.empty((16, 48, _OC), device=x.device, dtype=torch.float32)
        kernels.wino_weights.launch((48 * _OC + WGT_BLOCK - 1) // WGT_BLOCK, WGT_BLOCK, w, u)

        ph = torch.empty((nb, 48, _PD, _PD), device=x.device, dtype=torch.float32)
        total = nb * _CIN * 4 * _PD * _PD
        kernels.phase_split.launch((total + PRE_BLOCK - 1) // PRE_BLOCK, PRE_BLOCK, x, ph, nb)

        ntiles = nb * _TPI
        kernels.wino_conv_relu_pool.launch((ntiles + TPB - 1) // TPB, NTHR, ph, u, b, out, nb)
        return out
