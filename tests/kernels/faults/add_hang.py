"""Fault fixture: the kernel never ends (while(1)); the worker must be killed."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/cuda/CUDAContext.h>
constexpr int BLOCK = 256;  // tune: 128 256 512
__global__ void add_kernel(const float* a, const float* b, float* c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    // An empty endless loop may be deleted by the compiler (C++ forward progress); a sleep in
    // the loop is a side effect it must keep.
    while (true) { __nanosleep(1000); }
    if (i < n) c[i] = a[i] + b[i];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    add_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""
cpp_src = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"
module = load_inline(name="add_hang", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["add"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return module.add(a.contiguous(), b.contiguous())
