"""Row L2 normalization, x / ||x||_2 over dim=1 (keepdim), of a 2048x16384 FP32 matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(2048, 16384)]


def get_init_inputs():
    return []
