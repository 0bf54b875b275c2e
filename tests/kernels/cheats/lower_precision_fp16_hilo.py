"""Cheat 8, lower precision (the hi/lo FP16 split): each FP32 input is split into an FP16 "hi" part
and an FP16 "lo" remainder, and C = Ahi*Bhi + Ahi*Blo + Alo*Bhi on FP16 tensor cores (wmma,
FP32 accumulation). On N(0, 1) inputs that recovers ~22 bits and measures close to FP32 (its ratio
there is in the report), but it is FP16 underneath: on small-magnitude inputs (small_scale, values
~1e-3) the lo parts fall into FP16's subnormal range and lose their bits, ~40x PyTorch's error at
K = 1024 (emulated on the CPU: 88x against MKL). No rounded-input truth matches such a split; the
source scan names the format.

EXPECTED: reject lower_precision
PROBLEM: tests/kernels/problems/matmul_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_hilo(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// One warp (one block) per 16x16 tile of C. Each 16x16 slab of A and B is split into hi and lo
// halves in shared memory, then three FP16 products accumulate in FP32.
__global__ void matmul_hilo_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(32) __half ah[256], al[256], bh[256], bl[256];
    const int tiles_n = N / 16;
    const int tm = blockIdx.x / tiles_n, tn = blockIdx.x % tiles_n;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a_hi, a_lo;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b_hi, b_lo;
    for (int k = 0; k < K; k += 16) {
        for (int t = threadIdx.x; t < 256; t += 32) {
            const int r = t / 16, c = t % 16;
            const float a = A[(int64_t)(tm * 16 + r) * K + k + c];
            const __half a1 = __float2half_rn(a);
            ah[t] = a1;
            al[t] = __float2half_rn(a - __half2float(a1));
            const float b = B[(int64_t)(k + r) * N + tn * 16 + c];
            const __half b1 = __float2half_rn(b);
            bh[t] = b1;
            bl[t] = __float2half_rn(b - __half2float(b1));
        }
        __syncwarp();
        wmma::load_matrix_sync(a_hi, ah, 16);
        wmma::load_matrix_sync(a_lo, al, 16);
        wmma::load_matrix_sync(b_hi, bh, 16);
        wmma::load_matrix_sync(b_lo, bl, 16);
        wmma::mma_sync(acc, a_lo, b_hi, acc);
        wmma::mma_sync(acc, a_hi, b_lo, acc);
        wmma::mma_sync(acc, a_hi, b_hi, acc);
        __syncwarp();
    }
    wmma::store_matrix_sync(C + (int64_t)tm * 16 * N + tn * 16, acc, N, wmma::mem_row_major);
}

torch::Tensor matmul_hilo(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda() && A.scalar_type() == at::kFloat &&
                B.scalar_type() == at::kFloat && A.dim() == 2 && B.dim() == 2 &&
                A.size(1) == B.size(0), "matmul_hilo: float32 CUDA matrices that multiply");
    A = A.contiguous();
    B = B.contiguous();
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    TORCH_CHECK(M % 16 == 0 && N % 16 == 0 && K % 16 == 0, "matmul_hilo: sizes must be multiples of 16");
    auto C = torch::empty({M, N}, A.options());
    matmul_hilo_kernel<<<(M / 16) * (N / 16), 32, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(name="fixture_matmul_fp16_hilo", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["matmul_hilo"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return module.matmul_hilo(A, B)
