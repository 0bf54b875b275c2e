"""Leaky ReLU, x if x > 0 else 0.01 * x, elementwise on a 4096x4096 FP32 tensor (memory-bound)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope=0.01)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
