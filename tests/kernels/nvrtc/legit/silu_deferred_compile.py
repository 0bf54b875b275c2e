"""Legitimate: nvrtc/silu_float4 with its kernel names built at run time (a list comprehension), so
the build step cannot read them without running the module and defers the compile to the GPU
worker, which compiles it when it imports the file (a "deferred_build" flag).

On the H200 (2026-12-03) every LLM-written candidate of this shape (6 in the ablation of issue
21) was rejected as `threads`: the worker's compile ran c++filt with the candidate on the stack.

EXPECTED: accept ok
PROBLEM: tests/kernels/problems/silu.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;  // tune: 128 256 512

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__global__ void silu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                 long long n4) {
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n4;
         i += (long long)gridDim.x * BLOCK) {
        float4 v = x[i];
        v.x = silu(v.x);
        v.y = silu(v.y);
        v.z = silu(v.z);
        v.w = silu(v.w);
        y[i] = v;
    }
}

__global__ void silu_tail_kernel(const float* __restrict__ x, float* __restrict__ y,
                                 long long start, long long n) {
    const long long i = start + threadIdx.x;
    if (i < n) y[i] = silu(x[i]);
}
"""

kernels = compile_kernels(cuda_src, [f"silu_{part}_kernel" for part in ("vec4", "tail")])
BLOCK = kernels.constant("BLOCK")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32):
            raise ValueError("silu_vec4: float32 CUDA tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        n4 = n // 4
        if x.data_ptr() % 16 or y.data_ptr() % 16:
            raise ValueError("silu_vec4: alignment")
        if n4 > 0:
            kernels.silu_vec4_kernel.launch(min((n4 + BLOCK - 1) // BLOCK, 8192), BLOCK, x, y, n4)
        if n % 4:
            kernels.silu_tail_kernel.launch(1, 4, x, y, n4 * 4, n)
        return y
