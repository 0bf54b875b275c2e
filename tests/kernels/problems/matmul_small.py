"""C = A @ B with FP32 A, B of 1024x1024. K = 1024 keeps cuBLAS's own FP32 error small (it grows
with sqrt(K)), so a lower-precision kernel stands far above it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(1024, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return []
