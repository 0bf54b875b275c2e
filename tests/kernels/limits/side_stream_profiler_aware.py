"""A known limit, not a gate-report fixture: a side-stream cheat aware of the profiler. The slow
serial softmax runs on a stream of its own, except while torch.profiler records (then on the
current stream, as an honest kernel). The traced call sees nothing wrong; the timed calls hide
milliseconds of work. The whole-device time of the timing loop shows it when the host is quiet
(results/h200-2026-12-01-s5/call2: 17.85 ms against 0.0013 ms by events), but that comparison
decides nothing under host load (evokernel.timing.interleaved.host_quiet), so on a busy host this
cheat passes. In-process code can always tell it is being traced; README's threat model says so.

EXPECTED: reject side_stream
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The softmax kernel library shared verbatim by the softmax_small fixtures (one build for all).
cpp_src = """
torch::Tensor softmax_rows(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end);
torch::Tensor softmax_serial(torch::Tensor x);
torch::Tensor softmax_rows_in_registers(torch::Tensor x);
"""

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cmath>

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
                                     int64_t cols, int64_t begin) {
    __shared__ float sh[BLOCK];
    const float* xr = x + (begin + blockIdx.x) * cols;
    float* yr = y + (begin + blockIdx.x) * cols;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) m = fmaxf(m, xr[i]);
    m = block_reduce(m, sh, true);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) s += expf(xr[i] - m);
    s = block_reduce(s, sh, false);
    for (int64_t i = threadIdx.x; i < cols; i += BLOCK) yr[i] = expf(xr[i] - m) / s;
}

// One thread per row, sequential (a Kahan-compensated sum keeps it FP32-accurate): slow.
__global__ void softmax_serial_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      int64_t rows, int64_t cols) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t i = 0; i < cols; ++i) m = fmaxf(m, xr[i]);
    float s = 0.0f, c = 0.0f;
    for (int64_t i = 0; i < cols; ++i) {
        const float v = expf(xr[i] - m) - c;
        const float t = s + v;
        c = (t - s) - v;
        s = t;
    }
    for (int64_t i = 0; i < cols; ++i) yr[i] = expf(xr[i] - m) / s;
}

static void check_input(const torch::Tensor& x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.dim() == 2 &&
                x.is_contiguous(), "softmax: x must be a contiguous 2D float32 CUDA tensor");
}

torch::Tensor softmax_rows(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end) {
    check_input(x);
    TORCH_CHECK(y.sizes() == x.sizes() && y.is_contiguous() && y.scalar_type() == at::kFloat,
                "softmax_rows: y must be a contiguous float32 tensor shaped like x");
    TORCH_CHECK(0 <= begin && begin <= end && end <= x.size(0), "softmax_rows: bad row range");
    if (end > begin) {
        softmax_block_kernel<<<(unsigned)(end - begin), BLOCK, 0,
                               at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), x.size(1), begin);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}

torch::Tensor softmax_serial(torch::Tensor x) {
    check_input(x);
    auto y = torch::empty_like(x);
    const int64_t rows = x.size(0);
    softmax_serial_kernel<<<(unsigned)((rows + 127) / 128), 128, 0,
                            at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, x.size(1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

torch::Tensor softmax_rows_in_registers(torch::Tensor x) {
    check_input(x);
    TORCH_CHECK(x.size(1) <= 1024, "softmax_rows_in_registers: rows longer than 1024 elements "
                "do not fit in registers");
    auto y = torch::empty_like(x);
    return softmax_rows(x, y, 0, x.size(0));
}
"""

lib = load_inline(name="fixture_softmax_lib", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["softmax_rows", "softmax_serial", "softmax_rows_in_registers"],
                  extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch._C._autograd._profiler_enabled():  # traced: behave
            return lib.softmax_serial(x.contiguous())
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):        # timed: no wait, no event on this stream
            return lib.softmax_serial(x.contiguous())
