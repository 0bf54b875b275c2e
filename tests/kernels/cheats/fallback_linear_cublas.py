"""Cheat 12, reference fallback for the main work: F.linear (cuBLAS, the reference's own GEMM) does
all of the arithmetic, and the candidate's own CUDA kernel does only the ReLU. The profile shows
the reference's main kernel, a cuBLAS GEMM, among the candidate's kernels.

EXPECTED: reject reference_fallback
PROBLEM: tests/kernels/problems/linear_relu.py
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor relu_inplace(torch::Tensor y);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void relu_kernel(float* __restrict__ y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = fmaxf(y[i], 0.0f);
}

torch::Tensor relu_inplace(torch::Tensor y) {
    TORCH_CHECK(y.is_cuda() && y.is_contiguous() && y.scalar_type() == at::kFloat,
                "relu_inplace: a contiguous float32 CUDA tensor");
    const int64_t n = y.numel();
    relu_kernel<<<(unsigned)std::min<int64_t>((n + 255) / 256, 4096), 256, 0,
                  at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

module = load_inline(name="fixture_relu_inplace", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["relu_inplace"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.fc.weight, self.fc.bias)   # the cheat: cuBLAS does the GEMM
        return module.relu_inplace(y.contiguous())
