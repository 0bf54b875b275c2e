"""Legitimate structural shortcut: torch.diag(A) @ B computed element-wise, out[i, j] = A[i] * B[i, j],
with float4 loads and stores. Exact (one rounding, as the GEMM's only nonzero term), and it moves
the problem's 134 MB instead of doing its 1.37e11 FLOP: the old FLOP-based floor rejected exactly
this as impossible_speed (KernelBench level 1, problem 12; issue 12).

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/diag_matmul.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor diag_scale_rows(torch::Tensor a, torch::Tensor b);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;

// Row r of out is a[r] times row r of b; each thread handles float4s of one row.
__global__ void diag_scale_rows_kernel(const float* __restrict__ a, const float4* __restrict__ b,
                                       float4* __restrict__ out, int64_t cols4) {
    const int64_t r = blockIdx.y;
    const float s = a[r];
    for (int64_t c = (int64_t)blockIdx.x * BLOCK + threadIdx.x; c < cols4;
         c += (int64_t)gridDim.x * BLOCK) {
        float4 v = b[r * cols4 + c];
        v.x *= s; v.y *= s; v.z *= s; v.w *= s;
        out[r * cols4 + c] = v;
    }
}

torch::Tensor diag_scale_rows(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.scalar_type() == at::kFloat &&
                b.scalar_type() == at::kFloat, "diag_scale_rows: float32 CUDA tensors");
    TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && a.size(0) == b.size(0) && b.size(1) % 4 == 0,
                "diag_scale_rows: a of N, b of N x M with M a multiple of 4");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    auto out = torch::empty_like(bc);
    const int64_t cols4 = bc.size(1) / 4;
    const dim3 grid((unsigned)((cols4 + BLOCK - 1) / BLOCK), (unsigned)bc.size(0));
    diag_scale_rows_kernel<<<grid, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        ac.data_ptr<float>(), reinterpret_cast<const float4*>(bc.data_ptr<float>()),
        reinterpret_cast<float4*>(out.data_ptr<float>()), cols4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

module = load_inline(name="fixture_diag_scale_rows", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["diag_scale_rows"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return module.diag_scale_rows(A, B)
