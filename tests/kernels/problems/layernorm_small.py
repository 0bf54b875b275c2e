"""LayerNorm over the last three dims of a 16x32x64x64 FP32 tensor (131072 elements per row), as in
KernelBench's LayerNorm but smaller. nn.LayerNorm starts with weight = 1 and bias = 0; the gate
gives such constant parameters random values (GateConfig.perturb_constant_parameters), so a kernel
that skips the affine step fails."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(16, 32, 64, 64)]


def get_init_inputs():
    return [(32, 64, 64)]
