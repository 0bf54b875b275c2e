"""Strict FP32: the precision every reference, truth and candidate call of evokernel runs under
(TF32 off for cuBLAS and cuDNN, float32 matmul precision "highest"), as a context manager and a
test. A module of its own, below every stage: the gate and the timing both need it, and the
timing package sits below the gate (docs/architecture.md, "Where each stage lives").
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

# torch >= 2.9 keeps TF32 state per (backend, op) ("ieee" / "tf32" / "none" = inherit), behind the
# legacy flags; mixing the two APIs can make torch.get_float32_matmul_precision() raise, so the
# state is saved and restored per (backend, op) when that API exists.
_PRECISION_OPS = tuple((b, o) for b in ("generic", "cuda", "mkldnn")
                       for o in ("all", "matmul", "conv", "rnn"))


def _save_precision() -> tuple:
    legacy = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    per_op: dict[tuple[str, str], str] = {}
    getter = getattr(torch._C, "_get_fp32_precision_getter", None)
    for backend, op in _PRECISION_OPS if getter else ():
        try:
            per_op[(backend, op)] = getter(backend, op)
        except (RuntimeError, ValueError, TypeError):
            pass
    return legacy, per_op, None if per_op else torch.get_float32_matmul_precision()


def _restore_precision(saved: tuple) -> None:
    (cublas, cudnn), per_op, precision = saved
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = cublas, cudnn
    setter = getattr(torch._C, "_set_fp32_precision_setter", None)
    for (backend, op), value in per_op.items():
        try:
            setter(backend, op, value)
        except (RuntimeError, ValueError, TypeError):
            pass


@contextmanager
def strict_fp32() -> Iterator[None]:
    """Strict FP32 for the body: TF32 off for cuBLAS matmul and cuDNN, float32 matmul precision
    "highest". The previous settings are restored on exit, also when the body raises. (FP16/BF16
    reduced-precision-reduction switches are left alone: they do not affect FP32 work.)"""
    saved = _save_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        yield
    finally:
        _restore_precision(saved)


def is_strict_fp32() -> bool:
    """True when TF32 is off everywhere strict_fp32() turns it off."""
    if torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32:
        return False
    try:
        return torch.get_float32_matmul_precision() == "highest"
    except RuntimeError:   # mixed legacy/new settings: something switched a backend to TF32
        return False
