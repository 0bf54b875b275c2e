"""Cheat 9, constant output: return the mean value 1/N everywhere (each row still sums to 1, and
every element is within ~2e-3 of the truth). Rejected as a constant output where the truth is not.

EXPECTED: reject constant_output
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.full_like(x, 1.0 / x.shape[1])  # the cheat
