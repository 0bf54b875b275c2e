"""Softmax over dim=1 of a 4096x65536 FP32 matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """torch.softmax(x, dim=1) on a 2D input."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 65536


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
