"""KL divergence, F.kl_div(torch.log(predictions), targets, reduction="batchmean"), of two batches
of 128 distributions over 4096 classes (KernelBench level 1, problem 98, at its size). The
reference launches a log, the element-wise kl_div, a sum and a division."""
import torch
import torch.nn as nn

batch_size = 128
input_shape = (4096,)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.kl_div(torch.log(predictions), targets, reduction="batchmean")


def get_inputs():
    return [torch.randn(batch_size, *input_shape).softmax(dim=-1),
            torch.randn(batch_size, *input_shape).softmax(dim=-1)]


def get_init_inputs():
    return []
