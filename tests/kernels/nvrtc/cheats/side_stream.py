"""Cheat 3, side stream: run a slow (one thread per row, ~ms) but correct kernel on a stream of its
own, so CUDA events recorded on the current stream see almost nothing. The timing synchronizes the
whole device and compares the host-measured time with the event time.

The NVRTC twin of tests/kernels/cheats/side_stream.py (evokernel.nvrtc): the same cheat, its
kernels compiled with NVRTC and launched from Python.

EXPECTED: reject side_stream
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import types

import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

# The NVRTC softmax kernel library shared verbatim by the NVRTC softmax_small fixtures (the twin
# of the load_inline fixtures' fixture_softmax_lib: the same kernels, the same three functions).
cuda_src = r"""
constexpr int BLOCK = 256;

// Tree reduction in shared memory (max or sum) over the BLOCK threads; all threads get it.
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

// Row begin + blockIdx.x of y = softmax(x, dim=1): block max, block sum of exp, write.
__global__ void softmax_block_kernel(const float* __restrict__ x, float* __restrict__ y,
                                     long long cols, long long begin) {
    __shared__ float sh[BLOCK];
    const float* xr = x + (begin + blockIdx.x) * cols;
    float* yr = y + (begin + blockIdx.x) * cols;
    float m = -__int_as_float(0x7f800000);
    for (long long i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce(m, sh, true);
    float s = 0.0f;
    for (long long i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
    s = block_reduce(s, sh, false);
    for (long long i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
}

// One thread per row, sequential (a Kahan-compensated sum keeps it FP32-accurate): slow.
__global__ void softmax_serial_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      long long rows, long long cols) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -__int_as_float(0x7f800000);
    for (long long i = 0; i < cols; ++i) m = fmaxf(m, xr[i]);
    float s = 0.0f, c = 0.0f;
    for (long long i = 0; i < cols; ++i) {
        const float v = expf(xr[i] - m) - c;
        const float t = s + v;
        c = (t - s) - v;
        s = t;
    }
    for (long long i = 0; i < cols; ++i) yr[i] = expf(xr[i] - m) / s;
}
"""

kernels = compile_kernels(cuda_src, ["softmax_block_kernel", "softmax_serial_kernel"])
BLOCK = kernels.constant("BLOCK")


def _check_input(x):
    if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 2 and x.is_contiguous()):
        raise RuntimeError("softmax: x must be a contiguous 2D float32 CUDA tensor")


def softmax_rows(x, y, begin, end):
    _check_input(x)
    if y.shape != x.shape or not y.is_contiguous() or y.dtype != torch.float32:
        raise RuntimeError("softmax_rows: y must be a contiguous float32 tensor shaped like x")
    if not 0 <= begin <= end <= x.shape[0]:
        raise RuntimeError("softmax_rows: bad row range")
    if end > begin:
        kernels.softmax_block_kernel.launch(end - begin, BLOCK, x, y, x.shape[1], begin)
    return y


def softmax_serial(x):
    _check_input(x)
    y = torch.empty_like(x)
    rows = x.shape[0]
    kernels.softmax_serial_kernel.launch((rows + 127) // 128, 128, x, y, rows, x.shape[1])
    return y


def softmax_rows_in_registers(x):
    _check_input(x)
    if x.shape[1] > 1024:
        raise RuntimeError("softmax_rows_in_registers: rows longer than 1024 elements do not "
                           "fit in registers")
    return softmax_rows(x, torch.empty_like(x), 0, x.shape[0])


lib = types.SimpleNamespace(softmax_rows=softmax_rows, softmax_serial=softmax_serial,
                            softmax_rows_in_registers=softmax_rows_in_registers)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):        # the cheat: no wait, no event on this stream
            return lib.softmax_serial(x.contiguous())
