# evokernel: best kernel of run matmul for problem matmul
# candidate d0516c9d1c6fd425, generation 3, operator tune; speedup 0.953x over eager (2.6814 ms -> 2.8140 ms, 6280% of floor)
# idea: tune GROUP_M=4
# check it: evokernel check matmul results/h200-2026-12-02-s11/frontier/matmul/best.py
"""Matmul C = A @ B, FP32, NVRTC form.

Register-blocked SGEMM: a 128x128 C tile per 256-thread block, BK=16 K-slices, and each thread
accumulating an 8x8 micro-tile (2x2 quadrants of 4x4, 64 rows/cols apart) straight into its
accumulators with fmaf. There is no per-tile partial sum, so the inner loop is only LDS.128 + FFMA.
A is stored k-major (transposed) in shared memory, so both fragments are float4 reads.
Shared tiles are double-buffered and the K loop is unrolled by 2, so the buffer offsets are
compile-time constants. The next tile is prefetched into registers while the current one is
computed, so each K-tile costs one __syncthreads. sgemm_fast (sgemm_body<true>) handles
M%128 == N%128 == K%BK == 0 with no bounds checks, advancing its global pointers by constant
increments. sgemm_general (sgemm_body<false>) is the bounds-checked path for ragged shapes.
Blocks are launched on a 1D grid in a grouped order (GROUP_M block-rows at a time) for L2 reuse.
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 16;          // tune: 8 16
constexpr int NT = 256;
constexpr int TM = 8;
constexpr int TN = 8;
constexpr int APAD = 4;         // tune: 0 4 8
constexpr int GROUP_M = 4;      // tune: 1 4 8 16
constexpr int MIN_BLOCKS = 2;   // tune: 1 2

constexpr int AS_LD = BM + APAD;        // k-major A tile row stride (floats)
constexpr int TX = BN / TN;             // 16 threads across N
constexpr int TY = BM / TM;             // 16 threads across M
constexpr int HM = BM / 2;              // quadrant offset in M
constexpr int HN = BN / 2;              // quadrant offset in N
constexpr int A_VPR = BK / 4;           // float4s per A tile row
constexpr int A_LD = (BM * BK / 4) / NT;// float4 loads of A per thread per tile
constexpr int A_RS = NT / A_VPR;        // A tile rows between a thread's loads
constexpr int B_VPR = BN / 4;           // float4s per B tile row
constexpr int B_LD = (BK * BN / 4) / NT;// float4 loads of B per thread per tile
constexpr int B_RS = NT / B_VPR;        // B tile rows between a thread's loads
constexpr int AS_SIZE = BK * AS_LD;
constexpr int BS_SIZE = BK * BN;

static_assert(TX * TY == NT, "thread grid must cover the tile");
static_assert(HM == TY * 4 && HN == TX * 4, "quadrant layout needs 4x4 sub-tiles");
static_assert(BK % 4 == 0, "BK must be a multiple of 4");
static_assert((BM * BK / 4) % NT == 0 && (BK * BN / 4) % NT == 0, "loads must divide evenly");
static_assert(NT % A_VPR == 0 && NT % B_VPR == 0, "load mapping");
static_assert(A_RS * A_LD == BM && B_RS * B_LD == BK, "load mapping covers tile");
static_assert(APAD % 4 == 0, "APAD keeps float4 alignment");
static_assert(2 * (AS_SIZE + BS_SIZE) * 4 <= 48 * 1024, "static shared memory limit");

__device__ __forceinline__ void load_fast(const float* __restrict__ Ag, const float* __restrict__ Bg,
                                          long long a_is, long long b_is,
                                          float4 (&ra)[A_LD], float4 (&rb)[B_LD]) {
    #pragma unroll
    for (int i = 0; i < A_LD; ++i)
        ra[i] = __ldg(reinterpret_cast<const float4*>(Ag + i * a_is));
    #pragma unroll
    for (int i = 0; i < B_LD; ++i)
        rb[i] = __ldg(reinterpret_cast<const float4*>(Bg + i * b_is));
}

__device__ __forceinline__ void load_general(const float* __restrict__ A, const float* __restrict__ B,
                                             int M, int N, int K,
                                             int a_r, int a_c, int b_r, int b_c,
                                             float4 (&ra)[A_LD], float4 (&rb)[B_LD]) {
    #pragma unroll
    for (int i = 0; i < A_LD; ++i) {
        const int r = a_r + i * A_RS;
        float v[4];
        #pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int col = a_c + c;
            v[c] = (r < M && col < K) ? __ldg(A + (long long)r * K + col) : 0.0f;
        }
        ra[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
    #pragma unroll
    for (int i = 0; i < B_LD; ++i) {
        const int r = b_r + i * B_RS;
        float v[4];
        #pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int col = b_c + c;
            v[c] = (r < K && col < N) ? __ldg(B + (long long)r * N + col) : 0.0f;
        }
        rb[i] = make_float4(v[0], v[1], v[2], v[3]);
    }
}

__device__ __forceinline__ void store_tile(float* __restrict__ as, float* __restrict__ bs,
                                           int arow, int akc, int brow, int bcol,
                                           const float4 (&ra)[A_LD], const float4 (&rb)[B_LD]) {
    #pragma unroll
    for (int i = 0; i < A_LD; ++i) {
        const int r = arow + i * A_RS;
        float* p = as + (akc * 4) * AS_LD + r;
        p[0 * AS_LD] = ra[i].x;
        p[1 * AS_LD] = ra[i].y;
        p[2 * AS_LD] = ra[i].z;
        p[3 * AS_LD] = ra[i].w;
    }
    #pragma unroll
    for (int i = 0; i < B_LD; ++i)
        *reinterpret_cast<float4*>(bs + (brow + i * B_RS) * BN + bcol * 4) = rb[i];
}

__device__ __forceinline__ void compute_tile(const float* __restrict__ as, const float* __restrict__ bs,
                                             int tx, int ty, float (&acc)[TM][TN]) {
    #pragma unroll
    for (int k = 0; k < BK; ++k) {
        const float4 a0 = *reinterpret_cast<const float4*>(as + k * AS_LD + ty * 4);
        const float4 a1 = *reinterpret_cast<const float4*>(as + k * AS_LD + HM + ty * 4);
        const float4 b0 = *reinterpret_cast<const float4*>(bs + k * BN + tx * 4);
        const float4 b1 = *reinterpret_cast<const float4*>(bs + k * BN + HN + tx * 4);
        const float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float b[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
        #pragma unroll
        for (int i = 0; i < TM; ++i) {
            #pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }
}

template <bool FAST>
__device__ __forceinline__ void sgemm_body(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K,
                                           float* __restrict__ As, float* __restrict__ Bs) {
    const int tid = threadIdx.x;

    // Grouped raster: GROUP_M block-rows sweep the block-columns together (L2 reuse).
    const int grid_m = (M + BM - 1) / BM;
    const int grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int group_size = GROUP_M * grid_n;
    const int first_m = (pid / group_size) * GROUP_M;
    const int gm = min(grid_m - first_m, GROUP_M);
    const int in_group = pid % group_size;
    const int bm = first_m + in_group % gm;
    const int bn = in_group / gm;
    const int row0 = bm * BM;
    const int col0 = bn * BN;

    const int tx = tid % TX;
    const int ty = tid / TX;
    const int arow = tid / A_VPR, akc = tid % A_VPR;
    const int brow = tid / B_VPR, bcol = tid % B_VPR;

    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    }

    float4 ra[A_LD], rb[B_LD];
    const int num_tiles = FAST ? (K / BK) : ((K + BK - 1) / BK);

    const float* Ag = A;
    const float* Bg = B;
    long long a_is = 0, b_is = 0, b_step = 0;
    if (FAST) {
        Ag = A + (long long)(row0 + arow) * K + akc * 4;
        Bg = B + (long long)brow * N + col0 + bcol * 4;
        a_is = (long long)A_RS * K;
        b_is = (long long)B_RS * N;
        b_step = (long long)BK * N;
    }

#define SGEMM_FETCH(k0)                                                                       \
    do {                                                                                      \
        if (FAST) {                                                                           \
            load_fast(Ag, Bg, a_is, b_is, ra, rb);                                            \
            Ag += BK;                                                                         \
            Bg += b_step;                                                                     \
        } else {                                                                              \
            load_general(A, B, M, N, K, row0 + arow, (k0) + akc * 4, (k0) + brow,             \
                         col0 + bcol * 4, ra, rb);                                            \
        }                                                                                     \
    } while (0)

    float* const As0 = As;
    float* const As1 = As + AS_SIZE;
    float* const Bs0 = Bs;
    float* const Bs1 = Bs + BS_SIZE;

    SGEMM_FETCH(0);
    store_tile(As0, Bs0, arow, akc, brow, bcol, ra, rb);
    __syncthreads();

    for (int t = 0; t < num_tiles; t += 2) {
        // even tile: compute buffer 0, prefetch tile t+1 into buffer 1
        const bool has1 = (t + 1) < num_tiles;
        if (has1) SGEMM_FETCH((t + 1) * BK);
        compute_tile(As0, Bs0, tx, ty, acc);
        if (!has1) break;
        store_tile(As1, Bs1, arow, akc, brow, bcol, ra, rb);
        __syncthreads();

        // odd tile: compute buffer 1, prefetch tile t+2 into buffer 0
        const bool has2 = (t + 2) < num_tiles;
        if (has2) SGEMM_FETCH((t + 2) * BK);
        compute_tile(As1, Bs1, tx, ty, acc);
        if (has2) store_tile(As0, Bs0, arow, akc, brow, bcol, ra, rb);
        __syncthreads();
    }
#undef SGEMM_FETCH

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = row0 + (i < 4 ? ty * 4 + i : HM + ty * 4 + (i - 4));
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = col0 + h * HN + tx * 4;
            if (FAST) {
                *reinterpret_cast<float4*>(C + (long long)r * N + c) =
                    make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1],
                                acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else if (r < M) {
                #pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (c + j < N) C[(long long)r * N + c + j] = acc[i][h * 4 + j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT, MIN_BLOCKS)
sgemm_fast(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
           int M, int N, int K) {
    __shared__ __align__(16) float As[2 * AS_SIZE];
    __shared__ __align__(16) float Bs[2 * BS_SIZE];
    sgemm_body<true>(A, B, C, M, N, K, As, Bs);
}

extern "C" __global__ void __launch_bounds__(NT, MIN_BLOCKS)
sgemm_general(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
              int M, int N, int K) {
    __shared__ __align__(16) float As[2 * AS_SIZE];
    __shared__ __align__(16) float Bs[2 * BS_SIZE];
    sgemm_body<false>(A, B, C, M, N, K, As, Bs);
}
"""

