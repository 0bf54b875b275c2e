"""2D convolution, AlexNet conv1: Conv2d(3, 96, kernel_size=11, stride=4, padding=2, bias) on 100x3x224x224."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """A single nn.Conv2d with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 100
in_channels = 3
out_channels = 96
kernel_size = 11
stride = 4
padding = 2
height = 224
width = 224


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
