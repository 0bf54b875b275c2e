# evokernel: best kernel of run matmul for problem matmul
# candidate 613b40ac53c79c59, generation 4, operator idea; speedup 0.974x over eager (2.6944 ms -> 2.7652 ms, 6184% of floor)
# idea: [compute] Cut the FFMA count by 12.5% with one level of classic Strassen (the original form, not Winograd's) whenever M, N and K are even, falling back to the current path otherwise. The transpose kernel is extended to write At plus the k-major operands S1=A11+A22, S2=A21+A22, S5=A11+A12, S6=A21-A11, S7=A12-A22 (S3=A11 and S4=A22 are sub-views of At, lda=4096), and a float4 elementwise kernel writes T1=B11+B22, T3=B12-B22, T4=B21-B11, T6=B11+B12, T7=B21+B22 (T2=B11 and T5=B22 are views of B, ldb=4096). The unchanged 128x128 sgemm then runs as one batched launch of 7*256 tiles (blockIdx.x/256 picks the product's At/B/M pointers and leading dimensions) into M[7][2048][2048], and a float4 combine kernel writes C11=M1+M4-M5+M7, C12=M3+M5, C21=M2+M4, C22=M1-M2+M3+M6. This saves about 360 us of FFMA time for about 100 us of extra streaming passes. Every sum is a single FP32 add, and on the mean-1000 data the differences are exact by Sterbenz, so the error should stay a small multiple of the classic product's, well inside the 16x bound.
# check it: evokernel check matmul results/h200-2026-12-02-s13/report-matmul/best_kernel.py
"""Matmul, NVRTC form. A is first transposed (k-major A^T, padded to a multiple of 4 columns) by a
small tiled-transpose kernel, so that both GEMM operands are k-major. Each K-tile of A^T and B
is copied global->shared with 16-byte cp.async into a STAGES-deep ring (no register staging, no
transposing stores).

The GEMM block computes a 128x128 C tile with only 128 threads: 4 warps in a 2x2 grid, each warp
a 64x64 tile, lanes in an 8 (rows) x 4 (cols) grid. Each thread owns an 8x16 accumulator (128
FP32 registers): 2 row groups of 4, 32 rows apart, times 4 column groups of 4, 16 columns apart.
One k step reads 2 LDS.128 of A (8 distinct float4 per warp, broadcast over the 4 column lanes)
and 4 LDS.128 of B (4 distinct float4 per warp, broadcast over the 8 row lanes), all
conflict-free, for 128 FFMAs: 21 FFMA per LDS against 16 at the 8x8 tile.

MIN_BLOCKS picks 2 blocks/SM (255-register cap, 8 warps/SM; 1024 tiles over 264 slots, 3.9
waves) or 3 blocks/SM (168-register cap, 12 warps/SM, 144 KB shared; 2.6 waves). FRAG_DB
double-buffers the fragments of step k+1 in registers (24 more registers, which fit under the
2-block cap). Blocks are ordered in GROUP_M-row groups for L2 reuse. The accumulation is plain
FP32 FMA along K.

Large shapes with M, N and K multiples of 8 (so every half-size view stays 16-byte aligned for
cp.async) take one level of classic Strassen: 7 half-size products instead of 8.
strassen_prep_a reads A once and writes all seven k-major A operands S1..S7 (A11+A22, A21+A22,
A11, A22, A11+A12, A21-A11, A12-A22), each Kh x Mh. strassen_prep_b writes T1, T3, T4, T6 and T7
(B11+B22, B12-B22, B21-B11, B11+B12, B21+B22); T2 = B11 and T5 = B22 are views of B (ldb = N).
Nothing writes an M[7] buffer and there is no combine kernel. The products run as 4 launches of the
same sgemm with 1, 2, 2 and 2 products (a batched launch: blockIdx.x / tiles picks the product).
Within a launch the products always write disjoint C quadrants, and the epilogue stores, adds or
subtracts each product straight into its one or two quadrants of C:
  round 1: C11 = M1, C22 = M1
  round 2: C11 += M4, C21 = M4 | C12 = M3, C22 += M3
  round 3: C11 -= M5, C12 += M5 | C21 += M2, C22 -= M2
  round 4: C11 += M7 | C22 += M6
so C11 = ((M1 + M4) - M5) + M7, C12 = M3 + M5, C21 = M4 + M2, C22 = ((M1 + M3) - M2) + M6, and
each term is a single FP32 add. The launches are 256 + 512 + 512 + 512 tiles at 4096 (7 waves over
264 slots, the same as one 1792-tile launch)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 16;          // tune: 8 16
constexpr int STAGES = 3;       // tune: 2 3
constexpr int GROUP_M = 8;      // tune: 1 4 8 16
constexpr int MIN_BLOCKS = 2;   // tune: 2 3
constexpr int FRAG_DB = 0;      // tune: 0 1
constexpr int NTHREADS = 128;
constexpr int WARPS_M = 2;
constexpr int WARPS_N = 2;
constexpr int WTM = 64;         // warp tile rows: 8 lane rows x 4 x 2 groups
constexpr int WTN = 64;         // warp tile cols: 4 lane cols x 4 x 4 groups
constexpr int TM = 8;           // per-thread rows  (2 groups of 4, WTM/2 apart)
constexpr int TN = 16;          // per-thread cols  (4 groups of 4, WTN/4 apart)
constexpr int A_GAP = WTM / 2;  // 32
constexpr int B_GAP = WTN / 4;  // 16
constexpr int LD_ROWS = NTHREADS / (BM / 4);   // k-rows per loader pass (4)
constexpr int TT = 32;          // transpose tile edge
constexpr int TROWS = 8;        // transpose block rows
constexpr int EW_BLOCK = 256;   // tune: 128 256 512
constexpr int USE_STRASSEN = 1; // tune: 0 1
constexpr int STRASSEN_MIN = 1024;   // smallest M, N, K for the one-level Strassen path
constexpr int EPI_ROWS = 2;     // tune: 1 2 4
constexpr int EP_ACC = 1;       // epilogue: add the product to the target's old value
constexpr int EP_NEG = 2;       // epilogue: subtract the product (or store its negation)
constexpr int EP_B = 4;         // epilogue: a second target; its EP_ACC / EP_NEG sit at bits 3, 4
static_assert(TM % EPI_ROWS == 0, "EPI_ROWS must divide TM");

static_assert(BM == BN, "loader mapping assumes square block tiles");
static_assert(WARPS_M * WTM == BM && WARPS_N * WTN == BN, "warps must cover the tile");
static_assert(32 * WARPS_M * WARPS_N == NTHREADS, "thread count");
static_assert(LD_ROWS >= 1 && BK % LD_ROWS == 0, "BK must be a multiple of the loader rows");
static_assert(STAGES >= 2, "need at least two stages");
static_assert(STAGES * BK * (BM + BN) * 4 <= 48 * 1024, "static shared memory limit");

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(unsigned dst, const float* src, bool pred) {
    const int sz = pred ? 16 : 0;   // 0 bytes read -> the 16 destination bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(sz) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

// 2 float4 of A (rows a_off..+3, a_off+32..+35) and 4 float4 of B (cols b_off + 16*g .. +3)
__device__ __forceinline__ void load_frags(float (&fa)[TM], float (&fb)[TN],
                                           const float* as, const float* bs) {
    #pragma unroll
    for (int h = 0; h < TM / 4; ++h) {
        const float4 a = *reinterpret_cast<const float4*>(as + h * A_GAP);
        fa[h * 4 + 0] = a.x; fa[h * 4 + 1] = a.y; fa[h * 4 + 2] = a.z; fa[h * 4 + 3] = a.w;
    }
    #pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
        const float4 b = *reinterpret_cast<const float4*>(bs + g * B_GAP);
        fb[g * 4 + 0] = b.x; fb[g * 4 + 1] = b.y; fb[g * 4 + 2] = b.z; fb[g * 4 + 3] = b.w;
    }
}

__device__ __forceinline__ void fma_tile(float (&acc)[TM][TN], const float (&fa)[TM],
                                         const float (&fb)[TN]) {
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j)
            acc[i][j] = fmaf(fa[i], fb[j], acc[i][j]);
}

// At[k][m] = A[m][k] for m < M; columns M .. ldt-1 are zero.
__global__ void transpose_pad_kernel(const float* __restrict__ A, float* __restrict__ At,
                                     int M, int K, int ldt) {
    __shared__ float tile[TT][TT + 1];
    const int k0 = blockIdx.x * TT, m0 = blockIdx.y * TT;
    const int tx = threadIdx.x, ty = threadIdx.y;
    #pragma unroll
    for (int j = ty; j < TT; j += TROWS) {
        const int m = m0 + j, k = k0 + tx;
        tile[j][tx] = (m < M && k < K) ? A[(long long)m * K + k] : 0.0f;
    }
    __syncthreads();
    #pragma unroll
    for (int j = ty; j < TT; j += TROWS) {
        const int k = k0 + j, m = m0 + tx;
        if (k < K && m < ldt) At[(long long)k * ldt + m] = tile[tx][j];
    }
}

// S[s] (s = 0..6: S1..S7, each Kh x Mh, k-major, ld Mh) from the quadrants of A (M x K):
// S1=A11+A22, S2=A21+A22, S3=A11, S4=A22, S5=A11+A12, S6=A21-A11, S7=A12-A22.
// A is read once; each output element is one FP32 add/subtract (or a copy).
__global__ void strassen_prep_a_kernel(const float* __restrict__ A, float* __restrict__ S,
                                       int Mh, int Kh, int K) {
    __shared__ float t11[TT][TT + 1];
    __shared__ float t12[TT][TT + 1];
    __shared__ float t21[TT][TT + 1];
    __shared__ float t22[TT][TT + 1];
    const int k0 = blockIdx.x * TT, m0 = blockIdx.y * TT;
    const int tx = threadIdx.x, ty = threadIdx.y;
    #pragma unroll
    for (int j = ty; j < TT; j += TROWS) {
        const int m = m0 + j, k = k0 + tx;
        float v11 = 0.0f, v12 = 0.0f, v21 = 0.0f, v22 = 0.0f;
        if (m < Mh && k < Kh) {
            const float* r1 = A + (long long)m * K + k;      // row m of [A11 | A12]
            const float* r2 = r1 + (long long)Mh * K;        // row m of [A21 | A22]
            v11 = r1[0];
            v12 = r1[Kh];
            v21 = r2[0];
            v22 = r2[Kh];
        }
        t11[j][tx] = v11;
        t12[j][tx] = v12;
        t21[j][tx] = v21;
        t22[j][tx] = v22;
    }
    __syncthreads();
    const long long plane = (long long)Kh * Mh;
    #pragma unroll
    for (int j = ty; j < TT; j += TROWS) {
        const int k = k0 + j, m = m0 + tx;
        if (k < Kh && m < Mh) {
            const float a11 = t11[tx][j], a12 = t12[tx][j];
            const float a21 = t21[tx][j], a22 = t22[tx][j];
            float* o = S + (long long)k * Mh + m;
            o[0]         = a11 + a22;
            o[plane]     = a21 + a22;
            o[2 * plane] = a11;
            o[3 * plane] = a22;
            o[4 * plane] = a11 + a12;
            o[5 * plane] = a21 - a11;
            o[6 * plane] = a12 - a22;
        }
    }
}

__device__ __forceinline__ float4 f4add(const float4 a, const float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__device__ __forceinline__ float4 f4sub(const float4 a, const float4 b) {
    return make_float4(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);
}

// T[t] (t = 0..4: T1, T3, T4, T6, T7, each Kh x Nh, ld Nh) from the quadrants of B (K x N):
// T1=B11+B22, T3=B12-B22, T4=B21-B11, T6=B11+B12, T7=B21+B22 (T2=B11, T5=B22 stay views of B).
// Needs Nh % 4 == 0 and a 16-byte aligned B.
__global__ void strassen_prep_b_kernel(const float* __restrict__ B, float* __restrict__ T,
                                       int Kh, int Nh, int N) {
    const int nq = Nh >> 2;                       // float4 per quadrant row
    const long long total = (long long)Kh * nq;
    const long long p4 = ((long long)Kh * Nh) >> 2;   // one T plane, in float4
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += stride) {
        const int k = (int)(idx / nq);
        const int n = (int)(idx - (long long)k * nq) * 4;
        const float* r1 = B + (long long)k * N + n;     // row k of [B11 | B12]
        const float* r2 = r1 + (long long)Kh * N;       // row k of [B21 | B22]
        const float4 b11 = __ldg(reinterpret_cast<const float4*>(r1));
        const float4 b12 = __ldg(reinterpret_cast<const float4*>(r1 + Nh));
        const float4 b21 = __ldg(reinterpret_cast<const float4*>(r2));
        const float4 b22 = __ldg(reinterpret_cast<const float4*>(r2 + Nh));
        float4* o = reinterpret_cast<float4*>(T + (long long)k * Nh + n);
        o[0]      = f4add(b11, b22);
        o[p4]     = f4sub(b12, b22);
        o[2 * p4] = f4sub(b21, b11);
        o[3 * p4] = f4add(b11, b12);
        o[4 * p4] = f4add(b21, b22);
    }
}

// Epilogue for one target: C[row][col] = (op & EP_ACC ? C[row][col] : 0) +/- acc (minus with
// EP_NEG), one FP32 add per element. The old values of EPI_ROWS rows are loaded together, so
// their latency is paid TM / EPI_ROWS times instead of once per float4.
__device__ __forceinline__ void store_target(const float (&acc)[TM][TN], float* C, int op,
                                             int row_base, int col_base, int M, int N, int ldc,
                                             bool vec) {
    const bool accum = (op & EP_ACC) != 0;
    const float sg = (op & EP_NEG) ? -1.0f : 1.0f;
    #pragma unroll
    for (int i0 = 0; i0 < TM; i0 += EPI_ROWS) {
        if (vec) {
            float4 old[EPI_ROWS][TN / 4];
            #pragma unroll
            for (int r = 0; r < EPI_ROWS; ++r) {
                const int i = i0 + r;
                const int row = row_base + (i & 3) + (i >> 2) * A_GAP;
                #pragma unroll
                for (int g = 0; g < TN / 4; ++g) {
                    const int col = col_base + g * B_GAP;
                    old[r][g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    if (accum && row < M && col < N)
                        old[r][g] = *reinterpret_cast<const float4*>(
                            C + (long long)row * ldc + col);
                }
            }
            #pragma unroll
            for (int r = 0; r < EPI_ROWS; ++r) {
                const int i = i0 + r;
                const int row = row_base + (i & 3) + (i >> 2) * A_GAP;
                if (row >= M) continue;
                float* crow = C + (long long)row * ldc;
                #pragma unroll
                for (int g = 0; g < TN / 4; ++g) {
                    const int col = col_base + g * B_GAP;
                    if (col < N) {
                        float4 v = make_float4(sg * acc[i][g * 4 + 0], sg * acc[i][g * 4 + 1],
                                               sg * acc[i][g * 4 + 2], sg * acc[i][g * 4 + 3]);
                        if (accum) {
                            v.x = old[r][g].x + v.x;
                            v.y = old[r][g].y + v.y;
                            v.z = old[r][g].z + v.z;
                            v.w = old[r][g].w + v.w;
                        }
                        *reinterpret_cast<float4*>(crow + col) = v;
                    }
                }
            }
        } else {
            #pragma unroll
            for (int r = 0; r < EPI_ROWS; ++r) {
                const int i = i0 + r;
                const int row = row_base + (i & 3) + (i >> 2) * A_GAP;
                if (row >= M) continue;
                float* crow = C + (long long)row * ldc;
                #pragma unroll
                for (int g = 0; g < TN / 4; ++g) {
                    const int col = col_base + g * B_GAP;
                    #pragma unroll
                    for (int jj = 0; jj < 4; ++jj) {
                        if (col + jj < N) {
                            const float v = sg * acc[i][g * 4 + jj];
                            crow[col + jj] = accum ? crow[col + jj] + v : v;
                        }
                    }
                }
            }
        }
    }
}

// C op= At^T @ B for one or two independent products in one launch: blocks [0, tiles) run
// product 0 and blocks [tiles, 2 * tiles) product 1 (tiles = grid_m * grid_n). At: K x lda
// (k-major A), B: K x ldb; lda, ldb multiples of 4. Product p applies op (flags_p & 3) to target
// Ca_p and, with EP_B, op ((flags_p >> 3) & 3) to target Cb_p; targets are M x N, leading dim ldc.
__global__ void __launch_bounds__(NTHREADS, MIN_BLOCKS)
sgemm_kernel(const float* __restrict__ At0, const float* __restrict__ B0, float* Ca0, float* Cb0,
             int flags0, int ldb0,
             const float* __restrict__ At1, const float* __restrict__ B1, float* Ca1, float* Cb1,
             int flags1, int ldb1,
             int M, int N, int K, int lda, int ldc) {
    __shared__ __align__(16) float As[STAGES * BK * BM];
    __shared__ __align__(16) float Bs[STAGES * BK * BN];

    const int tid = threadIdx.x;

    // grouped block order: GROUP_M block-rows sweep the block-columns together (L2 reuse)
    const int grid_m = (M + BM - 1) / BM;
    const int grid_n = (N + BN - 1) / BN;
    const int tiles = grid_m * grid_n;
    const bool second = (int)blockIdx.x >= tiles;          // which product of the batch
    const int pid = second ? (int)blockIdx.x - tiles : (int)blockIdx.x;
    const float* __restrict__ At = second ? At1 : At0;
    const float* __restrict__ B = second ? B1 : B0;
    const int ldb = second ? ldb1 : ldb0;
    const int width = GROUP_M * grid_n;
    const int group = pid / width;
    const int first_m = group * GROUP_M;
    const int gsize = min(grid_m - first_m, GROUP_M);
    const int pid_m = first_m + (pid % width) % gsize;
    const int pid_n = (pid % width) / gsize;
    const int m0 = pid_m * BM, n0 = pid_n * BN;

    // loader mapping: each warp copies one full 128-float k-row (512 contiguous bytes) per pass,
    // a pass covers LD_ROWS k-rows; BK / LD_ROWS passes per operand per tile
    const int ld_r = tid / (BM / 4);
    const int ld_c = (tid % (BM / 4)) * 4;
    const bool a_col_ok = (m0 + ld_c) < lda;
    const bool b_col_ok = (n0 + ld_c) < ldb;
    const float* a_src = At + (long long)ld_r * lda + m0 + ld_c;
    const float* b_src = B + (long long)ld_r * ldb + n0 + ld_c;
    const unsigned as_dst = smem_u32(As + ld_r * BM + ld_c);
    const unsigned bs_dst = smem_u32(Bs + ld_r * BN + ld_c);

    auto load_tile = [&](int kt, int st) {
        const int kbase = kt * BK;
        #pragma unroll
        for (int j = 0; j < BK / LD_ROWS; ++j) {
            const bool krow_ok = (kbase + ld_r + j * LD_ROWS) < K;
            const bool pa = krow_ok && a_col_ok;
            const bool pb = krow_ok && b_col_ok;
            const long long koff_a = (long long)(kbase + j * LD_ROWS) * lda;
            const long long koff_b = (long long)(kbase + j * LD_ROWS) * ldb;
            cp_async16(as_dst + (unsigned)((st * BK * BM + j * LD_ROWS * BM) * 4),
                       pa ? a_src + koff_a : At, pa);
            cp_async16(bs_dst + (unsigned)((st * BK * BN + j * LD_ROWS * BN) * 4),
                       pb ? b_src + koff_b : B, pb);
        }
    };

    // compute mapping: 2x2 warps of 64x64; lane -> 8 rows x 4 cols; thread 8x16
    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp / WARPS_N;   // 0..1
    const int wn = warp % WARPS_N;   // 0..1
    const int tr = lane >> 2;        // 0..7
    const int tc = lane & 3;         // 0..3
    const int a_off = wm * WTM + tr * 4;
    const int b_off = wn * WTN + tc * 4;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    const int ktiles = (K + BK - 1) / BK;

    #pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_tile(s, s);
        cp_async_commit();
    }

    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();   // tile kt has landed (for this thread's copies)
        __syncthreads();               // ... for everyone's, and stage (kt-1)%STAGES is free
        {
            const int nk = kt + STAGES - 1;
            if (nk < ktiles) load_tile(nk, nk % STAGES);
            cp_async_commit();         // always commit: keeps the group count uniform
        }

        const int st = kt % STAGES;
        const float* as = As + st * (BK * BM) + a_off;
        const float* bs = Bs + st * (BK * BN) + b_off;

        if (FRAG_DB) {
            float fa[2][TM], fb[2][TN];
            load_frags(fa[0], fb[0], as, bs);
            #pragma unroll
            for (int k = 0; k < BK; ++k) {
                const int cur = k & 1;
                if (k + 1 < BK)
                    load_frags(fa[cur ^ 1], fb[cur ^ 1], as + (k + 1) * BM, bs + (k + 1) * BN);
                fma_tile(acc, fa[cur], fb[cur]);
            }
        } else {
            #pragma unroll
            for (int k = 0; k < BK; ++k) {
                float fa[TM], fb[TN];
                load_frags(fa, fb, as + k * BM, bs + k * BN);
                fma_tile(acc, fa, fb);
            }
        }
    }
    cp_async_wait<0>();

    const int flags = second ? flags1 : flags0;
    float* Ca = second ? Ca1 : Ca0;
    float* Cb = second ? Cb1 : Cb0;
    const int row_base = m0 + a_off;
    const int col_base = n0 + b_off;
    const bool vec = ((N | ldc) & 3) == 0;
    store_target(acc, Ca, flags & 3, row_base, col_base, M, N, ldc, vec);
    if (flags & EP_B)
        store_target(acc, Cb, (flags >> 3) & 3, row_base, col_base, M, N, ldc, vec);
}
"""

