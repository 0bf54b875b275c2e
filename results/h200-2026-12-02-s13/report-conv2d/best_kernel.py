# evokernel: best kernel of run conv2d for problem conv2d
# candidate 9829c80bf7102c1f, generation 4, operator idea; speedup 2.565x over eager (1.0694 ms -> 0.4169 ms, 1063% of floor)
# idea: [compute] Move from Winograd F(2x2,3x3) to F(4x4,3x3) on the same 48-channel polyphase 3x3 problem. That is 36 products per 16 outputs instead of 16 per 4, so about 1.78x fewer FMAs and LDS per output, and the raw staging (24x24 per 16 outputs vs 16x16 per 4), the input transform and the M round-trip per output shrink by the same factor. Use the standard Lavin points 0,+-1,+-2. Do the weight transform G g G^T in float64 and round once; do B^T d B with fmaf on the exact integer coefficients; A^T has power-of-two entries only. Tiles: 14x14 per image (19600 in all). Block: 32 tiles x 32 oc, 384 threads. Warp w owns xi = w, w+12, w+24, and each lane keeps a 4-tile x 8-oc FP32 register tile per xi (96 accumulators; per k, 1 V LDS.128 + 2 U LDS.128 for 32 FMA). K goes in half-channel chunks of 8 phases (p in {2h,2h+1}) so smem fits: raw 32x580 floats, V[36][8][36], U[36][8][32] double-buffered, about 187 KB. M[36][32][32] goes through aliased smem for the A^T M A epilogue.
# check it: evokernel check conv2d results/h200-2026-12-02-s13/report-conv2d/best_kernel.py
"""Polyphase + Winograd F(4x4,3x3) convolution for AlexNet conv1 (NVRTC form).

Stride 4 with an 11x11 kernel (padded to 12x12) is a stride-1 3x3 convolution over 48 phase
channels (3 input channels x 4x4 phases). Output tiles are 4x4 (14x14 tiles per image); a tile
reads a 6x6 patch of every phase channel, i.e. a 24x24 raw input patch.

  * wino43_weight_prep: U = G g G^T (6x6) in float64, rounded once, stored as
    U[oc/32][c][p][xi][q][oc%32] so that one K chunk (c, p) is a contiguous 36x4x32 slice.
  * conv_wino43_kernel: a block takes 32 consecutive tiles x 32 output channels, 384 threads.
    K = 48 is streamed in 12 chunks (c, p) of 4 phase channels (q = 0..3). Per chunk the
    6 raw rows (4r+p) x 28 columns of every tile come in with 16-byte zero-filling cp.async
    (input columns 16tx-4 .. 16tx+23, all float4 chunks lie fully inside or outside the image).
    Raw, V and U are double-buffered: in iteration ch a thread issues raw(ch+2) and U(ch+1),
    runs the GEMM of chunk ch, transforms raw(ch+1) into the other V buffer, waits for its copies
    and meets the others at the chunk's single barrier.
  * input transform V = B^T d B with fmaf on the exact integer coefficients; thread (part,
    tile, q) computes two B^T rows ({0,5}, {1,2} or {3,4}: equal cost) and their 12 V values.
  * warp w computes M[xi][32 tiles][32 oc] for xi = w, w+12, w+24, each lane a 4-tile x 8-oc
    FP32-FMA register tile per xi (96 accumulators; per k: 1 V LDS.128 + 2 U LDS.128 -> 32 FMA).
  * M goes through aliased shared memory; Y = A^T M A (power-of-two coefficients), bias, store.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int CIN = 3;          // input channels (fixed by the polyphase layout)
constexpr int KS = 11;          // kernel size (zero-padded to 12 = 3 taps x 4 phases)
constexpr int NTHREADS = 384;   // 12 warps: warp w owns Winograd elements xi = w, w+12, w+24
constexpr int NWARPS = NTHREADS / 32;
constexpr int BT = 32;          // 4x4 output tiles per block (GEMM M)
constexpr int OCB = 32;         // output channels per block (GEMM N)
constexpr int NXI = 36;         // 6x6 Winograd elements
constexpr int KC = 4;           // phase channels per chunk (row phase p fixed, q = 0..3)
constexpr int NCH = CIN * 4;    // 12 chunks (c, p)
constexpr int RROW = 28;        // raw row: 7 float4 = input columns 16tx-4 .. 16tx+23
constexpr int RROWS = 6;        // raw rows per tile and chunk: 16ty-2 + 4r + p, r = 0..5
constexpr int TSR = 196;        // tune: 196 228
constexpr int VT = 40;          // tune: 40 72
constexpr int RAW_FLOATS = BT * TSR;
constexpr int VS_FLOATS = NXI * KC * VT;
constexpr int US_FLOATS = NXI * KC * OCB;
constexpr int MS_FLOATS = NXI * OCB * BT;
constexpr int RAW_CP = BT * RROWS * (RROW / 4);               // 16-byte copies per chunk
constexpr int RAW_IT = (RAW_CP + NTHREADS - 1) / NTHREADS;
constexpr int US_IT = US_FLOATS / 4 / NTHREADS;

static_assert(BT == 32 && OCB == 32 && NTHREADS == 384, "thread roles: 32 tiles x 32 oc x 12 warps");
static_assert(3 * NWARPS == NXI, "three Winograd elements per warp");
static_assert(TSR % 32 == 4 && TSR >= RROWS * RROW, "raw tile stride: conflict-free transform reads");
static_assert(VT % 32 == 8 && VT >= BT, "V row stride: conflict-free transform writes");
static_assert((US_FLOATS / 4) % NTHREADS == 0, "U copy split");

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm volatile("{\n\t.reg .u64 sa64;\n\tcvta.to.shared.u64 sa64, %1;\n\tcvt.u32.u64 %0, sa64;\n\t}\n"
                 : "=r"(r) : "l"(p));
    return r;
}
__device__ __forceinline__ void cp_async16z(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
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

// o = G a  (F(4,3) filter transform, float64)
__device__ __forceinline__ void g6(double a0, double a1, double a2, double (&o)[6]) {
    o[0] = 0.25 * a0;
    o[1] = -(a0 + a1 + a2) / 6.0;
    o[2] = -(a0 - a1 + a2) / 6.0;
    o[3] = a0 / 24.0 + a1 / 12.0 + a2 / 6.0;
    o[4] = a0 / 24.0 - a1 / 12.0 + a2 / 6.0;
    o[5] = a2;
}

// v = B^T e  (F(4,3) input transform, exact integer coefficients)
__device__ __forceinline__ void bt6(const float (&e)[6], float (&v)[6]) {
    v[0] = fmaf(4.0f, e[0], fmaf(-5.0f, e[2], e[4]));
    v[1] = fmaf(-4.0f, e[1] + e[2], e[3] + e[4]);
    v[2] = fmaf(4.0f, e[1] - e[2], e[4] - e[3]);
    const float f = e[3] - e[1], h = e[4] - e[2];
    v[3] = fmaf(2.0f, f, h);
    v[4] = fmaf(-2.0f, f, h);
    v[5] = fmaf(4.0f, e[1], fmaf(-5.0f, e[3], e[5]));
}

// Weight transform: for every (oc, c, phase p, q) take the 3x3 sub-kernel
// g[a][b] = w[oc][c][4a+p][4b+q] (0 outside 11x11) and write U = G g G^T (6x6) to
// ug[((oc/32)*CIN + c)*4 + p][xi][q][oc%32].
extern "C" __global__ void wino43_weight_prep(const float* __restrict__ w, float* __restrict__ ug,
                                              int OC) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= OC * CIN * 16) return;
    const int q = idx & 3;
    const int p = (idx >> 2) & 3;
    const int c = (idx >> 4) % CIN;
    const int oc = (idx >> 4) / CIN;
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
    double t[3][6];   // t[b][i] = (G g)[i][b]
#pragma unroll
    for (int b = 0; b < 3; ++b) g6(g[0][b], g[1][b], g[2][b], t[b]);
    float* dst = ug + (long long)(((oc / OCB) * CIN + c) * 4 + p) * US_FLOATS + q * OCB + (oc % OCB);
#pragma unroll
    for (int i = 0; i < 6; ++i) {
        double u[6];
        g6(t[0][i], t[1][i], t[2][i], u);
#pragma unroll
        for (int j = 0; j < 6; ++j) dst[(i * 6 + j) * (KC * OCB)] = (float)u[j];
    }
}

// Issues the raw copies of chunk (c, p): coff = c*H*W + p*W, zero-filled outside the image.
__device__ __forceinline__ void stage_raw(const float* __restrict__ x, const int (&cgo)[RAW_IT],
                                          const int (&cvb)[RAW_IT], const unsigned (&cdo)[RAW_IT],
                                          int coff, int p, unsigned dst_base, int tid) {
#pragma unroll
    for (int m = 0; m < RAW_IT; ++m) {
        if ((m + 1) * NTHREADS <= RAW_CP || tid + m * NTHREADS < RAW_CP) {
            const bool ok = ((cvb[m] >> p) & 1) != 0;
            const float* src = ok ? (x + (cgo[m] + coff)) : x;
            cp_async16z(dst_base + cdo[m], src, ok ? 16 : 0);
        }
    }
}

// Issues the copies of one chunk's U slice [36][4][32].
__device__ __forceinline__ void stage_u(const float* __restrict__ usrc, unsigned dst_base,
                                        int tid) {
#pragma unroll
    for (int m = 0; m < US_IT; ++m) {
        const int e = tid + m * NTHREADS;
        cp_async16(dst_base + (unsigned)(e * 16), usrc + e * 4);
    }
}

// Input transform, part PART of one (tile, q): B^T rows {0,5}, {1,2} or {3,4} of d, then B.
// rp: raw element (r, s) at rp[r*RROW + 4*s];  vp: V element xi at vp[xi*KC*VT].
template <int PART>
__device__ __forceinline__ void input_transform(const float* __restrict__ rp,
                                                float* __restrict__ vp) {
    constexpr int I0 = (PART == 0) ? 0 : ((PART == 1) ? 1 : 3);
    constexpr int I1 = (PART == 0) ? 5 : ((PART == 1) ? 2 : 4);
    float e0[6], e1[6];
#pragma unroll
    for (int s = 0; s < 6; ++s) {
        const float* cp = rp + 4 * s;
        if (PART == 0) {
            const float d0 = cp[0 * RROW], d1 = cp[1 * RROW], d2 = cp[2 * RROW];
            const float d3 = cp[3 * RROW], d4 = cp[4 * RROW], d5 = cp[5 * RROW];
            e0[s] = fmaf(4.0f, d0, fmaf(-5.0f, d2, d4));
            e1[s] = fmaf(4.0f, d1, fmaf(-5.0f, d3, d5));
        } else if (PART == 1) {
            const float d1 = cp[1 * RROW], d2 = cp[2 * RROW];
            const float d3 = cp[3 * RROW], d4 = cp[4 * RROW];
            e0[s] = fmaf(-4.0f, d1 + d2, d3 + d4);
            e1[s] = fmaf(4.0f, d1 - d2, d4 - d3);
        } else {
            const float d1 = cp[1 * RROW], d2 = cp[2 * RROW];
            const float d3 = cp[3 * RROW], d4 = cp[4 * RROW];
            const float f = d3 - d1, h = d4 - d2;
            e0[s] = fmaf(2.0f, f, h);
            e1[s] = fmaf(-2.0f, f, h);
        }
    }
    float v0[6], v1[6];
    bt6(e0, v0);
    bt6(e1, v1);
#pragma unroll
    for (int j = 0; j < 6; ++j) {
        vp[(I0 * 6 + j) * (KC * VT)] = v0[j];
        vp[(I1 * 6 + j) * (KC * VT)] = v1[j];
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1)
conv_wino43_kernel(const float* __restrict__ x, const float* __restrict__ ug,
                   const float* __restrict__ bias, float* __restrict__ out,
                   int H, int W, int OC, int OH, int OW, int TY, int TX, int ntiles) {
    extern __shared__ __align__(16) float smem[];
    __shared__ int s_xb[BT];   // input offset of (n, c=0, row 16ty-2, col 16tx-4)
    __shared__ int s_rm[BT];   // bit R: raw row 16ty-2+R inside the image (R = 0..23)
    __shared__ int s_cm[BT];   // bit j: float4 column chunk 16tx-4+4j inside the image
    __shared__ int s_ob[BT];   // output offset of (n, oc=0, 4ty, 4tx)
    __shared__ int s_on[BT];   // valid rows | valid cols << 4 (0: no tile)

    float* RAWS = smem;                        // [2][BT][TSR]
    float* VS = smem + 2 * RAW_FLOATS;         // [2][36][KC][VT]
    float* US = VS + 2 * VS_FLOATS;            // [2][36][KC][OCB]

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int G = OC / OCB;
    const int gidx = blockIdx.x % G;
    const int tile0 = (blockIdx.x / G) * BT;
    const int HW = H * W;
    const int TT = TY * TX;

    if (tid < BT) {
        const int g = tile0 + tid;
        int xb = 0, rm = 0, cm = 0, ob = 0, on = 0;
        if (g < ntiles) {
            const int n = g / TT;
            const int rem = g - n * TT;
            const int ty = rem / TX;
            const int tx = rem - ty * TX;
            const int row0 = 16 * ty - 2, col0 = 16 * tx - 4;
            xb = n * CIN * HW + row0 * W + col0;
            for (int R = 0; R < 4 * RROWS; ++R) {
                const int r = row0 + R;
                if (r >= 0 && r < H) rm |= 1 << R;
            }
            for (int j = 0; j < RROW / 4; ++j) {
                const int cc = col0 + 4 * j;
                if (cc >= 0 && cc + 4 <= W) cm |= 1 << j;
            }
            const int oh0 = 4 * ty, ow0 = 4 * tx;
            ob = n * OC * OH * OW + oh0 * OW + ow0;
            const int nr = min(4, OH - oh0), nc = min(4, OW - ow0);
            on = nr | (nc << 4);
        }
        s_xb[tid] = xb;
        s_rm[tid] = rm;
        s_cm[tid] = cm;
        s_ob[tid] = ob;
        s_on[tid] = on;
    }
    __syncthreads();

    // this thread's raw copy slots (the same for every chunk up to c*H*W + p*W)
    int cgo[RAW_IT], cvb[RAW_IT];
    unsigned cdo[RAW_IT];
#pragma unroll
    for (int m = 0; m < RAW_IT; ++m) {
        const int e = tid + m * NTHREADS;
        cgo[m] = 0;
        cvb[m] = 0;
        cdo[m] = 0u;
        if (e < RAW_CP) {
            const int t = e / (RROWS * (RROW / 4));
            const int rem = e - t * (RROWS * (RROW / 4));
            const int r = rem / (RROW / 4);
            const int jc = rem - r * (RROW / 4);
            cgo[m] = s_xb[t] + 4 * r * W + 4 * jc;
            cdo[m] = (unsigned)((t * TSR + r * RROW + 4 * jc) * 4);
            cvb[m] = ((s_cm[t] >> jc) & 1) ? ((s_rm[t] >> (4 * r)) & 15) : 0;
        }
    }
    const unsigned raw_u = smem_u32(RAWS);
    const unsigned us_u = smem_u32(US);
    const float* ug_blk = ug + (long long)gidx * NCH * US_FLOATS;

    // transform roles: part (B^T row pair), tile tt, column phase tq
    const int part = warp >> 2;                       // warp-uniform 0..2
    const int tt = (warp & 3) * 8 + (lane >> 2);
    const int tq = lane & 3;
    const int rp_off = tt * TSR + tq + 2;
    const int vp_off = tq * VT + tt;

    // GEMM roles: tiles tg*4..+3, oc {og*4..+3, 16+og*4..+3}
    const int tg = lane & 7, og = lane >> 3;
    float acc[3][4][8];
#pragma unroll
    for (int a = 0; a < 3; ++a)
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[a][i][j] = 0.0f;

    // prologue: raw(0) + U(0) + raw(1), then V(0)
    stage_raw(x, cgo, cvb, cdo, 0, 0, raw_u, tid);
    stage_u(ug_blk, us_u, tid);
    stage_raw(x, cgo, cvb, cdo, W, 1, raw_u + (unsigned)(RAW_FLOATS * 4), tid);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    {
        const float* rp = RAWS + rp_off;
        float* vp = VS + vp_off;
        if (part == 0) input_transform<0>(rp, vp);
        else if (part == 1) input_transform<1>(rp, vp);
        else input_transform<2>(rp, vp);
    }
    __syncthreads();

#pragma unroll 1
    for (int ch = 0; ch < NCH; ++ch) {
        const int cur = ch & 1;
        // raw(ch+2) into the buffer raw(ch) left; U(ch+1) into the one U(ch-1) left
        if (ch + 2 < NCH) {
            const int cn = ch + 2;
            stage_raw(x, cgo, cvb, cdo, (cn >> 2) * HW + (cn & 3) * W, cn & 3,
                      raw_u + (unsigned)(cur * RAW_FLOATS * 4), tid);
        }
        if (ch + 1 < NCH)
            stage_u(ug_blk + (ch + 1) * US_FLOATS, us_u + (unsigned)((cur ^ 1) * US_FLOATS * 4),
                    tid);
        cp_async_commit();

        // GEMM of chunk ch: M[xi][tile][oc] += V[xi][k][tile] * U[xi][k][oc]
        {
            const float* vb = VS + cur * VS_FLOATS + tg * 4;
            const float* ub = US + cur * US_FLOATS + og * 4;
#pragma unroll
            for (int a = 0; a < 3; ++a) {
                const int xi = warp + NWARPS * a;
                const float* vx = vb + xi * (KC * VT);
                const float* ux = ub + xi * (KC * OCB);
#pragma unroll
                for (int k = 0; k < KC; ++k) {
                    const float4 va = *reinterpret_cast<const float4*>(vx + k * VT);
                    const float4 ua = *reinterpret_cast<const float4*>(ux + k * OCB);
                    const float4 uc = *reinterpret_cast<const float4*>(ux + k * OCB + 16);
                    const float v[4] = {va.x, va.y, va.z, va.w};
                    const float u[8] = {ua.x, ua.y, ua.z, ua.w, uc.x, uc.y, uc.z, uc.w};
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 8; ++j) acc[a][i][j] = fmaf(v[i], u[j], acc[a][i][j]);
                }
            }
        }

        // input transform of chunk ch+1 into the other V buffer
        if (ch + 1 < NCH) {
            const float* rp = RAWS + (cur ^ 1) * RAW_FLOATS + rp_off;
            float* vp = VS + (cur ^ 1) * VS_FLOATS + vp_off;
            if (part == 0) input_transform<0>(rp, vp);
            else if (part == 1) input_transform<1>(rp, vp);
            else input_transform<2>(rp, vp);
        }
        cp_async_wait_all();
        __syncthreads();
    }

    // M[xi][oc][tile] through shared memory (aliases the pipeline; no copies are in flight)
#pragma unroll
    for (int a = 0; a < 3; ++a) {
        float* mw = smem + (warp + NWARPS * a) * (OCB * BT) + tg * 4;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int ocl = (j < 4) ? (og * 4 + j) : (16 + og * 4 + (j - 4));
            *reinterpret_cast<float4*>(mw + ocl * BT) =
                make_float4(acc[a][0][j], acc[a][1][j], acc[a][2][j], acc[a][3][j]);
        }
    }
    __syncthreads();

    // output transform Y = A^T M A, bias, store
    const int OHW = OH * OW;
#pragma unroll 1
    for (int pi = tid; pi < BT * OCB; pi += NTHREADS) {
        const int t = pi % BT;
        const int ocl = pi / BT;
        const int on = s_on[t];
        if (on == 0) continue;
        const float* mp = smem + ocl * BT + t;
        float z[4][6];
#pragma unroll
        for (int j = 0; j < 6; ++j) {
            const float m0 = mp[(0 * 6 + j) * (OCB * BT)];
            const float m1 = mp[(1 * 6 + j) * (OCB * BT)];
            const float m2 = mp[(2 * 6 + j) * (OCB * BT)];
            const float m3 = mp[(3 * 6 + j) * (OCB * BT)];
            const float m4 = mp[(4 * 6 + j) * (OCB * BT)];
            const float m5 = mp[(5 * 6 + j) * (OCB * BT)];
            const float s12 = m1 + m2, d12 = m1 - m2;
            const float s34 = m3 + m4, d34 = m3 - m4;
            z[0][j] = (m0 + s12) + s34;
            z[1][j] = fmaf(2.0f, d34, d12);
            z[2][j] = fmaf(4.0f, s34, s12);
            z[3][j] = fmaf(8.0f, d34, d12) + m5;
        }
        const int oc = gidx * OCB + ocl;
        const float bv = __ldg(bias + oc);
        float* op = out + s_ob[t] + oc * OHW;
        const int nr = on & 15, nc = on >> 4;
#pragma unroll
        for (int uu = 0; uu < 4; ++uu) {
            const float s12 = z[uu][1] + z[uu][2], d12 = z[uu][1] - z[uu][2];
            const float s34 = z[uu][3] + z[uu][4], d34 = z[uu][3] - z[uu][4];
            const float y0 = (z[uu][0] + s12) + s34;
            const float y1 = fmaf(2.0f, d34, d12);
            const float y2 = fmaf(4.0f, s34, s12);
            const float y3 = fmaf(8.0f, d34, d12) + z[uu][5];
            if (uu < nr) {
                float* orow = op + uu * OW;
                orow[0] = y0 + bv;
                if (nc > 1) orow[1] = y1 + bv;
                if (nc > 2) orow[2] = y2 + bv;
                if (nc > 3) orow[3] = y3 + bv;
            }
        }
    }
}
"""

