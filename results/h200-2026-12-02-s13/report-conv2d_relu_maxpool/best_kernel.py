# evokernel: best kernel of run conv2d_relu_maxpool for problem conv2d_relu_maxpool
# candidate 3efa2511cadbdfcc, generation 4, operator idea; speedup 2.257x over eager (1.2391 ms -> 0.5489 ms, 2697% of floor)
# idea: Move the conv's inner product (93% of GPU time, running at about 55% of the FP32 FMA issue peak) onto tensor cores with error-compensated 3xTF32 mma.sync.aligned.m16n8k8: for each operand hi = cvt.rna.tf32(v) and lo = cvt.rna.tf32(v - hi), accumulate hi*hi + hi*lo + lo*hi into FP32 fragments (never plain TF32), with the prep kernel storing the weights already split into hi/lo tf32 B-fragments ordered [oc_block][c][k][kstep][8 k][OC_TILE], zero on padded taps. Keep the double-buffered phase-split stages and use blocks of one image x ROWS=8 conv rows x 56 columns (448 pixels) x OC_TILE=32 with 7 warps, each owning 64 pixels x 32 oc (4x4 m16n8 tiles, 64 accumulators). K inside a stage (c,k) is packed as k8 steps whose columns t and t+4 are column phase t at two (m, offset) slots (5 steps for k<3, 3 for k=3, 144 K per channel against 121 real), so a0/a2 are gathered straight from xs[r+m][t][ow+off]; A elements of padded slots are set to 0.0f (not just given zero weights, so an inf input cannot make NaN), and the existing bias+ReLU epilogue runs on the accumulator fragments.
# check it: evokernel check conv2d_relu_maxpool results/h200-2026-12-02-s13/report-conv2d_relu_maxpool/best_kernel.py
"""conv2d_relu_maxpool, NVRTC form.

Convolution: implicit GEMM on tensor cores with error-compensated 3xTF32, specialised to
11x11 / stride 4 / padding 2 (checked in Python; C, H, W, N, OC are runtime).
 * Roles: M = output channels (A = weights), N = pixels (B = input), K = taps.
   mma.sync.m16n8k8 tf32: for every operand v, hi = cvt.rna.tf32(v), lo = cvt.rna.tf32(v - hi),
   and a k-step computes d = Alo*Bhi + Ahi*Blo + Ahi*Bhi (three chained mmas starting from zero),
   then acc += d with an FP32 round-to-nearest add. The tensor core's truncating accumulation
   therefore only ever spans one k8 step; the long sum over K is ordinary FP32.
 * A block computes one image, ROWS = 8 conv rows x 56 columns (column 55 is padding) and
   OC_TILE = 16*MT channels. The 56 groups of 8 pixels (n8 tiles, never straddling a row) are
   split over 56/NTW warps; the default NTW = 7 gives one warp per conv row.
 * The input is staged in 4*C stages, one per (channel c, row phase k = kh mod 4): slot s holds
   input row ihbase + 4s + k, zero padded, stored column-phase split at word 72*(iw' mod 4) +
   iw'/4 (iw' = iw + 2); 72 = 8 mod 32, so the 8 pixels x 4 phases of a B gather hit 32 banks.
 * K inside a stage is packed as k8 steps whose columns t and t+4 are column phase t at two
   (m, off) slots (kh = k + 4m, kw = t + 4 off): 9 slots -> 5 steps for k < 3 (one padded slot),
   6 slots -> 3 steps for k = 3. B elements of the padded slot and of the kw = 11 tap are 0.0f.
 * A prep kernel splits and reorders the weights once per call into
   [oc_block][c][k][kstep][m-tile][hi|lo][lane][a0..a3]: a lane's hi (lo) fragment is one float4
   and the 32 lanes read 512 contiguous bytes (conflict-free LDS.128). A stage's weights are
   copied with predicate-free 16-byte cp.async.
 * Double buffering with one barrier per stage (cp.async for input and weights).
 * Bias + ReLU on the accumulator fragments; each lane stores float2 pairs of adjacent columns.
Max pooling (3x3, stride 2): the conv intermediate has an even row pitch OWP (56 for 55 columns,
the pad column is never read). One warp per (plane, POOL_ROWS pooled rows): lane l loads conv
columns 2l, 2l+1 of all 2*POOL_ROWS+1 rows as float2 before any max (many loads in flight),
takes the vertical max in registers, and gets column 2l+2 from lane l+1 with a shuffle.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int MT = 2;            // tune: 1 2
constexpr int NTW = 7;           // tune: 4 7 8 14
constexpr int MIN_BLOCKS = 2;    // tune: 1 2 3
constexpr int POOL_ROWS = 9;     // tune: 1 3 9 27
constexpr int POOL_WARPS = 8;    // tune: 2 4 8 16
constexpr int PREP_BLOCK = 256;
constexpr int ROWS = 8;          // conv rows per block (fixed: 8 x 56 = 56 groups of 8 pixels)

constexpr int KS = 11;           // conv kernel size
constexpr int CS = 4;            // conv stride
constexpr int CP = 2;            // conv padding
constexpr int TW = 56;           // conv columns per block (55 + 1 pad)
constexpr int NGRP = ROWS * TW / 8;      // 56 n8 tiles per block
constexpr int NWARPS = NGRP / NTW;
constexpr int NT = NWARPS * 32;
constexpr int OC_TILE = 16 * MT;
constexpr int PPW = TW + 2;              // 58 words per column phase (ow + off <= 57)
constexpr int PHS = 72;                  // phase t starts at word 72 t (0, 8, 16, 24 mod 32)
constexpr int XCOLS = 4 * PPW;           // 232 staged columns: iw = -2 .. 229
constexpr int RS = 3 * PHS + PPW + 2;    // 276 words per staged row
constexpr int NSLOT = ROWS + 2;          // input rows per stage
constexpr int XS_SIZE = NSLOT * RS;
constexpr int KSTEPS = 5;                // k8 steps per stage (3 used when k == 3)
constexpr int KSF = MT * 256;            // floats per k step: [mt][hi|lo][lane][4]
constexpr int WS_SIZE = KSTEPS * KSF;    // floats per stage slab
constexpr int WS4 = WS_SIZE / 4;
constexpr int NCPT = (XCOLS + NT - 1) / NT;                       // staging columns per thread
constexpr int MINB = (MIN_BLOCKS * NT > 2048) ? (2048 / NT) : MIN_BLOCKS;

static_assert(NGRP % NTW == 0, "NTW must divide the 56 pixel groups of a block");
static_assert(PHS % 32 == 8 && PHS >= PPW, "phase offsets must be 0, 8, 16, 24 mod 32");
static_assert(3 * PHS + PPW <= RS, "row stride too small");
static_assert(4 * NSLOT <= 64, "the (slot, phase) validity mask has 64 bits");
static_assert(2 * (XS_SIZE + WS_SIZE) * 4 <= 48 * 1024, "static shared memory limit");
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

__device__ __forceinline__ unsigned to_tf32(float v) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return r;
}
// v ~= hi + lo, both tf32; the residual is ~2^-22 |v|.
__device__ __forceinline__ void split_tf32(float v, unsigned& hi, unsigned& lo) {
    hi = to_tf32(v);
    lo = to_tf32(v - __uint_as_float(hi));
}
// d = a * b + d
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4],
                                         unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d = a * b (fresh accumulator)
__device__ __forceinline__ void mma_tf32_zero(float (&d)[4], const unsigned (&a)[4],
                                              unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// wp[idx], idx = ((((((ob*C + c)*4 + k)*KSTEPS + ks)*MT + mt)*2 + part)*32 + lane)*4 + reg.
// A fragment of m16n8k8 tf32: reg 0 (row g, col t), 1 (g+8, t), 2 (g, t+4), 3 (g+8, t+4),
// g = lane/4, t = lane%4. Row = channel ob*OC_TILE + 16 mt + row; column kc is slot
// q = 2 ks + kc/4 = (m, off) = (q/3, q%3) at column phase kc%4: kh = k + 4m, kw = kc%4 + 4 off.
// part 0 holds hi = tf32(w), part 1 lo = tf32(w - hi); zero on padded slots/taps/channels.
__global__ void prep_weights_kernel(const float* __restrict__ w, float* __restrict__ wp,
                                    int C, int OC, int total) {
    for (int idx = blockIdx.x * PREP_BLOCK + threadIdx.x; idx < total;
         idx += gridDim.x * PREP_BLOCK) {
        const int reg = idx & 3;
        const int lane = (idx >> 2) & 31;
        const int part = (idx >> 7) & 1;
        int rest = idx >> 8;
        const int mt = rest % MT;       rest /= MT;
        const int ks = rest % KSTEPS;   rest /= KSTEPS;
        const int k = rest & 3;         rest >>= 2;
        const int c = rest % C;
        const int ob = rest / C;
        const int row = (lane >> 2) + ((reg & 1) << 3);
        const int kc = (lane & 3) + ((reg & 2) << 1);
        const int q = 2 * ks + (kc >> 2);
        const int m = q / 3;
        const int off = q - 3 * m;
        const int kh = k + 4 * m;
        const int kw = (kc & 3) + 4 * off;
        const int oc = ob * OC_TILE + mt * 16 + row;
        const int nsl = (k + 8 < KS) ? 9 : 6;
        float v = 0.0f;
        if (q < nsl && kh < KS && kw < KS && oc < OC)
            v = w[((long long)(oc * C + c) * KS + kh) * KS + kw];
        const float hi = __uint_as_float(to_tf32(v));
        wp[idx] = part ? __uint_as_float(to_tf32(v - hi)) : hi;
    }
}

// One stage (c, k): NKS k8 steps. xb: this buffer's staged rows; wb: weight slab + 4*lane.
template <int NKS>
__device__ __forceinline__ void stage_mma(const float* __restrict__ xb,
                                          const float* __restrict__ wb,
                                          const int (&boff)[NTW], bool t3,
                                          float (&acc)[MT][NTW][4]) {
    constexpr int NSL = (NKS == KSTEPS) ? 9 : 6;    // real (m, off) slots of this stage
#pragma unroll
    for (int ks = 0; ks < NKS; ++ks) {
        unsigned ah[MT][4], al[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float4 h = *reinterpret_cast<const float4*>(wb + ks * KSF + mt * 256);
            const float4 l = *reinterpret_cast<const float4*>(wb + ks * KSF + mt * 256 + 128);
            ah[mt][0] = __float_as_uint(h.x); ah[mt][1] = __float_as_uint(h.y);
            ah[mt][2] = __float_as_uint(h.z); ah[mt][3] = __float_as_uint(h.w);
            al[mt][0] = __float_as_uint(l.x); al[mt][1] = __float_as_uint(l.y);
            al[mt][2] = __float_as_uint(l.z); al[mt][3] = __float_as_uint(l.w);
        }
        const int q0 = 2 * ks;                       // B row t     -> slot q0, phase t
        const int q1 = 2 * ks + 1;                   // B row t + 4 -> slot q1, phase t
        const int o0 = (q0 / 3) * RS + (q0 % 3);
        const int o1 = (q1 / 3) * RS + (q1 % 3);
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
            const float* xp = xb + boff[j];
            float v0 = xp[o0];
            if (q0 % 3 == 2) v0 = t3 ? 0.0f : v0;    // kw = 11 tap: not part of the kernel
            unsigned bh0, bl0, bh1 = 0u, bl1 = 0u;
            split_tf32(v0, bh0, bl0);
            if (q1 < NSL) {                          // else padded slot: B = 0
                float v1 = xp[o1];
                if (q1 % 3 == 2) v1 = t3 ? 0.0f : v1;
                split_tf32(v1, bh1, bl1);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                float d[4];
                mma_tf32_zero(d, al[mt], bh0, bh1);  // small terms first
                mma_tf32(d, ah[mt], bl0, bl1);
                mma_tf32(d, ah[mt], bh0, bh1);
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][j][e] += d[e];   // FP32, round to nearest
            }
        }
    }
}

// out[n][oc][oh][ow] = relu(bias[oc] + sum_c sum_{kh,kw} x[n][c][4oh-2+kh][4ow-2+kw] * w[oc][c][kh][kw])
__global__ void __launch_bounds__(NT, MINB)
conv2d_relu_mma_kernel(const float* __restrict__ x, const float* __restrict__ wp,
                       const float* __restrict__ bias, float* __restrict__ out,
                       int C, int H, int W, int OC, int OH, int OW, int OWP) {
    __shared__ __align__(16) float xs[2][XS_SIZE];
    __shared__ __align__(16) float ws[2][WS_SIZE];

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int oc0 = blockIdx.x * OC_TILE;
    const int oh0 = blockIdx.y * ROWS;
    const int n = blockIdx.z;

    // ---- staging state, fixed for the whole stage loop ----
    const float* xn = x + (long long)n * C * H * W;
    const float* wblk = wp + (long long)blockIdx.x * C * (4 * WS_SIZE) + 4 * tid;
    const int HW = H * W;
    const int W4 = 4 * W;
    const int ihbase = oh0 * CS - CP;
    const unsigned xs_a = smem_u32(&xs[0][0]);
    const unsigned ws_a = smem_u32(&ws[0][0]) + 16u * (unsigned)tid;

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
        xdst[j] = xs_a + 4u * (unsigned)((col & 3) * PHS + (col >> 2));
        xoff[j] = ihbase * W + iw;
    }

    // Stage st = 4c + k into buffer buf: NSLOT copies per staging column, float4s of weights.
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
        const int n4 = (k == 3 ? 3 : KSTEPS) * (KSF / 4);
#pragma unroll
        for (int e0 = 0; e0 < WS4; e0 += NT)
            if (e0 + tid < n4)
                cp_async16(wb + 16u * (unsigned)e0, wsrc + 4 * e0);
    };

    // ---- this lane's B-gather offsets: pixel g of n-tile j, column phase t ----
    int boff[NTW];
#pragma unroll
    for (int j = 0; j < NTW; ++j) {
        const int G = warp * NTW + j;
        const int r = G / 7;
        boff[j] = r * RS + t * PHS + 8 * (G - 7 * r) + g;
    }
    const bool t3 = (t == 3);

    float acc[MT][NTW][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NTW; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][j][e] = 0.0f;

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
        const float* xb = &xs[buf][0];
        const float* wb = &ws[buf][0] + lane * 4;
        if ((st & 3) == 3) stage_mma<3>(xb, wb, boff, t3, acc);
        else               stage_mma<KSTEPS>(xb, wb, boff, t3, acc);
    }

    // ---- bias + ReLU on the fragments: c0,c1 = (oc g, px 2t, 2t+1), c2,c3 = oc g + 8 ----
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int oc = oc0 + mt * 16 + g + 8 * h;
            if (oc < OC) {
                const float b = bias[oc];
                float* oplane = out + ((long long)n * OC + oc) * OH * OWP;
#pragma unroll
                for (int j = 0; j < NTW; ++j) {
                    const int G = warp * NTW + j;
                    const int r = G / 7;
                    const int oh = oh0 + r;
                    const int ow = 8 * (G - 7 * r) + 2 * t;    // even; OWP even
                    if (oh < OH && ow < OW) {
                        float v0 = acc[mt][j][2 * h] + b;
                        float v1 = acc[mt][j][2 * h + 1] + b;
                        v0 = (v0 < 0.0f) ? 0.0f : v0;           // NaN passes through
                        v1 = (v1 < 0.0f) ? 0.0f : v1;
                        *reinterpret_cast<float2*>(oplane + (long long)oh * OWP + ow) =
                            make_float2(v0, v1);
                    }
                }
            }
        }
    }
}

// NaN-propagating max, as PyTorch's max pooling.
__device__ __forceinline__ float nmax(float a, float b) {
    return (b > a || isnan(b)) ? b : a;
}

// out[p][i][j] = max_{a,b < 3} in[p][2i + a][2j + b], p = flat (n, c); no padding, floor mode.
// in: [planes][H][WP], WP even (a pad column past the conv width is never used); PW <= 27, so
// lanes 0..27 cover every needed column. One warp per (plane, POOL_ROWS pooled rows).
__global__ void __launch_bounds__(POOL_WARPS * 32)
maxpool3s2_warp_kernel(const float* __restrict__ in, float* __restrict__ out,
                       long long planes, int H, int WP, int PH, int PW, int nchunks) {
    constexpr int NR = 2 * POOL_ROWS + 1;                // conv rows a chunk needs
    const int lane = threadIdx.x & 31;
    const long long wid = (long long)blockIdx.x * POOL_WARPS + (threadIdx.x >> 5);
    if (wid >= planes * nchunks) return;                 // the whole warp leaves together
    const long long p = wid / nchunks;
    const int i0 = (int)(wid - p * nchunks) * POOL_ROWS;
    const bool ld = 2 * lane < WP;
    const float2* ip = reinterpret_cast<const float2*>(in + p * H * WP) + (ld ? lane : 0);
    const int WP2 = WP >> 1;
    const float ninf = -__int_as_float(0x7f800000);

    // All rows of the chunk are issued before any max: NR independent 8-byte coalesced loads.
    float2 r[NR];
#pragma unroll
    for (int a = 0; a < NR; ++a) {
        int row = 2 * i0 + a;
        row = row < H ? row : H - 1;     // tail chunk: clamped rows only feed unstored outputs
        r[a] = ld ? __ldg(ip + row * WP2) : make_float2(ninf, ninf);
    }

    float* op = out + (p * PH + i0) * PW + lane;
#pragma unroll
    for (int i = 0; i < POOL_ROWS; ++i) {
        const float mx = nmax(nmax(r[2 * i].x, r[2 * i + 1].x), r[2 * i + 2].x);   // column 2l
        const float my = nmax(nmax(r[2 * i].y, r[2 * i + 1].y), r[2 * i + 2].y);   // column 2l+1
        const float mz = __shfl_down_sync(0xffffffffu, mx, 1);                     // column 2l+2
        if (lane < PW && i0 + i < PH) op[i * PW] = nmax(nmax(mx, my), mz);
    }
}
"""

