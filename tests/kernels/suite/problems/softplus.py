"""Softplus (beta 1, threshold 20: x where x > 20, else log1p(exp(x))), elementwise on a 4096x4096
FP32 tensor (memory-bound)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softplus(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
