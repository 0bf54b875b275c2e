"""A small elementwise problem (c = a + b over 2^22 floats) for the fault-isolation fixtures."""
import torch
import torch.nn as nn

N = 1 << 22


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
