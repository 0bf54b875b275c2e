"""Seed kernel for conv2d: direct convolution with bias, one thread per output element."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor conv2d_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, "
           "int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>

constexpr int BLOCK = 256;  // tune: 64 128 256 512 1024

// out[n][oc][oh][ow] = bias[oc] + sum_{c,kh,kw} x[n][c][oh*sh-ph+kh][ow*sw-pw+kw] * w[oc][c][kh][kw]
// (zero padding). NCHW, OIHW, all contiguous. Grid-stride loop over the flat output index.
__global__ void conv2d_direct_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                     const float* __restrict__ bias, float* __restrict__ out,
                                     int Nb, int C, int H, int W, int OC, int KH, int KW,
                                     int OH, int OW, int sh, int sw, int ph, int pw) {
    const int64_t total = (int64_t)Nb * OC * OH * OW;
    for (int64_t idx = (int64_t)blockIdx.x * BLOCK + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * BLOCK) {
        const int ow = (int)(idx % OW);
        const int oh = (int)((idx / OW) % OH);
        const int oc = (int)((idx / ((int64_t)OW * OH)) % OC);
        const int n = (int)(idx / ((int64_t)OW * OH * OC));
        const int ih0 = oh * sh - ph;
        const int iw0 = ow * sw - pw;
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float* xc = x + ((int64_t)n * C + c) * H * W;
            const float* wc = w + ((int64_t)oc * C + c) * KH * KW;
            float part = 0.0f;  // per-channel partial sum (two-level summation)
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = ih0 + kh;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = iw0 + kw;
                    if (iw < 0 || iw >= W) continue;
                    part = fmaf(xc[(int64_t)ih * W + iw], wc[kh * KW + kw], part);
                }
            }
            acc += part;
        }
        out[idx] = acc + bias[oc];
    }
}

torch::Tensor conv2d_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                          int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "conv2d_cuda: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                bias.scalar_type() == at::kFloat, "conv2d_cuda: tensors must be float32");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1,
                "conv2d_cuda: expected x NCHW, weight OIHW, bias [O]");
    TORCH_CHECK(weight.size(1) == x.size(1), "conv2d_cuda: channel mismatch (groups must be 1)");
    TORCH_CHECK(bias.size(0) == weight.size(0), "conv2d_cuda: bias size mismatch");
    TORCH_CHECK(stride_h > 0 && stride_w > 0 && pad_h >= 0 && pad_w >= 0,
                "conv2d_cuda: bad stride or padding");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t Nb = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t OC = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    const int64_t OH = (H + 2 * pad_h - KH) / stride_h + 1;
    const int64_t OW = (W + 2 * pad_w - KW) / stride_w + 1;
    TORCH_CHECK(H + 2 * pad_h >= KH && W + 2 * pad_w >= KW, "conv2d_cuda: kernel larger than input");
    auto out = torch::empty({Nb, OC, OH, OW}, x.options());
    const int64_t total = out.numel();
    if (total == 0) return out;
    const int64_t blocks = std::min<int64_t>((total + BLOCK - 1) / BLOCK, 1LL << 30);
    conv2d_direct_kernel<<<(unsigned)blocks, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        out.data_ptr<float>(), (int)Nb, (int)C, (int)H, (int)W, (int)OC, (int)KH, (int)KW,
        (int)OH, (int)OW, (int)stride_h, (int)stride_w, (int)pad_h, (int)pad_w);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

module = load_inline(
    name="conv2d_seed",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["conv2d_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return module.conv2d_cuda(x, c.weight, c.bias, c.stride[0], c.stride[1],
                                  c.padding[0], c.padding[1])
