# evokernel: best kernel of run evokernel-s1 for problem softmax
# candidate 9c5bf92bfd8d7a6f, generation 0, operator seed; speedup 0.544x over eager (1.0523 ms -> 1.9356 ms, 405% of floor)
# idea: seed kernel (round-0 port)
# check it: evokernel check softmax results/ablation-2026-12-02/softmax/evokernel-s1/best.py
"""Seed kernel for softmax (dim=1), NVRTC form: one block per row; block max, block sum of exp,
then write. The same kernel as ``seeds/softmax.py``, compiled with NVRTC (evokernel.nvrtc)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;  // tune: 64 128 256 512 1024

// Tree reduction in shared memory over all BLOCK threads; valid for any BLOCK >= 1.
// Every thread gets the result. `sh` holds BLOCK floats.
__device__ float block_reduce_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) {
            const float o = sh[threadIdx.x + s];
            const float m = sh[threadIdx.x];
            sh[threadIdx.x] = (o > m || isnan(o)) ? o : m;   // propagate NaN like PyTorch
        }
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();   // sh may be reused right after
    return r;
}

__device__ float block_reduce_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    int p = 1;
    while (p < BLOCK) p <<= 1;
    for (int s = p >> 1; s > 0; s >>= 1) {
        if (threadIdx.x < s && threadIdx.x + s < BLOCK) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

// y[r][i] = exp(x[r][i] - max_r) / sum_j exp(x[r][j] - max_r). One block per row.
__global__ void softmax_row_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   long long rows, long long cols) {
    __shared__ float sh[BLOCK];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -__int_as_float(0x7f800000);   // -inf
        for (long long i = threadIdx.x; i < cols; i += BLOCK) {
            const float v = xr[i];
            m = (v > m || isnan(v)) ? v : m;
        }
        m = block_reduce_max(m, sh);
        float s = 0.0f;
        for (long long i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
        s = block_reduce_sum(s, sh);
        for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
    }
}
"""

kernels = compile_kernels(cuda_src, ["softmax_row_kernel"])
BLOCK = kernels.constant("BLOCK")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2):
            raise ValueError("softmax: x must be a 2D float32 CUDA tensor (softmax over dim 1)")
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, cols = x.shape
        if rows == 0 or cols == 0:
            return y
        kernels.softmax_row_kernel.launch(min(rows, 1 << 30), BLOCK, x, y, rows, cols)
        return y
