"""Legitimate, and short: the same one-block-per-row warp-shuffle row sums on a 256x4096 matrix,
a few microseconds on an H200 (under 10 us). Like axpy_tiny_float4, it must not be taken for
side-stream work whatever the host's load (issue 12: the rowsum fixtures were, at 0.04 ms).

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/rowsum_tiny.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Two row-sum kernels, shared verbatim by the rowsum fixtures (one build for both).
cpp_src = """
torch::Tensor rowsum_warp(torch::Tensor x);
torch::Tensor rowsum_atomic(torch::Tensor x);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 256;
constexpr int CHUNK = 2048;   // columns per block in rowsum_atomic

// Warp-shuffle butterfly, then the per-warp sums in shared memory; thread 0 gets the total.
__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < BLOCK / 32; ++w) r += sh[w];
    return r;
}

// One block per row, float4 loads, per-thread partial sums, warp-shuffle tree.
__global__ void rowsum_warp_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int64_t cols) {
    __shared__ float sh[BLOCK / 32];
    const float4* xr = reinterpret_cast<const float4*>(x + blockIdx.x * cols);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols / 4; i += BLOCK) {
        const float4 v = xr[i];
        s += (v.x + v.y) + (v.z + v.w);
    }
    const float total = block_sum(s, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = total;
}

// A grid of (row, chunk) blocks; each adds its chunk's sum into y[row] with atomicAdd, so the
// order of the chunk sums changes from run to run (nondeterministic at rounding level).
__global__ void rowsum_atomic_kernel(const float* __restrict__ x, float* __restrict__ y,
                                     int64_t cols) {
    __shared__ float sh[BLOCK / 32];
    const int64_t c0 = (int64_t)blockIdx.y * CHUNK;
    const int64_t c1 = c0 + CHUNK < cols ? c0 + CHUNK : cols;
    const float* xr = x + blockIdx.x * cols;
    float s = 0.0f;
    for (int64_t i = c0 + threadIdx.x; i < c1; i += BLOCK) s += xr[i];
    const float total = block_sum(s, sh);
    if (threadIdx.x == 0) atomicAdd(y + blockIdx.x, total);
}

static torch::Tensor checked(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2,
                "rowsum: x must be a 2D float32 CUDA tensor");
    return x.contiguous();
}

torch::Tensor rowsum_warp(torch::Tensor x) {
    x = checked(x);
    TORCH_CHECK(x.size(1) % 4 == 0, "rowsum_warp: columns must be a multiple of 4");
    auto y = torch::empty({x.size(0)}, x.options());
    rowsum_warp_kernel<<<(unsigned)x.size(0), BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor rowsum_atomic(torch::Tensor x) {
    x = checked(x);
    auto y = torch::zeros({x.size(0)}, x.options());
    const dim3 grid((unsigned)x.size(0), (unsigned)((x.size(1) + CHUNK - 1) / CHUNK));
    rowsum_atomic_kernel<<<grid, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

lib = load_inline(name="fixture_rowsum_lib", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["rowsum_warp", "rowsum_atomic"], extra_cuda_cflags=["-O3"],
                  verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return lib.rowsum_warp(x)
