"""A second correct elementwise add, NVRTC form (block size 512): evaluated after the faults, in
the same evaluator."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 512;  // tune: 128 256 512
__global__ void add_kernel(const float* a, const float* b, float* c, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
"""
kernels = compile_kernels(cuda_src, ["add_kernel"])
BLOCK = kernels.constant("BLOCK")


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty_like(a)
        n = a.numel()
        kernels.add_kernel.launch((n + BLOCK - 1) // BLOCK, BLOCK, a, b, c, n)
        return c