kernels = compile_kernels(cuda_src, ["transpose_pad_kernel", "sgemm_kernel",
                                     "strassen_prep_a_kernel", "strassen_prep_b_kernel"])
BM, BN = kernels.constant("BM"), kernels.constant("BN")
NTHREADS = kernels.constant("NTHREADS")
TT, TROWS = kernels.constant("TT"), kernels.constant("TROWS")
EW_BLOCK = kernels.constant("EW_BLOCK")
USE_STRASSEN = kernels.constant("USE_STRASSEN")
STRASSEN_MIN = kernels.constant("STRASSEN_MIN")
EP_ACC, EP_NEG, EP_B = kernels.constant("EP_ACC"), kernels.constant("EP_NEG"), kernels.constant("EP_B")
EP_SUB = EP_ACC | EP_NEG


def _two(op_a, op_b):
    """flags of a product with two targets: op_a on target a, op_b on target b"""
    return op_a | EP_B | (op_b << 3)


def _gemm_round(prods, Mh, Nh, Kh, ldc):
    """One sgemm launch of 1 or 2 independent products, each (At, B, Ca, Cb, flags, ldb)."""
    tiles = ((Mh + BM - 1) // BM) * ((Nh + BN - 1) // BN)
    if tiles * len(prods) >= (1 << 31) - 1:
        raise ValueError("matmul: grid too large")
    p0 = prods[0]
    p1 = prods[1] if len(prods) > 1 else prods[0]
    kernels.sgemm_kernel.launch(tiles * len(prods), NTHREADS, *p0, *p1, Mh, Nh, Kh, Mh, ldc)


def _strassen(A, B, C, M, N, K):
    """One level of classic Strassen; M, N, K multiples of 8, B 16-byte aligned, C fresh."""
    Mh, Nh, Kh = M // 2, N // 2, K // 2
    tgrid = ((Kh + TT - 1) // TT, (Mh + TT - 1) // TT)
    if tgrid[1] > 65535:
        raise ValueError("matmul: M too large for the Strassen prep grid")
    S = torch.empty((7, Kh, Mh), device=A.device, dtype=A.dtype)
    kernels.strassen_prep_a_kernel.launch(tgrid, (TT, TROWS), A, S, Mh, Kh, K)
    T = torch.empty((5, Kh, Nh), device=B.device, dtype=B.dtype)
    nvec = Kh * (Nh // 4)
    kernels.strassen_prep_b_kernel.launch(min((nvec + EW_BLOCK - 1) // EW_BLOCK, 16384), EW_BLOCK,
                                          B, T, Kh, Nh, N)

    s1, s2, s3, s4, s5, s6, s7 = (S[i].view(-1) for i in range(7))   # k-major, lda = Mh
    t1, t3, t4, t6, t7 = (T[i].view(-1) for i in range(5))           # ldb = Nh
    Bf = B.view(-1)
    t2, t5 = Bf, Bf[Kh * N + Nh:]                                     # B11, B22: ldb = N
    Cf = C.view(-1)
    c11, c12, c21, c22 = Cf, Cf[Nh:], Cf[Mh * N:], Cf[Mh * N + Nh:]   # ldc = N

    # C11 = M1 + M4 - M5 + M7, C12 = M3 + M5, C21 = M2 + M4, C22 = M1 - M2 + M3 + M6.
    # The products of one launch write disjoint quadrants; stream order sequences the launches.
    _gemm_round([(s1, t1, c11, c22, _two(0, 0), Nh)], Mh, Nh, Kh, N)
    _gemm_round([(s4, t4, c11, c21, _two(EP_ACC, 0), Nh),
                 (s3, t3, c12, c22, _two(0, EP_ACC), Nh)], Mh, Nh, Kh, N)
    _gemm_round([(s5, t5, c11, c12, _two(EP_SUB, EP_ACC), N),
                 (s2, t2, c21, c22, _two(EP_ACC, EP_SUB), N)], Mh, Nh, Kh, N)
    _gemm_round([(s7, t7, c11, c11, EP_ACC, Nh),
                 (s6, t6, c22, c22, EP_ACC, Nh)], Mh, Nh, Kh, N)
    return C


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if not (A.is_cuda and B.is_cuda and A.dtype == B.dtype == torch.float32
                and A.dim() == B.dim() == 2 and A.shape[1] == B.shape[0]):
            raise ValueError("matmul: A and B must be 2D float32 CUDA tensors, A.shape[1] == "
                             "B.shape[0]")
        A, B = A.contiguous(), B.contiguous()
        (M, K), N = A.shape, B.shape[1]
        if max(M, N, K) >= (1 << 31) - 256:
            raise ValueError("matmul: too large for 32-bit indices")
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        if M == 0 or N == 0:
            return C
        if K == 0:
            return C.zero_()

        if (USE_STRASSEN and M % 8 == 0 and N % 8 == 0 and K % 8 == 0
                and min(M, N, K) >= STRASSEN_MIN and B.data_ptr() % 16 == 0):
            return _strassen(A, B, C, M, N, K)

        # k-major copy of A, leading dimension padded to a multiple of 4 (16-byte cp.async)
        ldt = (M + 3) // 4 * 4
        tgrid = ((K + TT - 1) // TT, (ldt + TT - 1) // TT)
        if tgrid[1] > 65535:
            raise ValueError("matmul: M too large for the transpose grid")
        At = torch.empty((K, ldt), device=A.device, dtype=A.dtype)
        kernels.transpose_pad_kernel.launch(tgrid, (TT, TROWS), A, At, M, K, ldt)

        # B rows must be 16-byte aligned for cp.async
        if N % 4 != 0 or B.data_ptr() % 16 != 0:
            ldb = (N + 3) // 4 * 4
            Bp = torch.zeros((K, ldb), device=B.device, dtype=B.dtype)
            Bp[:, :N].copy_(B)
        else:
            Bp, ldb = B, N

        grid = ((M + BM - 1) // BM) * ((N + BN - 1) // BN)
        if grid >= (1 << 31) - 1:
            raise ValueError("matmul: grid too large")
        kernels.sgemm_kernel.launch(grid, NTHREADS, At, Bp, C, C, 0, ldb, At, Bp, C, C, 0, ldb,
                                    M, N, K, ldt, N)
        return C
