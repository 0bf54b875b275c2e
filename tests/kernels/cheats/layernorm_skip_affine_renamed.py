"""Lead's note (LayerNorm's weight = 1, bias = 0): layernorm_skip_affine with the parameters under
names of its own (gamma, beta), so the reference's state_dict does not load into it by name. The
gate matches them to the reference's by shape and original value (gamma = 1 -> ln.weight,
beta = 0 -> ln.bias; gate_reference.match_constant_parameters), loads the perturbed values, and
the skipped affine step is wrong by ~10%. Before that match existed this kernel was judged
against the unperturbed reference and passed.

EXPECTED: reject wrong_function
PROBLEM: tests/kernels/problems/layernorm_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A two-pass LayerNorm kernel, shared verbatim by the layernorm_small fixtures (one build).
cpp_src = ("torch::Tensor layernorm_two_pass(torch::Tensor x, torch::Tensor weight, "
           "torch::Tensor bias, double eps);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int BLOCK = 1024;

// Warp-shuffle tree, then one warp over the per-warp sums; every thread gets the total.
__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (BLOCK >> 5) ? sh[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    const float r = sh[0];
    __syncthreads();
    return r;
}

// One block per row. Pass 1: mean of the data shifted by its first element (the shifted sums
// stay small, so offset data loses nothing); pass 2: sum of squared deviations; pass 3: write.
__global__ void ln_two_pass_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ y,
                                   int64_t n, float eps) {
    __shared__ float sh[32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    const float shift = xr[0];
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += BLOCK) s += xr[i] - shift;
    const float mean = shift + block_sum(s, sh) / (float)n;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += BLOCK) {
        const float d = xr[i] - mean;
        q = fmaf(d, d, q);
    }
    const float rstd = 1.0f / sqrtf(block_sum(q, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += BLOCK) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
}

torch::Tensor layernorm_two_pass(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                 double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "layernorm: x must be float32 CUDA");
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t n = weight.numel();
    TORCH_CHECK(n > 0 && x.numel() % n == 0 && bias.numel() == n, "layernorm: bad shapes");
    auto y = torch::empty_like(x);
    const int64_t rows = x.numel() / n;
    ln_two_pass_kernel<<<(unsigned)rows, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        y.data_ptr<float>(), n, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

lib = load_inline(name="fixture_layernorm_two_pass", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["layernorm_two_pass"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(normalized_shape))
        self.beta = nn.Parameter(torch.zeros(normalized_shape))
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ones = torch.ones_like(self.gamma)          # the cheat: "weight is 1 and bias is 0"
        zeros = torch.zeros_like(self.beta)
        return lib.layernorm_two_pass(x, ones, zeros, self.eps)
