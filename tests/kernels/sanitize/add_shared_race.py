"""Sanitize fixture: c = a + b staged through shared memory with the barrier left out. Each
thread writes its sum to s[t] and then stores s[BLOCK - 1 - t], which another warp wrote, with
no __syncthreads() between: a read-after-write hazard on shared memory. On the H200 the output
is wrong in many slices, so the gate rejects it on its own (partial_output on this problem,
results/h200-2026-12-02-s10; non_finite on 2^22 floats, s8); `evokernel check --sanitize`
(racecheck) must report the race, the cause the gate's verdict does not name.

EXPECTED: --sanitize: racecheck error (race between write and read access)
PROBLEM: tests/kernels/sanitize/problem_add_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <ATen/cuda/CUDAContext.h>
constexpr int BLOCK = 256;
__global__ void add_shared_race(const float* a, const float* b, float* c, long n) {
    __shared__ float s[BLOCK];
    long base = (long)blockIdx.x * BLOCK;
    int t = threadIdx.x;
    if (base + t < n) s[t] = a[base + t] + b[base + t];
    // planted: no __syncthreads() here
    int r = BLOCK - 1 - t;
    if (base + r < n) c[base + r] = s[r];
}
torch::Tensor add(torch::Tensor a, torch::Tensor b) {
    auto c = torch::empty_like(a);
    long n = a.numel();
    add_shared_race<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""
cpp_src = "torch::Tensor add(torch::Tensor a, torch::Tensor b);"
module = load_inline(name="add_shared_race", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["add"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return module.add(a.contiguous(), b.contiguous())