kernels = compile_kernels(cuda_src, ["sgemm_fast", "sgemm_general"])
BM = kernels.constant("BM")
BN = kernels.constant("BN")
BK = kernels.constant("BK")
NT = kernels.constant("NT")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        if not (A.is_cuda and B.is_cuda and A.device == B.device
                and A.dtype == B.dtype == torch.float32
                and A.dim() == B.dim() == 2 and A.shape[1] == B.shape[0]):
            raise ValueError("matmul: A and B must be 2D float32 CUDA tensors on one device, "
                             "A.shape[1] == B.shape[0]")
        A, B = A.contiguous(), B.contiguous()
        (M, K), N = A.shape, B.shape[1]
        if max(M, N, K) >= 1 << 31:
            raise ValueError("matmul: too large for 32-bit indices")
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        if M == 0 or N == 0:
            return C
        if K == 0:
            return C.zero_()
        grid_m = (M + BM - 1) // BM
        grid_n = (N + BN - 1) // BN
        nblocks = grid_m * grid_n
        if nblocks >= 1 << 31:
            raise ValueError("matmul: grid too large")
        fast = (M % BM == 0 and N % BN == 0 and K % BK == 0
                and A.data_ptr() % 16 == 0 and B.data_ptr() % 16 == 0
                and C.data_ptr() % 16 == 0)
        kern = kernels.sgemm_fast if fast else kernels.sgemm_general
        kern.launch(nblocks, NT, A, B, C, M, N, K)
        return C
