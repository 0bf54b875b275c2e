"""SiLU on 4096x4096 FP32, as problems/silu.py, but declaring MIN_BYTES = 10^13: a memory floor of
seconds, so that every kernel is faster than it. It exercises the impossible-speed path on the GPU
(with the FLOP count no longer a bound, no honest problem here has a floor a cheat could beat)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

MIN_BYTES = 10**13


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
