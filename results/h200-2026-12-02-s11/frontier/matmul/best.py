# evokernel: best kernel of run matmul for problem matmul
# candidate ee5eab22cafe53ab, generation 1, operator idea; speedup 0.826x over eager (2.6834 ms -> 3.2486 ms, 7166% of floor)
# idea: [memory] Double-buffer the shared tiles: 2 stages of A[8][128+4] and B[8][128] (about 16.5 KB). Prefetch the next K-tile's float4 global loads into registers while computing the current tile from shared memory, then write them into the other buffer, so there is one __syncthreads per K-tile and global latency overlaps the FMAs. Use a warp layout of 4x8 threads per 32x64 warp tile so each warp's B reads are broadcast-friendly and its C stores are coalesced float4 writes.
# check it: evokernel check matmul results/h200-2026-12-02-s11/frontier/matmul/best.py
"""Double-buffered register-prefetch FP32 SGEMM (NVRTC form).

Block tile BM x BN (128 x 128), K-step BK; two shared-memory stages.  Each warp owns a 32 x 64
warp tile, laid out as 4 x 8 lanes; each lane computes an 8 x 8 micro-tile split into two 4-row
halves (16 rows apart) and two 4-column halves (32 columns apart), so all shared reads are float4,
B reads are conflict-free / broadcast and C stores are coalesced float4 writes.  While a K-tile is
being multiplied out of one shared stage, the next K-tile's float4 global loads are in flight into
registers; they are written to the other stage afterwards, so there is one __syncthreads per K-tile.
A general tiled kernel (the seed) handles shapes/alignments the float4 path cannot."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
// ---------------------------------------------------------------------------------------------
// Fast path: double-buffered, register-prefetched SGEMM. Requires K % 4 == 0, N % 4 == 0 and
// 16-byte aligned A, B, C (checked in Python). M, N, K tails are guarded.
// ---------------------------------------------------------------------------------------------
constexpr int BM = 128;         // tune: 64 128
constexpr int BN = 128;
constexpr int BK = 16;          // tune: 8 16
constexpr int GROUP_M = 8;      // tune: 1 4 8 16
constexpr int MIN_BLOCKS = 2;   // tune: 1 2
constexpr int WM = 32;          // warp tile rows   (4 lane-rows x 8 rows each)
constexpr int WN = 64;          // warp tile cols   (8 lane-cols x 8 cols each)
constexpr int WARPS_M = BM / WM;
constexpr int WARPS_N = BN / WN;
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int APAD = 4;
constexpr int A_LOADS = (BM * BK / 4) / THREADS;   // float4 loads of A per thread per K-tile
constexpr int B_LOADS = (BK * BN / 4) / THREADS;   // float4 loads of B per thread per K-tile
static_assert(BM % WM == 0 && BN % WN == 0, "block tile must be a multiple of the warp tile");
static_assert(BK % 4 == 0, "BK must be a multiple of 4");
static_assert((BM * BK / 4) % THREADS == 0 && A_LOADS >= 1, "A tile load split");
static_assert((BK * BN / 4) % THREADS == 0 && B_LOADS >= 1, "B tile load split");
static_assert(THREADS <= 1024, "too many threads");

__device__ __forceinline__ void load_global_tile(const float* __restrict__ A,
                                                 const float* __restrict__ B,
                                                 int M, int N, int K, int row0, int col0, int k0,
                                                 int tid, float4 (&ar)[A_LOADS],
                                                 float4 (&br)[B_LOADS]) {
    #pragma unroll
    for (int j = 0; j < A_LOADS; ++j) {
        const int idx = tid + j * THREADS;
        const int r = idx / (BK / 4);
        const int kq = idx % (BK / 4);
        const int gr = row0 + r, gk = k0 + kq * 4;
        if (gr < M && gk < K)
            ar[j] = __ldg(reinterpret_cast<const float4*>(A + (long long)gr * K + gk));
        else
            ar[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    #pragma unroll
    for (int j = 0; j < B_LOADS; ++j) {
        const int idx = tid + j * THREADS;
        const int r = idx / (BN / 4);
        const int cq = idx % (BN / 4);
        const int gk = k0 + r, gc = col0 + cq * 4;
        if (gk < K && gc < N)
            br[j] = __ldg(reinterpret_cast<const float4*>(B + (long long)gk * N + gc));
        else
            br[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

__device__ __forceinline__ void store_shared_tile(float (*as)[BM + APAD], float (*bs)[BN], int tid,
                                                  const float4 (&ar)[A_LOADS],
                                                  const float4 (&br)[B_LOADS]) {
    #pragma unroll
    for (int j = 0; j < A_LOADS; ++j) {
        const int idx = tid + j * THREADS;
        const int r = idx / (BK / 4);
        const int kq = idx % (BK / 4);
        as[kq * 4 + 0][r] = ar[j].x;   // transposed: As[k][m]
        as[kq * 4 + 1][r] = ar[j].y;
        as[kq * 4 + 2][r] = ar[j].z;
        as[kq * 4 + 3][r] = ar[j].w;
    }
    #pragma unroll
    for (int j = 0; j < B_LOADS; ++j) {
        const int idx = tid + j * THREADS;
        const int r = idx / (BN / 4);
        const int cq = idx % (BN / 4);
        *reinterpret_cast<float4*>(&bs[r][cq * 4]) = br[j];
    }
}

__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
sgemm_db_kernel(const float* __restrict__ A, const float* __restrict__ B,
                float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM + APAD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int tr = lane >> 3;   // 0..3 lane-row inside the warp
    const int tc = lane & 7;    // 0..7 lane-col inside the warp

    // Grouped swizzle of the 1D grid: GROUP_M block-rows sweep the block-columns together.
    const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int group_size = GROUP_M * grid_n;
    const int group_id = pid / group_size;
    const int first_m = group_id * GROUP_M;
    const int gsz = min(grid_m - first_m, GROUP_M);
    const int in_group = pid - group_id * group_size;
    const int bm = first_m + in_group % gsz;
    const int bn = in_group / gsz;
    const int row0 = bm * BM, col0 = bn * BN;

    // This lane's rows: a_m..a_m+3 and a_m+16..a_m+19; cols: b_n..b_n+3 and b_n+32..b_n+35.
    const int a_m = wm * WM + tr * 4;
    const int b_n = wn * WN + tc * 4;

    float acc[8][8];
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    float4 ar[A_LOADS], br[B_LOADS];
    const int num_tiles = (K + BK - 1) / BK;

    load_global_tile(A, B, M, N, K, row0, col0, 0, tid, ar, br);
    store_shared_tile(As[0], Bs[0], tid, ar, br);
    __syncthreads();

    for (int t = 0; t < num_tiles; ++t) {
        const int cur = t & 1;
        const bool has_next = (t + 1 < num_tiles);
        if (has_next) load_global_tile(A, B, M, N, K, row0, col0, (t + 1) * BK, tid, ar, br);

        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][a_m]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][a_m + 16]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][b_n]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][b_n + 32]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }

        if (has_next) store_shared_tile(As[cur ^ 1], Bs[cur ^ 1], tid, ar, br);
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = row0 + a_m + (i < 4 ? i : 12 + i);   // i>=4 -> a_m + 16 + (i - 4)
        if (row < M) {
            float* crow = C + (long long)row * N;
            const int c0 = col0 + b_n;
            if (c0 < N)
                *reinterpret_cast<float4*>(crow + c0) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            const int c1 = c0 + 32;
            if (c1 < N)
                *reinterpret_cast<float4*>(crow + c1) =
                    make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// General fallback (any shape / alignment): shared-memory tiled GEMM from the seed.
// ---------------------------------------------------------------------------------------------
constexpr int TILE = 32;
constexpr int WPT = 4;
constexpr int RTS = TILE / WPT;
static_assert(TILE % WPT == 0, "WPT must divide TILE");
static_assert(TILE * RTS <= 1024, "too many threads per block");

__global__ void matmul_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int row0 = blockIdx.y * TILE;
    const int col0 = blockIdx.x * TILE;

    float acc[WPT];
    #pragma unroll
    for (int w = 0; w < WPT; ++w) acc[w] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += TILE) {
        #pragma unroll
        for (int w = 0; w < WPT; ++w) {
            const int r = ty + w * RTS;
            const int a_row = row0 + r, a_col = k0 + tx;
            As[r][tx] = (a_row < M && a_col < K) ? A[(long long)a_row * K + a_col] : 0.0f;
            const int b_row = k0 + r, b_col = col0 + tx;
            Bs[r][tx] = (b_row < K && b_col < N) ? B[(long long)b_row * N + b_col] : 0.0f;
        }
        __syncthreads();
        float part[WPT];
        #pragma unroll
        for (int w = 0; w < WPT; ++w) part[w] = 0.0f;
        #pragma unroll
        for (int k = 0; k < TILE; ++k) {
            const float b = Bs[k][tx];
            #pragma unroll
            for (int w = 0; w < WPT; ++w) part[w] = fmaf(As[ty + w * RTS][k], b, part[w]);
        }
        #pragma unroll
        for (int w = 0; w < WPT; ++w) acc[w] += part[w];
        __syncthreads();
    }

    const int col = col0 + tx;
    #pragma unroll
    for (int w = 0; w < WPT; ++w) {
        const int row = row0 + ty + w * RTS;
        if (row < M && col < N) C[(long long)row * N + col] = acc[w];
    }
}
"""

