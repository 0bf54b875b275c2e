"""Softmax over dim=1 of a 256x32768 FP32 matrix (8 Mi elements, outputs ~3e-5): small enough that
a worker sets it up in seconds, wide enough that a zero output is "near zero" (KernelBench's
atol = rtol = 1e-2 would accept it). Shared by most cheat fixtures and two legitimate variants."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(256, 32768)]


def get_init_inputs():
    return []
