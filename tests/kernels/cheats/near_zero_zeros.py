"""Cheat 9, near-zero output: the softmax outputs here average 3e-5 and stay below ~2e-3, so zeros
pass KernelBench's check (atol = rtol = 1e-2) everywhere. The gate measures errors relative to
PyTorch's own (a norm-wise ratio ~1e7) and rejects a constant output where the truth is not.

EXPECTED: reject constant_output
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x)                  # the cheat