kernels = compile_kernels(cuda_src, ["sgemm_db_kernel", "matmul_tiled_kernel"])
BM, BN = kernels.constant("BM"), kernels.constant("BN")
THREADS = (BM // 32) * (BN // 64) * 32
TILE, WPT = kernels.constant("TILE"), kernels.constant("WPT")


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
        if max(M, N, K) >= 1 << 31:
            raise ValueError("matmul: too large for 32-bit indices")
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        if M == 0 or N == 0:
            return C
        if K == 0:
            return C.zero_()

        fast = (K % 4 == 0 and N % 4 == 0 and A.data_ptr() % 16 == 0
                and B.data_ptr() % 16 == 0 and C.data_ptr() % 16 == 0)
        if fast:
            grid_m = (M + BM - 1) // BM
            grid_n = (N + BN - 1) // BN
            nblocks = grid_m * grid_n
            if nblocks >= 1 << 31:
                raise ValueError("matmul: grid too large")
            kernels.sgemm_db_kernel.launch(nblocks, THREADS, A, B, C, M, N, K)
            return C

        grid = ((N + TILE - 1) // TILE, (M + TILE - 1) // TILE)
        if grid[1] > 65535:
            raise ValueError("matmul: M too large for this grid")
        kernels.matmul_tiled_kernel.launch(grid, (TILE, TILE // WPT), A, B, C, M, N, K)
        return C
