"""Cheat 1, result reuse: return torch.empty and hope the memory still holds a correct output (in an
A B A B timing loop, the reference's output for the same inputs was freed just before). The gate
poisons freed memory before each call, so the output reads as the poison pattern: never written.

EXPECTED: reject result_reuse
PROBLEM: tests/kernels/problems/softmax_small.py
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)      # no kernel: whatever the allocator hands back
