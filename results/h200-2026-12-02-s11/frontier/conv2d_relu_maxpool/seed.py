"""Seed kernel for conv2d_relu_maxpool, NVRTC form: direct convolution + bias + ReLU (one thread
per output), then a max-pooling kernel (one thread per pooled output). The same kernels as
``seeds/conv2d_relu_maxpool.py``, compiled with NVRTC (evokernel.nvrtc)."""
import torch
import torch.nn as nn

from evokernel.nvrtc import compile_kernels

cuda_src = r"""
constexpr int BLOCK = 256;       // tune: 64 128 256 512 1024
constexpr int POOL_BLOCK = 256;  // tune: 64 128 256 512 1024

// out[n][oc][oh][ow] = relu(bias[oc] + sum_{c,kh,kw} x[n][c][oh*sh-ph+kh][ow*sw-pw+kw] * w[oc][c][kh][kw])
// (zero padding). NCHW, OIHW, all contiguous. Grid-stride loop over the flat output index.
__global__ void conv2d_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ bias, float* __restrict__ out,
                                   int Nb, int C, int H, int W, int OC, int KH, int KW,
                                   int OH, int OW, int sh, int sw, int ph, int pw) {
    const long long total = (long long)Nb * OC * OH * OW;
    for (long long idx = (long long)blockIdx.x * BLOCK + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * BLOCK) {
        const int ow = (int)(idx % OW);
        const int oh = (int)((idx / OW) % OH);
        const int oc = (int)((idx / ((long long)OW * OH)) % OC);
        const int n = (int)(idx / ((long long)OW * OH * OC));
        const int ih0 = oh * sh - ph;
        const int iw0 = ow * sw - pw;
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float* xc = x + ((long long)n * C + c) * H * W;
            const float* wc = w + ((long long)oc * C + c) * KH * KW;
            float part = 0.0f;  // per-channel partial sum (two-level summation)
            for (int kh = 0; kh < KH; ++kh) {
                const int ih = ih0 + kh;
                if (ih < 0 || ih >= H) continue;
                for (int kw = 0; kw < KW; ++kw) {
                    const int iw = iw0 + kw;
                    if (iw < 0 || iw >= W) continue;
                    part = fmaf(xc[(long long)ih * W + iw], wc[kh * KW + kw], part);
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
                                 long long planes, int H, int W, int OH, int OW, int K, int S) {
    const long long total = planes * OH * OW;
    for (long long idx = (long long)blockIdx.x * POOL_BLOCK + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * POOL_BLOCK) {
        const int j = (int)(idx % OW);
        const int i = (int)((idx / OW) % OH);
        const long long p = idx / ((long long)OW * OH);
        const float* ip = in + p * H * W + (long long)(i * S) * W + j * S;
        float m = -__int_as_float(0x7f800000);   // -inf
        for (int a = 0; a < K; ++a)
            for (int b = 0; b < K; ++b) {
                const float v = ip[(long long)a * W + b];
                m = (v > m || isnan(v)) ? v : m;    // NaN propagates as in PyTorch
            }
        out[idx] = m;
    }
}
"""

kernels = compile_kernels(cuda_src, ["conv2d_relu_kernel", "maxpool2d_kernel"])
BLOCK, POOL_BLOCK = kernels.constant("BLOCK"), kernels.constant("POOL_BLOCK")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _blocks(total, block):
    return min((total + block - 1) // block, 1 << 30)


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
        if not (x.is_cuda and x.dtype == torch.float32 and x.dim() == 4
                and x.shape[1] == c.weight.shape[1]):
            raise ValueError("conv2d_relu_maxpool: x must be a float32 NCHW CUDA tensor with "
                             f"{c.weight.shape[1]} channels")
        x, w, b = x.contiguous(), c.weight.contiguous(), c.bias.contiguous()
        nb, ch, h, wd = x.shape
        oc, _, kh, kw = w.shape
        (sh, sw), (ph, pw) = c.stride, c.padding
        oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
        if oh < pk[0] or ow < pk[0]:
            raise ValueError("conv2d_relu_maxpool: pool larger than the convolution's output")
        ph_out, pw_out = (oh - pk[0]) // ps[0] + 1, (ow - pk[0]) // ps[0] + 1
        conv = torch.empty((nb, oc, oh, ow), device=x.device, dtype=x.dtype)
        out = torch.empty((nb, oc, ph_out, pw_out), device=x.device, dtype=x.dtype)
        if out.numel() == 0:
            return out
        kernels.conv2d_relu_kernel.launch(_blocks(conv.numel(), BLOCK), BLOCK, x, w, b, conv,
                                          nb, ch, h, wd, oc, kh, kw, oh, ow, sh, sw, ph, pw)
        kernels.maxpool2d_kernel.launch(_blocks(out.numel(), POOL_BLOCK), POOL_BLOCK, conv, out,
                                        nb * oc, oh, ow, ph_out, pw_out, pk[0], ps[0])
        return out
