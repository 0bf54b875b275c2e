"""Legitimate partial replacement (KernelBench level 1, problem 98): the KL divergence's element-wise
part, t * (log t - log p), in a kernel of its own, then torch.sum and the division by the batch
size left to PyTorch. The sum launches the reference's own reduce_kernel; the old rule rejected
that as reference_fallback. Its own kernel takes most of the candidate's GPU time, so the share
rule accepts it and reports the share (issue 12).

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/kl_div.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor kl_terms(torch::Tensor p, torch::Tensor t);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;

// out = t * (log t - log p), element-wise; t = 0 gives 0 (as PyTorch's xlogy-style kl_div).
__global__ void kl_terms_kernel(const float* __restrict__ p, const float* __restrict__ t,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * BLOCK) {
        const float ti = t[i];
        out[i] = ti > 0.0f ? ti * (logf(ti) - logf(p[i])) : 0.0f;
    }
}

torch::Tensor kl_terms(torch::Tensor p, torch::Tensor t) {
    TORCH_CHECK(p.is_cuda() && t.is_cuda() && p.scalar_type() == at::kFloat &&
                t.scalar_type() == at::kFloat && p.sizes() == t.sizes(),
                "kl_terms: two float32 CUDA tensors of one shape");
    auto pc = p.contiguous();
    auto tc = t.contiguous();
    auto out = torch::empty_like(pc);
    const int64_t n = pc.numel();
    const unsigned blocks = (unsigned)std::min<int64_t>((n + BLOCK - 1) / BLOCK, 4096);
    kl_terms_kernel<<<blocks, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        pc.data_ptr<float>(), tc.data_ptr<float>(), out.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

module = load_inline(name="fixture_kl_terms", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["kl_terms"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.sum(module.kl_terms(predictions, targets)) / predictions.size(0)
