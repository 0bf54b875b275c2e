"""Conv2d(3, 96, 11, stride=4, padding=2, bias) + ReLU + MaxPool2d(3, stride=2) on 100x3x224x224."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """AlexNet's first stage: convolution with bias, ReLU, then 3x3 max pooling with stride 2."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, pool_kernel_size: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel_size, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


batch_size = 100
in_channels = 3
out_channels = 96
kernel_size = 11
stride = 4
padding = 2
pool_kernel_size = 3
pool_stride = 2
height = 224
width = 224


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, pool_kernel_size,
            pool_stride]
