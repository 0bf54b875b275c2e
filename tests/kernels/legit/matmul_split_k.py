"""Legitimate: split-K SGEMM. K is cut into 4 slices; each block computes a 64x64 tile of one slice's
partial product in registers (4x4 per thread, FMA, FP32), partials go to a workspace, and a second
kernel adds the 4 partials in a fixed order. Same maths as cuBLAS's split-K, other summation order.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/matmul_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor matmul_split_k(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TM = 64, TN = 64, TK = 16, THREADS = 256, SPLIT_K = 4;

__global__ void matmul_partial_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                      float* __restrict__ part, int M, int N, int K, int chunk) {
    __shared__ float As[TK][TM];
    __shared__ float Bs[TK][TN];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
    const int k_begin = blockIdx.z * chunk, k_end = min(K, k_begin + chunk);
    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
        for (int t = threadIdx.x; t < TM * TK; t += THREADS) {
            const int r = t / TK, c = t % TK;
            As[c][r] = (row0 + r < M && k0 + c < k_end) ? A[(int64_t)(row0 + r) * K + k0 + c]
                                                         : 0.0f;
        }
        for (int t = threadIdx.x; t < TK * TN; t += THREADS) {
            const int r = t / TN, c = t % TN;
            Bs[r][c] = (k0 + r < k_end && col0 + c < N) ? B[(int64_t)(k0 + r) * N + col0 + c]
                                                         : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            float a[4], b[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx * 4 + j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* out = part + (int64_t)blockIdx.z * M * N;
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < M && c < N) out[(int64_t)r * N + c] = acc[i][j];
        }
}

__global__ void split_k_reduce_kernel(const float* __restrict__ part, float* __restrict__ C,
                                      int64_t mn) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < mn;
         i += (int64_t)gridDim.x * blockDim.x) {
        float s = part[i];
        #pragma unroll
        for (int z = 1; z < SPLIT_K; ++z) s += part[z * mn + i];
        C[i] = s;
    }
}

torch::Tensor matmul_split_k(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda() && A.scalar_type() == at::kFloat &&
                B.scalar_type() == at::kFloat && A.dim() == 2 && B.dim() == 2 &&
                A.size(1) == B.size(0), "matmul_split_k: float32 CUDA matrices that multiply");
    A = A.contiguous();
    B = B.contiguous();
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    auto part = torch::empty({SPLIT_K, M, N}, A.options());
    const int chunk = ((K + SPLIT_K - 1) / SPLIT_K + TK - 1) / TK * TK;
    auto stream = at::cuda::getCurrentCUDAStream();
    const dim3 grid((N + TN - 1) / TN, (M + TM - 1) / TM, SPLIT_K);
    matmul_partial_kernel<<<grid, THREADS, 0, stream>>>(A.data_ptr<float>(), B.data_ptr<float>(),
                                                         part.data_ptr<float>(), M, N, K, chunk);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const int64_t mn = (int64_t)M * N;
    split_k_reduce_kernel<<<(unsigned)std::min<int64_t>((mn + 255) / 256, 65535), 256, 0,
                            stream>>>(part.data_ptr<float>(), C.data_ptr<float>(), mn);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(name="fixture_matmul_split_k", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["matmul_split_k"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return module.matmul_split_k(A, B)
