"""Legitimate, and short: y = 2x + 1 fused into one float4 kernel over 2^20 elements, a few
microseconds on an H200 (under 10 us). The spin-mode whole-device time carries ~0.03-0.05 ms of
host latency, more than the kernel; the side-stream verdict must not depend on it (issue 12).

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/axpy_tiny.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The axpy kernel library shared verbatim by the axpy_tiny fixtures (one build for all).
cpp_src = """
torch::Tensor axpy_fused(torch::Tensor x);
torch::Tensor axpy_few_blocks(torch::Tensor x);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;

// y = 2x + 1, float4 loads and stores in a grid-stride loop over n4 float4s.
__global__ void axpy_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * BLOCK) {
        float4 v = x[i];
        v.x = fmaf(v.x, 2.0f, 1.0f); v.y = fmaf(v.y, 2.0f, 1.0f);
        v.z = fmaf(v.z, 2.0f, 1.0f); v.w = fmaf(v.w, 2.0f, 1.0f);
        y[i] = v;
    }
}

static torch::Tensor launch(torch::Tensor x, unsigned blocks) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
                x.numel() % 4 == 0, "axpy: a contiguous float32 CUDA tensor of 4k elements");
    auto y = torch::empty_like(x);
    axpy_kernel<<<blocks, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(x.data_ptr<float>()),
        reinterpret_cast<float4*>(y.data_ptr<float>()), x.numel() / 4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

// Enough blocks for every float4 at once: a few microseconds for 2^20 elements.
torch::Tensor axpy_fused(torch::Tensor x) {
    return launch(x, (unsigned)((x.numel() / 4 + BLOCK - 1) / BLOCK));
}

// Only 8 blocks: each thread loops over many float4s, a few tens of microseconds.
torch::Tensor axpy_few_blocks(torch::Tensor x) { return launch(x, 8); }
"""

lib = load_inline(name="fixture_axpy_lib", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["axpy_fused", "axpy_few_blocks"], extra_cuda_cflags=["-O3"],
                  verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lib.axpy_fused(x)
