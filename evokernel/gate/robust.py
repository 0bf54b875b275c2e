"""The robustness report of a kernel: its error ratios on inputs it was not gated on. Information,
never a verdict (a kernel is accepted on the problem's own shapes; `check --robustness`).

    size_variants(problem, seed)          the problem's inputs at other sizes
    noncontiguous(inputs)                 the same values in strided (non-contiguous) tensors
    robustness_report(problem, new_model) one RobustRow per variant
    judge_variant(...)                    one variant's row
    format_rows(rows)                     the report as text lines

Sizes. A KernelBench problem's ``get_inputs()`` builds its tensors from module-level integers
(``batch_size = 4096``); the variants set the integer equal to the first input's leading size
to half, double and an odd value (n // 2 rounded up to odd), and the one equal to its last size
to an odd value, then call ``get_init_inputs()`` and ``get_inputs()`` again, so every input
and parameter stays consistent. A problem without such an integer gets its first input's leading
dimension cut or extended instead (other inputs unchanged: the reference decides whether that
makes sense).

Marks (MARKS): ``pass`` both ratios within the gate's tolerance factor; ``fail`` a wrong answer
(ratio over it, non-finite, wrong shape or dtype) or a CUDA fault; ``shape not supported`` the
kernel raised a clear error (an exception that is not a CUDA fault), which is supported
behaviour; ``not applicable`` the reference itself rejects the inputs, or the GPU ran out of
memory. Ratios are as in the gate (evokernel.gate.maths.ratios): the candidate's error against a
float64 truth over PyTorch's own strict-FP32 error, with the unit-roundoff floors.
"""
from __future__ import annotations

import copy
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from evokernel.gate.maths import error_stats, ratios, truth_stats
from evokernel.gate.run import exception_reason
from evokernel.precision import strict_fp32
from evokernel.records import Reason

PASS, FAIL, UNSUPPORTED, NOT_APPLICABLE = "pass", "fail", "shape not supported", "not applicable"
MARKS = (PASS, FAIL, UNSUPPORTED, NOT_APPLICABLE)


@dataclass(frozen=True)
class Variant:
    """One set of inputs: ``name`` ("half leading size", ...), how it was made (``how``), the
    problem's init inputs and inputs for it (CPU tensors and numbers)."""

    name: str
    how: str
    init_inputs: list[Any]
    inputs: list[Any]


@dataclass(frozen=True)
class RobustRow:
    """One variant's outcome: ``mark`` one of MARKS; ``shapes`` the input shapes; the worst of
    the ratios (None when no output was compared); ``detail`` what was seen."""

    variant: str
    shapes: str
    mark: str
    norm_ratio: float | None = None
    max_ratio: float | None = None
    detail: str = ""


def _int_globals(problem: types.ModuleType) -> list[str]:
    """Names of the problem's module-level int constants, in the order they were defined."""
    return [k for k, v in vars(problem).items() if type(v) is int and not k.startswith("_")]


