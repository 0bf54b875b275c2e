"""Seed kernel for matmul: shared-memory tiled FP32 GEMM, each thread computes WPT outputs of a column."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>

// A TILE x TILE block of C per thread block; block = (TILE, TILE / WPT) threads.
// Thread (tx, ty) computes C[row0 + ty + w * RTS][col0 + tx] for w = 0 .. WPT-1.
constexpr int TILE = 32;  // tune: 16 32
constexpr int WPT = 4;    // tune: 1 2 4 8
constexpr int RTS = TILE / WPT;
static_assert(TILE % WPT == 0, "WPT must divide TILE");
static_assert(TILE * RTS <= 1024, "too many threads per block");

__global__ void matmul_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x;               // column inside the tile
    const int ty = threadIdx.y;               // row group inside the tile
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
            As[r][tx] = (a_row < M && a_col < K) ? A[(int64_t)a_row * K + a_col] : 0.0f;
            const int b_row = k0 + r, b_col = col0 + tx;
            Bs[r][tx] = (b_row < K && b_col < N) ? B[(int64_t)b_row * N + b_col] : 0.0f;
        }
        __syncthreads();
        // Sum each K-tile into its own partial, then add it to the running total:
        // a two-level summation, no less accurate than one long FP32 accumulation.
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
        if (row < M && col < N) C[(int64_t)row * N + col] = acc[w];
    }
}

torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_cuda: A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat,
                "matmul_cuda: A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2, "matmul_cuda: A and B must be 2D");
    TORCH_CHECK(A.size(1) == B.size(0), "matmul_cuda: inner dimensions differ");
    const c10::cuda::CUDAGuard guard(A.device());
    A = A.contiguous();
    B = B.contiguous();
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    TORCH_CHECK(M < (1LL << 31) && N < (1LL << 31) && K < (1LL << 31), "matmul_cuda: too large");
    auto C = torch::empty({M, N}, A.options());
    if (M == 0 || N == 0) return C;
    if (K == 0) return C.zero_();
    const dim3 block(TILE, RTS);
    const dim3 grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    TORCH_CHECK(grid.y <= 65535, "matmul_cuda: M too large for this grid");
    matmul_tiled_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)M, (int)N, (int)K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(
    name="matmul_seed",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["matmul_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return module.matmul_cuda(A, B)
