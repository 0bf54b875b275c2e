"""Adversarial fixture for the matmul problem: a plausible, fast tensor-core GEMM that silently
rounds A and B to FP16 (__float2half while staging tiles in shared memory) and multiplies them with
wmma half fragments accumulating in FP32. Its output is FP32 with the right shape, but its error is
~1000x PyTorch's strict-FP32 error, so the precision gate must reject it as lower precision.

EXPECTED: reject lower_precision
PROBLEM: problems/matmul.py
CHECK: 8
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// 64x64 tile of C per block of 4 warps (2x2), each warp a 32x32 sub-tile of 2x2 16x16 fragments.
constexpr int BM = 64, BN = 64, BK = 32, THREADS = 128;
constexpr int LDA = BK + 8, LDB = BN + 8;   // padded, multiples of 8 halves as wmma requires

__global__ void matmul_fp16_wmma_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(32) __half As[BM * LDA];
    __shared__ __align__(32) __half Bs[BK * LDB];
    const int warp = threadIdx.x / 32;
    const int wm = warp / 2, wn = warp % 2;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int t = threadIdx.x; t < BM * BK; t += THREADS) {
            const int r = t / BK, c = t % BK;
            As[r * LDA + c] = __float2half(A[(int64_t)(row0 + r) * K + k0 + c]);  // the cheat
        }
        for (int t = threadIdx.x; t < BK * BN; t += THREADS) {
            const int r = t / BN, c = t % BN;
            Bs[r * LDB + c] = __float2half(B[(int64_t)(k0 + r) * N + col0 + c]);  // the cheat
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
            #pragma unroll
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * LDA + kk, LDA);
            #pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(b[j], Bs + kk * LDB + wn * 32 + j * 16, LDB);
            #pragma unroll
            for (int i = 0; i < 2; ++i)
                #pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
            float* c = C + (int64_t)(row0 + wm * 32 + i * 16) * N + col0 + wn * 32 + j * 16;
            wmma::store_matrix_sync(c, acc[i][j], N, wmma::mem_row_major);
        }
}

torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda(), "matmul_cuda: A and B must be CUDA tensors");
    TORCH_CHECK(A.scalar_type() == at::kFloat && B.scalar_type() == at::kFloat,
                "matmul_cuda: A and B must be float32");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0),
                "matmul_cuda: shapes do not multiply");
    const c10::cuda::CUDAGuard guard(A.device());
    A = A.contiguous();
    B = B.contiguous();
    const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
    TORCH_CHECK(M % BM == 0 && N % BN == 0 && K % BK == 0 && M > 0 && N > 0 && K > 0,
                "matmul_cuda: sizes must be multiples of 64 (M, N) and 32 (K)");
    auto C = torch::empty({M, N}, A.options());
    const dim3 grid((unsigned)(N / BN), (unsigned)(M / BM));
    matmul_fp16_wmma_kernel<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)M, (int)N, (int)K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(
    name="matmul_fp16_fixture",
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
