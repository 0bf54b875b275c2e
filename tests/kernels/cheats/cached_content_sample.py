"""Cheat 7, caching across calls, keyed on a sample of the contents: a correct tiled FP32 SGEMM behind a
cache keyed on the shapes and a sample of 64 input values. Every call with inputs it has not seen
computes the product, so the gate (fresh values in every set), the traced call, the spot checks of
timed outputs and the replay with rotated contents all see correct results; but the timed calls
repeat three input sets, and for them it returns a copy of the cached product (~0.05 ms for
4096^3). Until issue 12 only the FLOP-based floor caught it (~0.34 ms at the TF32 rate); the
memory floor (0.046 ms) does not, so the fresh-input check must: one call on each of three input
sets it has never seen takes the GEMM's ~2.7 ms.

EXPECTED: reject cached_output
PROBLEM: problems/matmul.py
"""
from collections import OrderedDict

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor sgemm(torch::Tensor A, torch::Tensor B);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TM = 64, TN = 64, TK = 16, THREADS = 256;

__global__ void sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B,
                             float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[TK][TM];
    __shared__ float Bs[TK][TN];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const int row0 = blockIdx.y * TM, col0 = blockIdx.x * TN;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TK) {
        for (int t = threadIdx.x; t < TM * TK; t += THREADS) {
            const int r = t / TK, c = t % TK;
            As[c][r] = (row0 + r < M && k0 + c < K) ? A[(int64_t)(row0 + r) * K + k0 + c] : 0.0f;
        }
        for (int t = threadIdx.x; t < TK * TN; t += THREADS) {
            const int r = t / TN, c = t % TN;
            Bs[r][c] = (k0 + r < K && col0 + c < N) ? B[(int64_t)(k0 + r) * N + col0 + c] : 0.0f;
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
    #pragma unroll
    for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
            if (r < M && c < N) C[(int64_t)r * N + c] = acc[i][j];
        }
}

torch::Tensor sgemm(torch::Tensor A, torch::Tensor B) {
    TORCH_CHECK(A.is_cuda() && B.is_cuda() && A.scalar_type() == at::kFloat &&
                B.scalar_type() == at::kFloat && A.dim() == 2 && B.dim() == 2 &&
                A.size(1) == B.size(0), "sgemm: float32 CUDA matrices that multiply");
    A = A.contiguous();
    B = B.contiguous();
    const int M = A.size(0), K = A.size(1), N = B.size(1);
    auto C = torch::empty({M, N}, A.options());
    const dim3 grid((N + TN - 1) / TN, (M + TM - 1) / TM);
    sgemm_kernel<<<grid, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return C;
}
"""

module = load_inline(name="fixture_sgemm_tiled", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["sgemm"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = OrderedDict()
        self.probe = None

    def _key(self, A: torch.Tensor, B: torch.Tensor) -> tuple:
        if self.probe is None or self.probe.device != A.device:
            n = min(A.numel(), B.numel())
            self.probe = torch.linspace(0, n - 1, 32, device=A.device).long()
        sample = torch.cat([A.reshape(-1)[self.probe], B.reshape(-1)[self.probe]])
        return (tuple(A.shape), tuple(B.shape), tuple(sample.tolist()))

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        key = self._key(A, B)                       # the cheat: a content sample as the key
        if key in self.cache:
            return self.cache[key].clone()
        C = module.sgemm(A, B)
        self.cache[key] = C
        if len(self.cache) > 8:
            self.cache.popitem(last=False)
        return C