kernels = compile_kernels(cuda_src, ["prep_weights_kernel", "conv2d_relu_mma_kernel",
                                     "maxpool3s2_warp_kernel"])
MT = int(kernels.constant("MT"))
NTW = int(kernels.constant("NTW"))
ROWS = int(kernels.constant("ROWS"))
POOL_ROWS = int(kernels.constant("POOL_ROWS"))
POOL_WARPS = int(kernels.constant("POOL_WARPS"))
PREP_BLOCK = int(kernels.constant("PREP_BLOCK"))

_KS, _CS, _CP = 11, 4, 2
_TW = 56
_KSTEPS = 5
OC_TILE = 16 * MT
NT = (ROWS * _TW // 8 // NTW) * 32
WS_SIZE = _KSTEPS * MT * 256


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
            raise ValueError("this kernel supports MaxPool2d(3, stride=2), unpadded, floor mode "
                             "only")
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
        if ow > _TW - 1:
            raise ValueError("conv2d_relu_maxpool: at most 55 output columns supported")
        if nb > 65535:
            raise ValueError("conv2d_relu_maxpool: batch too large for the grid")
        nocb = (oc + OC_TILE - 1) // OC_TILE
        wtot = nocb * ch * 4 * WS_SIZE
        if ch * h * wd + 128 * wd >= 2 ** 31 or wtot >= 2 ** 31 or oc * ch * _KS * _KS >= 2 ** 31:
            raise ValueError("conv2d_relu_maxpool: tensor too large for 32-bit offsets")
        ph_out, pw_out = (oh - pk[0]) // ps[0] + 1, (ow - pk[0]) // ps[0] + 1
        if pw_out > 31:
            raise ValueError("conv2d_relu_maxpool: pooled rows wider than a warp")
        owp = ow + (ow & 1)        # even row pitch: 8-byte aligned float2 rows
        nchunks = (ph_out + POOL_ROWS - 1) // POOL_ROWS
        pool_grid = (nb * oc * nchunks + POOL_WARPS - 1) // POOL_WARPS
        if pool_grid >= 2 ** 31:
            raise ValueError("conv2d_relu_maxpool: too many planes for the pooling grid")
        conv = torch.empty((nb, oc, oh, owp), device=x.device, dtype=x.dtype)
        out = torch.empty((nb, oc, ph_out, pw_out), device=x.device, dtype=x.dtype)
        if out.numel() == 0:
            return out
        wp = torch.empty(wtot, device=x.device, dtype=torch.float32)
        kernels.prep_weights_kernel.launch(_blocks(wtot, PREP_BLOCK), PREP_BLOCK, w, wp,
                                           ch, oc, wtot)
        grid = (nocb, (oh + ROWS - 1) // ROWS, nb)
        kernels.conv2d_relu_mma_kernel.launch(grid, NT, x, wp, b, conv,
                                              ch, h, wd, oc, oh, ow, owp)
        kernels.maxpool3s2_warp_kernel.launch(pool_grid, POOL_WARPS * 32, conv, out,
                                              nb * oc, oh, owp, ph_out, pw_out, nchunks)
        return out
