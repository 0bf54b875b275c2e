"""evokernel.gate.robust: the robustness report's logic on the CPU, with pure-PyTorch stand-ins
for kernels (a correct one, one that refuses other shapes with a clear error, one that ignores
strides, one with a hard-coded size, one in FP16, one that faults). No GPU: the marks, the
variants and the ratios are what is tested, not a CUDA kernel."""
from __future__ import annotations

import torch
import torch.nn as nn

from evokernel.gate.robust import (FAIL, NOT_APPLICABLE, PASS, UNSUPPORTED, format_rows,
                                   noncontiguous, robustness_report, size_variants)
from evokernel.problem import exec_module

SOFTMAX = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 8
dim = 6


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

ADD_LITERAL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(8, 6), torch.randn(8, 6)]


def get_init_inputs():
    return []
'''


def problem(source: str, name: str):
    return exec_module(source, f"robust_test_{name}", f"<{name}>")


class Correct(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


class FixedSize(nn.Module):
    """Refuses any shape but its own, clearly, as a kernel with a TORCH_CHECK would."""

    def forward(self, x):
        if tuple(x.shape) != (8, 6):
            raise ValueError(f"fixed_softmax: only 8x6 inputs are supported, got {tuple(x.shape)}")
        return torch.softmax(x, dim=1)


class IgnoresStrides(nn.Module):
    """Reads its input's storage as if it were contiguous: wrong on a strided view."""

    def forward(self, x):
        raw = torch.as_strided(x, x.shape, (x.shape[1], 1), x.storage_offset())
        return torch.softmax(raw, dim=1)


class FirstEightRows(nn.Module):
    """Writes only the rows it was written for (a grid sized for batch 8); the rest stay 0."""

    def forward(self, x):
        out = torch.zeros_like(x)
        out[:8] = torch.softmax(x[:8], dim=1)
        return out


class Half(nn.Module):
    def forward(self, x):
        return torch.softmax(x.half().float() * (1 + 2 ** -9), dim=1)


class Faults(nn.Module):
    def forward(self, x):
        if x.shape[0] != 8:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return torch.softmax(x, dim=1)


def report(cls, source=SOFTMAX, name="softmax"):
    rows = robustness_report(problem(source, name), lambda init: cls(*init), device="cpu")
    return {r.variant: r for r in rows}


def marks(rows):
    return {k: r.mark for k, r in rows.items()}


VARIANTS = ["half leading size", "double leading size", "odd leading size", "odd last size",
            "non-contiguous inputs"]


def test_a_correct_kernel_passes_everywhere():
    rows = report(Correct)
    assert list(rows) == VARIANTS
    assert set(marks(rows).values()) == {PASS}
    assert rows["half leading size"].shapes == "[4, 6]"
    assert rows["double leading size"].shapes == "[16, 6]"
    assert rows["odd leading size"].shapes == "[5, 6]"
    assert rows["odd last size"].shapes == "[8, 3]"
    assert rows["non-contiguous inputs"].shapes == "[8, 6] (strided)"
    assert rows["half leading size"].detail.startswith("batch_size = 4 (was 8); norm ratio")
    assert all(r.norm_ratio is not None and r.norm_ratio <= 16 for r in rows.values())


def test_a_clear_error_is_supported_behaviour():
    got = marks(report(FixedSize))
    assert got == {**dict.fromkeys(VARIANTS[:4], UNSUPPORTED), "non-contiguous inputs": PASS}
    row = report(FixedSize)["double leading size"]
    assert "raised ValueError: fixed_softmax: only 8x6 inputs are supported" in row.detail


def test_wrong_answers_fail():
    assert marks(report(IgnoresStrides))["non-contiguous inputs"] == FAIL
    assert marks(report(IgnoresStrides))["double leading size"] == PASS
    rows = report(FirstEightRows)
    assert rows["double leading size"].mark == FAIL
    assert "a wrong answer" in rows["double leading size"].detail
    assert rows["half leading size"].mark == PASS
    assert set(marks(report(Half)).values()) == {FAIL}


def test_a_fault_fails_and_the_rest_is_not_run():
    rows = report(Faults)
    assert rows["half leading size"].mark == FAIL
    assert rows["half leading size"].detail == ("batch_size = 4 (was 8); CUDA fault: "
                                                "RuntimeError: CUDA error: an illegal memory "
                                                "access was encountered")
    for later in VARIANTS[1:]:
        assert rows[later].mark == NOT_APPLICABLE
        assert rows[later].detail == "not run: a CUDA fault in an earlier variant"


def test_without_size_constants_the_first_input_is_resized_and_the_reference_decides():
    class Add(nn.Module):
        def forward(self, x, y):
            return x + y
    rows = report(Add, ADD_LITERAL, "add")
    assert list(rows) == VARIANTS[:3] + ["non-contiguous inputs"]
    assert rows["half leading size"].mark == NOT_APPLICABLE
    assert "the reference rejects it: RuntimeError" in rows["half leading size"].detail
    assert rows["half leading size"].shapes == "[4, 6], [8, 6]"
    assert rows["non-contiguous inputs"].mark == PASS


def test_size_variants_restore_the_problem_constants():
    p = problem(SOFTMAX, "restore")
    vs = size_variants(p, seed=3)
    assert [v.how for v in vs] == ["batch_size = 4 (was 8)", "batch_size = 16 (was 8)",
                                   "batch_size = 5 (was 8)", "dim = 3 (was 6)"]
    assert p.batch_size == 8 and p.dim == 6


def test_noncontiguous_keeps_the_values():
    x, n = torch.randn(3, 4), 7
    got = noncontiguous([x, n, torch.tensor(1.0)])
    assert not got[0].is_contiguous() and torch.equal(got[0], x)
    assert got[1] == 7 and got[2].is_contiguous()


def test_format_rows():
    lines = format_rows(list(report(FixedSize).values()))
    assert len(lines) == 5
    assert lines[1].startswith("  double leading size    shape not supported  inputs [16, 6]: ")


LINEAR = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, 4)

    def forward(self, x):
        return self.linear(x)


batch_size = 6
features = 10


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def test_parameters_follow_the_sizes_and_the_reference_weights():
    """An odd last size changes ``features``, so the models are made again with it; the
    candidate gets the reference's weights (its own would be a different function)."""
    class MyLinear(nn.Module):
        def __init__(self, features):
            super().__init__()
            self.linear = nn.Linear(features, 4)
            with torch.no_grad():
                self.linear.weight.mul_(-1)        # its own weights differ from the reference

        def forward(self, x):
            return x @ self.linear.weight.t() + self.linear.bias
    rows = report(MyLinear, LINEAR, "linear")
    assert rows["odd last size"].shapes == "[6, 5]"
    assert set(marks(rows).values()) == {PASS}
