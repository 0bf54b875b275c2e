"""Not a kernel at all: softmax composed from PyTorch ops (amax, exp, sum, div). Correct, but no
kernel of its own ran: rejected as no_kernel_launched (GateConfig.reference_fallback policy).

EXPECTED: reject no_kernel_launched
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(dim=1, keepdim=True))
        return e / e.sum(dim=1, keepdim=True)
