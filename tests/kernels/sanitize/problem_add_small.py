"""c = a + b over 2^16 floats: the race fixture's problem. compute-sanitizer's racecheck tracks
every shared-memory access of every thread; on faults/problem_add.py's 2^22 floats (16384
blocks, each thread's read a hazard) the H200 run did not finish in 7 minutes (2026-12-02,
results/h200-2026-12-02-s9/). 256 blocks are as good a witness of the race."""
import torch
import torch.nn as nn

N = 1 << 16


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
