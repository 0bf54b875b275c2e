"""Seed kernel for conv2d_relu_maxpool: direct convolution + bias + ReLU (one thread per output),
then a max-pooling kernel (one thread per pooled output)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = ("torch::Tensor conv_relu_maxpool_cuda(torch::Tensor x, torch::Tensor weight, "
           "torch::Tensor bias, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, "
           "int64_t pool_k, int64_t pool_s);")

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>

constexpr int BLOCK = 256;       // tune: 64 128 256 512 1024
constexpr int POOL_BLOCK = 256;  // tune: 64 128 256 512 1024

// out[n][oc][oh][ow] = relu(bias[oc] + sum_{c,kh,kw} x[n][c][oh*sh-ph+kh][ow*sw-pw+kw] * w[oc][c][kh][kw])
// (zero padding). NCHW, OIHW, all contiguous. Grid-stride loop over the flat output index.
__global__ void conv2d_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
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
        const float v = acc + bias[oc];
        out[idx] = (v < 0.0f) ? 0.0f : v;   // ReLU; NaN passes through as in torch.relu
    }
}

// out[p][i][j] = max_{a,b < K} in[p][i*S + a][j*S + b], p = flat (n, c); no padding, floor mode,
// so OH = (H - K) / S + 1 and every window lies inside the input.
__global__ void maxpool2d_kernel(const float* __restrict__ in, float* __restrict__ out,
                                 int64_t planes, int H, int W, int OH, int OW, int K, int S) {
    const int64_t total = planes * OH * OW;
    for (int64_t idx = (int64_t)blockIdx.x * POOL_BLOCK + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * POOL_BLOCK) {
        const int j = (int)(idx % OW);
        const int i = (int)((idx / OW) % OH);
        const int64_t p = idx / ((int64_t)OW * OH);
        const float* ip = in + p * H * W + (int64_t)(i * S) * W + j * S;
        float m = -INFINITY;
        for (int a = 0; a < K; ++a)
            for (int b = 0; b < K; ++b) {
                const float v = ip[(int64_t)a * W + b];
                m = (v > m || isnan(v)) ? v : m;    // NaN propagates as in PyTorch
            }
        out[idx] = m;
    }
}

torch::Tensor conv_relu_maxpool_cuda(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                     int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                     int64_t pad_w, int64_t pool_k, int64_t pool_s) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(),
                "conv_relu_maxpool_cuda: tensors must be on CUDA");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                bias.scalar_type() == at::kFloat, "conv_relu_maxpool_cuda: tensors must be float32");
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1,
                "conv_relu_maxpool_cuda: expected x NCHW, weight OIHW, bias [O]");
    TORCH_CHECK(weight.size(1) == x.size(1), "conv_relu_maxpool_cuda: channel mismatch (groups 1)");
    TORCH_CHECK(bias.size(0) == weight.size(0), "conv_relu_maxpool_cuda: bias size mismatch");
    TORCH_CHECK(stride_h > 0 && stride_w > 0 && pad_h >= 0 && pad_w >= 0 && pool_k > 0 &&
                pool_s > 0, "conv_relu_maxpool_cuda: bad stride, padding or pool size");
    const c10::cuda::CUDAGuard guard(x.device());
    x = x.contiguous();
    weight = weight.contiguous();
    bias = bias.contiguous();
    const int64_t Nb = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
    const int64_t OC = weight.size(0), KH = weight.size(2), KW = weight.size(3);
    TORCH_CHECK(H + 2 * pad_h >= KH && W + 2 * pad_w >= KW,
                "conv_relu_maxpool_cuda: kernel larger than input");
    const int64_t OH = (H + 2 * pad_h - KH) / stride_h + 1;
    const int64_t OW = (W + 2 * pad_w - KW) / stride_w + 1;
    TORCH_CHECK(OH >= pool_k && OW >= pool_k, "conv_relu_maxpool_cuda: pool larger than input");
    const int64_t PH = (OH - pool_k) / pool_s + 1;
    const int64_t PW = (OW - pool_k) / pool_s + 1;
    auto conv = torch::empty({Nb, OC, OH, OW}, x.options());
    auto out = torch::empty({Nb, OC, PH, PW}, x.options());
    if (out.numel() == 0) return out;
    auto stream = at::cuda::getCurrentCUDAStream();

    const int64_t total = conv.numel();
    const int64_t blocks = std::min<int64_t>((total + BLOCK - 1) / BLOCK, 1LL << 30);
    conv2d_relu_kernel<<<(unsigned)blocks, BLOCK, 0, stream>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
        conv.data_ptr<float>(), (int)Nb, (int)C, (int)H, (int)W, (int)OC, (int)KH, (int)KW,
        (int)OH, (int)OW, (int)stride_h, (int)stride_w, (int)pad_h, (int)pad_w);
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int64_t ptotal = out.numel();
    const int64_t pblocks = std::min<int64_t>((ptotal + POOL_BLOCK - 1) / POOL_BLOCK, 1LL << 30);
    maxpool2d_kernel<<<(unsigned)pblocks, POOL_BLOCK, 0, stream>>>(
        conv.data_ptr<float>(), out.data_ptr<float>(), Nb * OC, (int)OH, (int)OW, (int)PH,
        (int)PW, (int)pool_k, (int)pool_s);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

module = load_inline(
    name="conv2d_relu_maxpool_seed",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    functions=["conv_relu_maxpool_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, pool_kernel_size: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel_size, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c, p = self.conv, self.pool
        pk, ps = _pair(p.kernel_size), _pair(p.stride)
        if pk[0] != pk[1] or ps[0] != ps[1] or p.padding not in (0, (0, 0)) or p.ceil_mode \
                or p.dilation not in (1, (1, 1)):
            raise ValueError("this kernel supports square, unpadded, floor-mode max pooling only")
        return module.conv_relu_maxpool_cuda(x, c.weight, c.bias, c.stride[0], c.stride[1],
                                             c.padding[0], c.padding[1], pk[0], ps[0])
