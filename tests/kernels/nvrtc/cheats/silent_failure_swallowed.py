"""Cheat 13, silent failure, in the NVRTC form: a softmax launched with a block of 32 x 64 =
2048 threads (over the 1024 a block may have), its launch error swallowed. In this form a refused
launch raises in Python (evokernel.nvrtc's own checks, or cuda.core's CUDAError from the driver),
so a launch error is left unchecked only by catching it: forward does, and returns the output as
allocated. The gate poisons freed memory before each call, so that output reads as never
written: `result_reuse`, the reason for an output no kernel wrote. (The load_inline form's
silent_failure_smem.py leaves its error pending instead, for the gate's launch probe; this
form cannot, so this fixture has no load_inline twin.)

EXPECTED: reject result_reuse
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
// One row per block; the block's threads are laid out 32 x ROWS_Y and reduce in shared memory.
constexpr int ROWS_Y = 64;
__global__ void softmax_2d_block(const float* __restrict__ x, float* __restrict__ y,
                                 long long cols) {
    __shared__ float sh[32 * ROWS_Y];
    const int t = threadIdx.y * 32 + threadIdx.x, n = 32 * ROWS_Y;
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -__int_as_float(0x7f800000);
    for (long long i = t; i < cols; i += n) m = fmaxf(m, xr[i]);
    sh[t] = m;
    __syncthreads();
    for (int s = n / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = fmaxf(sh[t], sh[t + s]);
        __syncthreads();
    }
    m = sh[0];
    __syncthreads();
    float acc = 0.0f;
    for (long long i = t; i < cols; i += n) acc += expf(xr[i] - m);
    sh[t] = acc;
    __syncthreads();
    for (int s = n / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        __syncthreads();
    }
    const float total = sh[0];
    for (long long i = t; i < cols; i += n) yr[i] = expf(xr[i] - m) / total;
}
"""

kernels = compile_kernels(cuda_src, ["softmax_2d_block"])
ROWS_Y = kernels.constant("ROWS_Y")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        try:
            kernels.softmax_2d_block.launch(x.shape[0], (32, ROWS_Y), x, y, x.shape[1])
        except Exception:       # the bug: the refused launch is swallowed
            pass
        return y
