"""Sanitize fixture: c = a + b with an off-by-one bound (``i <= n``): the last thread reads
a[n] and b[n] and writes c[n], one element past each allocation. `evokernel check --sanitize`
(memcheck, caching allocator off) must report the invalid accesses.

Whether the gate sees a fault depends on what lies past the tensors. On the H200 (2026-12-02,
results/h200-2026-12-02-s8/sanitize_add_off_by_one.txt) each 16 MiB tensor had a cudaMalloc
segment of its own (PyTorch's caching allocator rounds requests of 10 MiB and more to 2 MiB and,
with no larger free block cached, allocates each anew), a[n] was unmapped, and the gate
rejected the kernel as cuda_fault;
memcheck named the read ("1 bytes after the nearest allocation ... of size 16,777,216 bytes").

EXPECTED: reject cuda_fault (H200); --sanitize: memcheck errors (invalid __global__ read)
PROBLEM: tests/kernels/faults/problem_add.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/cuda/CUDAContext.h>
constexpr int BLOCK = 256;
__global__ void add_off_by_one(const float* a, const float* b, float* c, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) c[i] = a[i] + b[i];          // planted: i == n is out of bounds
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    add_off_by_one<<<(n + BLOCK) / BLOCK, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""
cpp_src = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"
module = load_inline(name="add_off_by_one", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["add"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return module.add(a.contiguous(), b.contiguous())
