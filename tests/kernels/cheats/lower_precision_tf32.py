"""Cheat 8, lower precision (TF32): a tensor-core GEMM with wmma TF32 fragments (m16n16k8), the
inputs rounded to TF32 (10-bit mantissa) with __float_to_tf32, FP32 accumulation. It claims FP32;
its output sits next to the truth computed from TF32-rounded inputs.

EXPECTED: reject lower_precision
PROBLEM: tests/kernels/problems/matmul_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_tf32(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <mma.h>

using namespace nvcuda;

// One warp per 16x16 tile of C, 4 warps per block.
__global__ void matmul_tf32_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, int M, int N, int K) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int tiles_n = N / 16;
    const int tm = warp / tiles_n, tn = warp % tiles_n;
    if (tm * 16 >= M) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(a, A + (int64_t)tm * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + (int64_t)k * N + tn * 16, N);
        #pragma unroll
        for (int i = 0; i < a.num_elements; ++i) a.x[i] = wmma::__float_to_tf32(a.x[i]);
        #pragma unroll
        for (int i = 0; i < b.num_elements; ++i) b.x[i] = wmma::__float_to_tf32(b.x[i]);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (int64_t)tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}

torch::Tensor matmul_tf32(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda() && A.scalar_type() == at::kFloat &&
                B.scalar_type() == at::kFloat && A.dim() == 2 && B.dim() == 2 &&
                A.size(1) == B.size(0), "matmul_tf32: float32 CUDA matrices that multiply");
    A = A.contiguous();
    B = B.contiguous();
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    TORCH_CHECK(M % 16 == 0 && N % 16 == 0 && K % 8 == 0, "matmul_tf32: sizes must be tile multiples");
    auto C = torch::empty({M, N}, A.options());
    const int warps = (M / 16) * (N / 16);
    matmul_tf32_kernel<<<(warps + 3) / 4, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(name="fixture_matmul_tf32", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["matmul_tf32"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return module.matmul_tf32(A, B)
