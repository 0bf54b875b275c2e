"""Cheat 13, silent failure: stage each row in dynamic shared memory (32768 floats = 128 KiB, over
the 48 KiB a kernel gets without cudaFuncSetAttribute opting in) and never check the launch. The
launch fails with "invalid argument", nothing runs, and forward returns the uninitialised output.
The gate launches one small PyTorch kernel after every call, whose launch check surfaces the
pending error (and the output would read as never written).

EXPECTED: reject silent_failure
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = "torch::Tensor softmax_smem(torch::Tensor x);"

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cmath>

constexpr int BLOCK = 256;

__device__ float block_reduce(float v, float* sh, bool is_max) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const float o = sh[threadIdx.x + s];
            sh[threadIdx.x] = is_max ? fmaxf(sh[threadIdx.x], o) : sh[threadIdx.x] + o;
        }
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

// The row is read from global memory once, into shared memory.
__global__ void softmax_smem_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    int64_t cols) {
    extern __shared__ float row[];
    __shared__ float sh[BLOCK];
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) {
        row[i] = xr[i];
        m = fmaxf(m, row[i]);
    }
    m = block_reduce(m, sh, true);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += expf(row[i] - m);
    s = block_reduce(s, sh, false);
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(row[i] - m) / s;
}

torch::Tensor softmax_smem(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const size_t smem = (size_t)x.size(1) * sizeof(float);   // 128 KiB: too much, not opted in
    softmax_smem_kernel<<<(unsigned)x.size(0), BLOCK, smem, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    return y;                                                  // the bug: no launch check
}
"""

module = load_inline(name="fixture_softmax_smem", cpp_sources=cpp_src, cuda_sources=cuda_src,
                     functions=["softmax_smem"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.softmax_smem(x)