kernels = compile_kernels(cuda_src, ["wino43_weight_prep", "conv_wino43_kernel"])
TSR = int(kernels.constant("TSR"))
VT = int(kernels.constant("VT"))
NTHREADS = 384
BT = 32
OCB = 32
CIN = 3
_NXI = 36
_KC = 4
_PIPE_FLOATS = 2 * (BT * TSR + _NXI * _KC * VT + _NXI * _KC * OCB)
_M_FLOATS = _NXI * OCB * BT
SMEM_BYTES = 4 * max(_PIPE_FLOATS, _M_FLOATS)
if SMEM_BYTES > 227 * 1024:
    raise ValueError(f"conv2d: configuration needs {SMEM_BYTES} B of shared memory")


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
        if (c.in_channels != CIN or isinstance(c.padding, str)
                or tuple(c.kernel_size) != (11, 11)
                or tuple(c.stride) != (4, 4) or tuple(c.padding) != (2, 2)
                or tuple(c.dilation) != (1, 1) or c.groups != 1 or c.bias is None
                or c.padding_mode != "zeros" or c.out_channels % OCB != 0):
            raise ValueError("conv2d: this kernel supports Conv2d(3, 32k, 11, stride=4, "
                             "padding=2) with bias")
        if x.shape[1] != CIN:
            raise ValueError(f"conv2d: x must have {CIN} channels")
        w = c.weight.detach()
        b = c.bias.detach()
        if (w.dtype != torch.float32 or b.dtype != torch.float32 or not w.is_cuda
                or w.device != x.device or b.device != x.device):
            raise ValueError("conv2d: weights must be float32 tensors on the input's device")
        nb, ch, h, wd = x.shape
        if wd % 4 != 0:
            raise ValueError("conv2d: input width must be a multiple of 4")
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
        ty, tx = (oh + 3) // 4, (ow + 3) // 4
        ntiles = nb * ty * tx

        ug = torch.empty(oc * CIN * 16 * _NXI, device=x.device, dtype=torch.float32)
        nprep = oc * CIN * 16
        kernels.wino43_weight_prep.launch((nprep + 255) // 256, 256, w, ug, oc)

        grid = ((ntiles + BT - 1) // BT) * (oc // OCB)
        kernels.conv_wino43_kernel.launch(grid, NTHREADS, x, ug, b, out, h, wd, oc, oh, ow, ty,
                                          tx, ntiles, shared_mem=SMEM_BYTES)
        return out
