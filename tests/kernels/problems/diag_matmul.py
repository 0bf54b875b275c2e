"""torch.diag(A) @ B with A of 4096 and B of 4096x4096 (KernelBench level 1, problem 12): the
reference builds the diagonal matrix and runs a full FP32 GEMM, 1.37e11 FLOP, while the product is
an element-wise scaling of B's rows that moves 134 MB. A kernel that computes it element-wise is
exact and far faster than the FLOP count allows: the fixture that the FLOP-based floor rejected."""
import torch
import torch.nn as nn

N = 4096
M = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
