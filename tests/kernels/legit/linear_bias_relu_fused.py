"""Legitimate: ReLU(x @ W^T + b) as one tiled FP32 GEMM kernel (64x64 tile, 4x4 per thread, FMA)
whose epilogue adds the bias and applies the ReLU before the single store: a fused epilogue, no
intermediate tensor. Uses the module's own nn.Linear parameters.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/linear_relu.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TM = 64, TN = 64, TK = 16, THREADS = 256;

// Y[m][n] = relu(sum_k X[m][k] * W[n][k] + bias[n]); W is nn.Linear's [out, in] weight.
__global__ void linear_relu_kernel(const float* __restrict__ X, const float* __restrict__ W,
                                   const float* __restrict__ bias, float* __restrict__ Y,
                                   int M, int N, int K) {
    __shared__ float Xs[TK][TM];
    __shared__ float Ws[TK][TN + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int t = threadIdx.x; t < TM * TK; t += THREADS) {
            const int r = t / TK, c = t % TK;
            Xs[c][r] = (row0 + r < M && k0 + c < K) ? X[(int64_t)(row0 + r) * K + k0 + c] : 0.0f;
            Ws[c][r] = (col0 + r < N && k0 + c < K) ? W[(int64_t)(col0 + r) * K + k0 + c] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TK; ++kk) {
            float a[4], b[4];
            #pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = Xs[kk][ty * 4 + i];
            #pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = Ws[kk][tx * 4 + j];
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < M && c < N) {
                const float v = acc[i][j] + bias[c];          // the fused epilogue
                Y[(int64_t)r * N + c] = v > 0.0f ? v : 0.0f;
            }
        }
}

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2 && w.dim() == 2 &&
                x.size(1) == w.size(1) && b.numel() == w.size(0), "linear_relu: bad arguments");
    x = x.contiguous();
    w = w.contiguous();
    b = b.contiguous();
    const int M = x.size(0), K = x.size(1), N = w.size(0);
    auto y = torch::empty({M, N}, x.options());
    const dim3 grid((N + TN - 1) / TN, (M + TM - 1) / TM);
    linear_relu_kernel<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
        M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="fixture_linear_relu_fused", cpp_sources=cpp_src,
                     cuda_sources=cuda_src, functions=["linear_relu"],
                     extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.linear_relu(x, self.fc.weight, self.fc.bias)
