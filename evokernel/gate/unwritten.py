"""Outputs the candidate did not compute: elements copied out of freed memory (the poison
pattern), and slices left wrong while others are right (a partial output). Pure functions on
tensors, run by evokernel.gate.judge; the poison is written by evokernel.gate.run.
"""
from __future__ import annotations

import math

import torch

from evokernel.gate.maths import CHUNK_ELEMENTS

#: The bit pattern the gate writes into free device memory before each candidate call
#: (gate_run.poison_free_memory), as 32-bit words. It reads as a NaN in every floating format:
#: FP32 0x7FF87FF8, FP64 0x7FF87FF8_7FF87FF8, FP16/BF16 0x7FF8. Its payload differs from the NaN
#: that arithmetic produces (CUDA: 0x7FFFFFFF / 0x7FFF; x86: 0x7FC00000), so an output element
#: holding it was never written by the candidate: only copied out of freed memory.
POISON_WORD = 0x7FF87FF8

#: Partial output: a slice (along the first dimension of size > 1) counts as wholly wrong when
#: its norm-wise relative error is at least this (a zero, stale or garbage slice is ~1 or more;
#: an honest FP32 kernel is ~1e-6, a lower-precision one ~1e-3).
PARTIAL_WRONG_MIN = 0.5


def _poison_of(dtype: torch.dtype) -> tuple[torch.dtype, int] | None:
    """(integer view dtype, poison value in it) for a floating dtype, else None."""
    if dtype == torch.float32:
        return torch.int32, POISON_WORD
    if dtype == torch.float64:
        return torch.int64, (POISON_WORD << 32) | POISON_WORD
    if dtype in (torch.float16, torch.bfloat16):
        return torch.int16, POISON_WORD & 0xFFFF
    return None


def poison_tensor(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """A tensor of ``shape`` and floating ``dtype`` whose every element holds the poison pattern
    (POISON_WORD), i.e. what an output the candidate never wrote reads like after the gate
    poisoned free memory. Raises: ValueError for a non-floating dtype."""
    view = _poison_of(dtype)
    if view is None:
        raise ValueError(f"no poison pattern for {dtype}")
    idt, value = view
    if idt is torch.int16 and value >= 1 << 15:
        value -= 1 << 16
    return torch.full(tuple(shape), value, dtype=idt, device=device).view(dtype)


def count_poison(t: torch.Tensor) -> int:
    """How many elements of ``t`` hold the poison bit pattern exactly (0 for non-floating or
    non-contiguous-viewable tensors)."""
    view = _poison_of(t.dtype)
    if view is None or t.numel() == 0:
        return 0
    idt, value = view
    if idt is torch.int16 and value >= 1 << 15:
        value -= 1 << 16
    flat = t.detach().contiguous().reshape(-1).view(idt)
    return sum(int((c == value).sum()) for c in flat.split(CHUNK_ELEMENTS))


def partial_output(out: torch.Tensor, truth: torch.Tensor, max_tolerance: float) -> str:
    """Is ``out`` right on some slices and wholly wrong on others? "" if not, else what.

    Slices are taken along the first dimension of size > 1 (rows of a matrix, batch elements of
    a 4D output). A slice is *right* when every element is within ``max_tolerance`` (absolute,
    the gate's element-wise bound: factor x max(PyTorch's max error, u x max|t|)) of the truth,
    *wholly wrong* when its norm-wise relative error is >= PARTIAL_WRONG_MIN or non-finite.
    An output with at least one of each computed only part of its work (the first row, one batch
    element) or skipped the rest. Outputs with no dimension of size > 1 return "".
    """
    dim = next((d for d, n in enumerate(out.shape) if n > 1), None)
    if dim is None or out.shape != truth.shape:
        return ""
    n = out.shape[dim]
    o = out.detach().movedim(dim, 0).reshape(n, -1)
    t = truth.detach().movedim(dim, 0).reshape(n, -1)
    step = max(1, CHUNK_ELEMENTS // max(1, o.shape[1]))
    right = wrong = 0
    first_right = first_wrong = None
    for i in range(0, n, step):
        oc, tc = o[i:i + step].double(), t[i:i + step].double()
        d = (oc - tc).abs_()
        finite = torch.isfinite(d).all(dim=1)
        dmax = torch.where(finite, d.nan_to_num(0.0).amax(dim=1),
                           torch.full_like(finite, math.inf, dtype=torch.float64))
        tn = tc.norm(dim=1)
        rel = torch.where(tn > 0, d.nan_to_num(0.0).norm(dim=1) / tn.clamp_min(1e-300),
                          torch.zeros_like(tn))
        is_right = finite & (dmax <= max_tolerance)
        is_wrong = ~finite | ((tn > 0) & (rel >= PARTIAL_WRONG_MIN))
        right += int(is_right.sum())
        wrong += int(is_wrong.sum())
        if first_right is None and bool(is_right.any()):
            first_right = i + int(is_right.nonzero()[0, 0])
        if first_wrong is None and bool(is_wrong.any()):
            first_wrong = i + int(is_wrong.nonzero()[0, 0])
    if not right or not wrong:
        return ""
    return (f"{right} of {n} slices along dim {dim} are right (first: {first_right}) and {wrong} "
            f"wholly wrong (first: {first_wrong}): only part of the output was computed")