def _odd(n: int) -> int:
    return (n // 2) | 1


def _with_global(problem: types.ModuleType, name: str, value: int, seed: int
                 ) -> tuple[list[Any], list[Any]]:
    """(init inputs, inputs) with the module's ``name`` set to ``value`` meanwhile."""
    old = vars(problem)[name]
    setattr(problem, name, value)
    try:
        torch.manual_seed(seed)
        return list(problem.get_init_inputs()), list(problem.get_inputs())
    finally:
        setattr(problem, name, old)


def _resized_first(inputs: list[Any], size: int, seed: int) -> list[Any]:
    """``inputs`` with the first tensor's leading dimension cut or extended (random rows) to
    ``size``."""
    out, done = [], False
    gen = torch.Generator().manual_seed(seed)
    for x in inputs:
        if not done and isinstance(x, torch.Tensor) and x.dim() >= 1:
            n = x.shape[0]
            if size <= n:
                x = x[:size].clone()
            else:
                extra = torch.randn((size - n, *x.shape[1:]), generator=gen).to(x.dtype)
                x = torch.cat([x, extra])
            done = True
        out.append(x)
    return out


def size_variants(problem: types.ModuleType, seed: int = 0) -> list[Variant]:
    """The problem's inputs at half, double and an odd leading size, and an odd last size (see
    the module docstring). Raises: whatever the problem's get_inputs() raises."""
    torch.manual_seed(seed)
    init, base = list(problem.get_init_inputs()), list(problem.get_inputs())
    first = next((x for x in base if isinstance(x, torch.Tensor) and x.dim() >= 1), None)
    if first is None:
        return []
    n, last = first.shape[0], first.shape[-1]
    sizes = [("half leading size", max(1, n // 2)), ("double leading size", 2 * n),
             ("odd leading size", _odd(n))]
    names = _int_globals(problem)
    lead = next((k for k in names if getattr(problem, k) == n), None)
    out = []
    for label, size in sizes:
        if size == n:
            continue
        if lead is not None:
            i, x = _with_global(problem, lead, size, seed)
            out.append(Variant(label, f"{lead} = {size} (was {n})", i, x))
        else:
            out.append(Variant(label, f"first input's dim 0 = {size} (was {n})", init,
                               _resized_first(base, size, seed)))
    tail = next((k for k in names if getattr(problem, k) == last and k != lead), None)
    if tail is not None and first.dim() >= 2 and _odd(last) != last:
        i, x = _with_global(problem, tail, _odd(last), seed)
        out.append(Variant("odd last size", f"{tail} = {_odd(last)} (was {last})", i, x))
    return out


def noncontiguous(inputs: Sequence[Any]) -> list[Any]:
    """Each tensor input of two or more elements as a strided view (every other element of a
    buffer twice as large in its last dimension) holding the same values; others unchanged."""
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.numel() > 1 and x.dim() >= 1:
            buf = torch.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype=x.dtype, device=x.device)
            view = buf[..., ::2]
            view.copy_(x)
            x = view
        out.append(x)
    return out


def shapes_text(inputs: Sequence[Any]) -> str:
    """"[8, 5] (strided), 2.0": each input's shape, or its value for a number."""
    return ", ".join(f"{list(x.shape)}" + ("" if x.is_contiguous() else " (strided)")
                     if isinstance(x, torch.Tensor) else repr(x) for x in inputs)


def _to(inputs: Sequence[Any], device: torch.device, dtype: torch.dtype | None = None
        ) -> list[Any]:
    """Tensors moved to ``device`` (and ``dtype`` when floating), strides kept."""
    def move(x: torch.Tensor) -> torch.Tensor:
        want = dtype if dtype is not None and x.is_floating_point() else x.dtype
        if x.is_contiguous():
            return x.to(device=device, dtype=want)
        y = torch.empty_strided(x.size(), x.stride(), dtype=want, device=device)
        return y.copy_(x)
    return [move(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def judge_variant(reference: torch.nn.Module, candidate: torch.nn.Module, inputs: list[Any],
                  name: str, device: torch.device, tolerance: float) -> RobustRow:
    """Run the FP32 reference, its float64 copy and the candidate on ``inputs`` (on ``device``)
    and mark the candidate's output (MARKS). Never raises for a failing reference or
    candidate."""
    shapes = shapes_text(inputs)
    x32 = _to(inputs, device)
    try:
        with torch.no_grad(), strict_fp32():
            expected = reference(*x32)
            truth = copy.deepcopy(reference).double()(*_to(inputs, device, torch.float64))
    except Exception as e:  # the reference's own rejection: the variant is not meaningful
        return RobustRow(name, shapes, NOT_APPLICABLE, detail=f"the reference rejects it: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
    try:
        with torch.no_grad():
            out = candidate(*x32)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as e:  # the kernel's: a clear error is supported behaviour, a fault is not
        reason = exception_reason(e)
        first = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e) else ''}"
        if reason is Reason.OUT_OF_MEMORY:
            return RobustRow(name, shapes, NOT_APPLICABLE, detail=f"out of memory: {first}")
        if reason is Reason.CUDA_FAULT:
            return RobustRow(name, shapes, FAIL, detail=f"CUDA fault: {first}")
        return RobustRow(name, shapes, UNSUPPORTED, detail=f"raised {first}")
    return _compare(name, shapes, out, expected, truth, tolerance)


def _compare(name: str, shapes: str, out: Any, expected: torch.Tensor, truth: torch.Tensor,
             tolerance: float) -> RobustRow:
    """The row for an output ``out`` against the FP32 ``expected`` and the float64 ``truth``."""
    if not isinstance(out, torch.Tensor):
        return RobustRow(name, shapes, FAIL, detail=f"returned {type(out).__name__}, not a "
                         "tensor")
    if out.shape != expected.shape or out.dtype != expected.dtype:
        return RobustRow(name, shapes, FAIL, detail=f"returned {out.dtype} {list(out.shape)}, "
                         f"expected {expected.dtype} {list(expected.shape)}")
    stats = truth_stats(truth)
    c_norm, c_max = error_stats(out, truth, t_norm=stats.norm)
    r_norm, r_max = error_stats(expected, truth, t_norm=stats.norm)
    nr, mr = ratios(c_norm, c_max, r_norm, r_max, out.dtype, stats.max_abs)
    ok = nr <= tolerance and mr <= tolerance
    detail = (f"norm ratio {nr:.3g}, max ratio {mr:.3g} (tolerance factor {tolerance:g})"
              + ("" if ok else "; a wrong answer"))
    return RobustRow(name, shapes, PASS if ok else FAIL, nr, mr, detail)


def robustness_report(problem: types.ModuleType, new_model: Callable[[list[Any]], Any], *,
                      device: str | torch.device = "cuda", tolerance: float = 16.0,
                      seed: int = 0) -> list[RobustRow]:
    """One RobustRow per variant: the size variants (size_variants), then the problem's own
    inputs made non-contiguous.

    Args:
        problem: the problem module (Model, get_inputs, get_init_inputs, its size integers).
        new_model: makes the candidate module from init inputs (``ModelNew(*init)``); the
            reference's parameters are loaded into it when they match (as the gate does).
        device: where to run; tolerance: the gate's tolerance factor; seed: for inputs and
            parameters.
    After a CUDA fault the context is lost: the later variants are marked ``not applicable``.
    """
    from evokernel.gate.reference import align_parameters
    device = torch.device(device)
    torch.manual_seed(seed)
    own = Variant("non-contiguous inputs", "the problem's inputs, strided",
                  list(problem.get_init_inputs()), noncontiguous(problem.get_inputs()))
    rows: list[RobustRow] = []
    lost = False                              # a CUDA fault: the context is unusable
    for v in [*size_variants(problem, seed), own]:
        if lost:
            rows.append(RobustRow(v.name, shapes_text(v.inputs), NOT_APPLICABLE,
                                  detail="not run: a CUDA fault in an earlier variant"))
            continue
        torch.manual_seed(seed)
        reference = problem.Model(*v.init_inputs).to(device).eval()
        torch.manual_seed(seed)
        try:
            candidate = new_model(v.init_inputs)
            candidate = candidate.to(device).eval() if isinstance(candidate, torch.nn.Module) \
                else candidate
        except Exception as e:  # ModelNew refuses these init inputs: a clear error
            rows.append(RobustRow(v.name, shapes_text(v.inputs), UNSUPPORTED,
                                  detail=f"ModelNew(...) raised {type(e).__name__}: {e}"))
            continue
        if isinstance(candidate, torch.nn.Module) and reference.state_dict():
            align_parameters(reference, candidate)
        row = judge_variant(reference, candidate, v.inputs, v.name, device, tolerance)
        lost = row.detail.startswith("CUDA fault")
        rows.append(RobustRow(row.variant, row.shapes, row.mark, row.norm_ratio,
                              row.max_ratio, f"{v.how}; {row.detail}"))
    return rows


def format_rows(rows: Sequence[RobustRow]) -> list[str]:
    """The report as lines: "  variant  mark  shapes  detail"."""
    width = max((len(r.variant) for r in rows), default=0)
    return [f"  {r.variant:<{width}}  {r.mark:<20} inputs {r.shapes}: {r.detail}" for r in rows]
