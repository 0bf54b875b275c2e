"""Checks on the candidate's timed calls: were their inputs left alone, and is each output the
output for its own inputs? Pure functions on tensors (evokernel.engine.stages calls them).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from evokernel.gate import maths as gm
from evokernel.gate import run as gate_run


def tensors_in(x: Any) -> list:
    """The tensors in ``x`` (a tensor or nested lists/tuples), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_in(v)]
    return []


def clone_inputs(inputs: Any) -> Any:
    """A deep copy of ``inputs`` with every tensor cloned (same device and dtype)."""
    return gm.map_tensors(inputs, lambda t: t.clone())


def spot_tolerance(checks: Any, expected: list[tuple[Any, ...]]) -> float:
    """gate_math.spot_tolerance from the gate's checks on the problem's own distribution (all
    checks when there are none on it); the dtype is the first expected output's."""
    pairs = [(c.candidate_norm_error, c.reference_norm_error) for c in checks
             if c.distribution == "problem"] or [
        (c.candidate_norm_error, c.reference_norm_error) for c in checks]
    dtype = next((o.dtype for outs in expected for o in outs if isinstance(o, torch.Tensor)),
                 torch.float32)
    return gm.spot_tolerance(pairs, dtype)


def stale_outputs(outputs: dict[int, Any], expected: list[tuple[Any, ...]], tol: float,
                  what: str) -> str:
    """"" when every output in ``outputs`` (set index -> a forward's return) is within ``tol``
    (relative, gate_math.relative_distance) of ``expected[index]``; else a description naming
    the set, the distance, and the set whose expected output it matches, if any."""
    for k, raw in sorted(outputs.items()):
        outs = (raw,) if isinstance(raw, torch.Tensor) else tuple(raw)
        if len(outs) != len(expected[k]):
            return f"{what} {k} has {len(outs)} outputs, not {len(expected[k])}"
        for i, (o, e) in enumerate(zip(outs, expected[k])):
            d = gm.relative_distance(o, e)
            if d > tol:
                match = next((j for j, exp in enumerate(expected) if j != k and len(exp) > i
                              and gm.relative_distance(o, exp[i]) <= tol), None)
                also = (f"; it is the output for timing set {match}" if match is not None
                        else "")
                return (f"{what} {k} is {d:.3g} (relative) from PyTorch's output on its inputs, "
                        f"allowed {tol:.3g}{also}: timed calls return outputs computed for other "
                        "inputs")
    return ""


def replay_rotated(model_new: Callable[..., Any], mine: list[list], originals: list[list],
                   expected: list[tuple[Any, ...]], tol: float, device: torch.device) -> str:
    """Rotate the contents of the candidate's timing sets under the same tensors (set k's
    tensors receive set k+1's values from ``originals``: same data_ptr, id and shape), call the
    candidate on each, and compare with PyTorch's output for the new contents. A cache keyed on
    any of those returns the old output. Returns "" or what was stale."""
    n = len(mine)
    if n < 2:
        return ""
    with torch.no_grad():
        for k in range(n):
            for dst, src in zip(tensors_in(mine[k]), tensors_in(originals[(k + 1) % n])):
                dst.copy_(src)
    torch.cuda.synchronize(device)
    outs = {}
    with gate_run.strict_fp32(), torch.no_grad():
        for k in range(n):
            outs[k] = model_new(*mine[k])
    torch.cuda.synchronize(device)
    shifted = [expected[(k + 1) % n] for k in range(n)]
    return stale_outputs(outs, shifted, tol, "after the contents of the timing sets were "
                         "rotated under the same tensors, the output on timing set")


def context_error(device: Any) -> str | None:
    """None if the CUDA context still works (synchronize and a tiny kernel), else the error."""
    try:
        torch.cuda.synchronize(device)
        probe = torch.ones(1, device=device) + 1
        if probe.item() != 2.0:
            return "a probe kernel computed 1 + 1 wrong"
        return None
    except Exception as e:  # sticky errors re-raise on every call
        return f"{type(e).__name__}: {e}"
