"""The precision gate's arithmetic: pure functions on tensors (evokernel.gate.judge runs them).

Errors are computed in float64, chunk by chunk, so a 1 GB FP32 output needs no full-size float64
temporary beyond the cached truth itself. Every threshold used by the gate is defined here, with
where it comes from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from evokernel.records import Reason

#: The lower-precision formats the gate emulates, in tie-break order (see match_lower_precision).
LP_FORMATS = ("tf32", "fp16", "bf16")

#: The rounded-input truths computed for them. TF32 gets two: round-to-nearest-even and
#: truncated ("tf32_rz"), since a kernel may round (cvt.rna, CUTLASS converters) or simply drop
#: the 13 low mantissa bits when it feeds FP32 data to .tf32 MMAs. A truncating kernel is no
#: closer to the RNE truth than to the FP32 one (measured: 8.9e-4 vs 7.8e-4 norm-wise on a
#: K=256 GEMM), so without its own truth it would be misnamed WRONG_FUNCTION.
LP_TRUTHS = ("tf32", "tf32_rz", "fp16", "bf16")

#: "Much closer": an output has lowered precision when its distance to a lower-precision truth,
#: times this factor, is at most its distance to the FP32-input truth. A TF32/FP16 GEMM with FP32
#: accumulation sits ~0.8 * 2^-11 (rounded inputs) from the FP32 truth but only its FP32
#: accumulation error (~1e-6 relative) from the rounded-input truth: a factor of 100s. An honest
#: FP32 kernel, or a wrong one, is at least as far from the rounded-input truth as from the FP32
#: one (factor <= ~1). 4 sits between with margin on both sides.
LP_MATCH_FACTOR = 4.0

#: An output counts as *stored* in FP16/BF16 when at least this share of its non-zero elements is
#: exactly representable in that format while at most REFERENCE_REPRESENTABLE_MAX of PyTorch's
#: own FP32 output is (a random FP32 value is representable in FP16 with probability 2^-13).
REPRESENTABLE_MIN = 0.99
REFERENCE_REPRESENTABLE_MAX = 0.5

#: Accumulation error vs wrong function: a failing FP32 candidate whose worse ratio is at most
#: this many times PyTorch's error is named ACCUMULATION_ERROR, beyond it WRONG_FUNCTION. A naive
#: sequential FP32 sum over K=4096 measured 238x on the H200 (docs/architecture.md, "Measurements the design relies on"); 1000 leaves ~4x
#: headroom above it. A different function lands above: GELU's tanh form for erf ~3000x
#: norm-wise on randn inputs, a wrong or missing element 1e4-1e7x (tests/gate/test_gate.py).
ACCUMULATION_BOUND = 1000.0

#: Elements per float64 chunk (128 MiB) of the chunked error computations.
CHUNK_ELEMENTS = 1 << 24

#: Spot checks of timed outputs (evokernel.engine.worker): an output may differ from PyTorch's FP32
#: output on the same inputs by at most this many times (candidate error + PyTorch's error) as
#: measured by the gate; a stale output (another input set's) differs by ~1 relative.
SPOT_MARGIN = 4.0


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = eps/2 of a floating dtype: 2^-24 for float32 (round-to-nearest). Non-floating: 0."""
    if not dtype.is_floating_point:
        return 0.0
    return torch.finfo(dtype).eps / 2.0


def round_tf32(x: torch.Tensor, truncate: bool = False) -> torch.Tensor:
    """``x`` (float32) with its mantissa rounded to TF32's 10 bits on the int32 view:
    round-to-nearest-even (add 0xFFF plus the kept LSB, clear the 13 low bits), or with
    ``truncate`` toward zero (clear them). NaN stays NaN; with rounding, values past TF32's
    (= FP32's) range round to Inf. Returns a new float32 tensor of x's shape.
    Raises: ValueError if x is not float32."""
    if x.dtype != torch.float32:
        raise ValueError(f"round_tf32 needs float32, got {x.dtype}")
    bits = x.contiguous().view(torch.int32)
    if not truncate:
        bits = bits + 0xFFF + ((bits >> 13) & 1)
    rounded = (bits & -8192).view(torch.float32)
    return torch.where(torch.isnan(x), x, rounded).reshape(x.shape)


def round_to_format(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` rounded to ``fmt`` ("tf32", "tf32_rz" (truncated), "fp16" or "bf16") and returned
    in x's dtype. FP16 overflows to Inf past 65504 and has subnormals below 2^-14, as the
    hardware does. Raises: ValueError for an unknown format."""
    if fmt in ("tf32", "tf32_rz"):
        return round_tf32(x.float(), truncate=fmt == "tf32_rz").to(x.dtype)
    if fmt == "fp16":
        return x.to(torch.float16).to(x.dtype)
    if fmt == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    raise ValueError(f"unknown format {fmt!r}; known: {LP_TRUTHS}")


@dataclass(frozen=True)
class TruthStats:
    """Summary of a float64 truth: ``norm`` = ||t||_2, ``max_abs`` = max |t|, ``constant`` = all
    elements equal (a tensor of < 2 elements counts as constant)."""

    norm: float
    max_abs: float
    constant: bool


def truth_stats(t: torch.Tensor) -> TruthStats:
    """TruthStats of a finite float64 tensor (any shape)."""
    flat = t.reshape(-1)
    sq, mx = 0.0, 0.0
    for c in flat.split(CHUNK_ELEMENTS):
        sq += float(c.double().square().sum())
        mx = max(mx, float(c.abs().max())) if c.numel() else mx
    constant = flat.numel() < 2 or bool((flat == flat[0]).all())
    return TruthStats(math.sqrt(sq), mx, constant)


def error_stats(x: torch.Tensor, t: torch.Tensor, *, t_norm: float | None = None,
                round_truth_to: str | None = None) -> tuple[float, float]:
    """(norm-wise, max element-wise) error of ``x`` against the truth ``t``, in float64.

    norm-wise = ||x - t||_2 / ||t||_2 (absolute ||x - t||_2 when ||t|| = 0); max = max |x - t| in
    the output's units. Either is +inf when x has a NaN or Inf. ``round_truth_to`` compares
    against ``t`` rounded to "fp16"/"bf16" instead (an output stored in that format), chunk by
    chunk. ``t_norm`` avoids recomputing ||t||. Shapes must match (ValueError otherwise).
    """
    if x.shape != t.shape:
        raise ValueError(f"error_stats: shapes differ: {tuple(x.shape)} vs {tuple(t.shape)}")
    xf, tf = x.reshape(-1), t.reshape(-1)
    sq, mx, tsq = 0.0, 0.0, 0.0
    for xc, tc in zip(xf.split(CHUNK_ELEMENTS), tf.split(CHUNK_ELEMENTS)):
        tc = tc.double()
        if round_truth_to is not None:
            tc = round_to_format(tc, round_truth_to)
        d = (xc.double() - tc).abs_()
        if d.numel():
            csq, cmx = float(d.square().sum()), float(d.max())   # NaN/Inf propagate
            if not (math.isfinite(csq) and math.isfinite(cmx)):
                return math.inf, math.inf
            sq, mx = sq + csq, max(mx, cmx)
        if t_norm is None:
            tsq += float(tc.square().sum())
    norm = math.sqrt(tsq) if t_norm is None else t_norm
    diff = math.sqrt(sq)
    return (diff / norm if norm > 0 else diff), mx


def error_ratio(error: float, reference_error: float, floor: float) -> float:
    """error / max(reference_error, floor); 0 when both are 0, +inf when only the denominator is."""
    denom = max(reference_error, floor)
    if denom > 0:
        return error / denom
    return 0.0 if error == 0 else math.inf


def ratios(cand_norm: float, cand_max: float, ref_norm: float, ref_max: float,
           dtype: torch.dtype, truth_max_abs: float) -> tuple[float, float]:
    """(norm ratio, max ratio) of a candidate's errors over PyTorch's own, with floors for exact
    outputs: the norm floor is the output dtype's unit roundoff u (2^-24 for float32: the
    smallest relative error a correctly rounded output can have), the max floor is
    u * max|t| (one rounding of the largest element). Without floors an exact reference
    (ReLU, a copy) would make any rounding difference an infinite ratio."""
    u = unit_roundoff(dtype)
    return (error_ratio(cand_norm, ref_norm, u),
            error_ratio(cand_max, ref_max, u * truth_max_abs))


def representable_fraction(x: torch.Tensor, fmt: str) -> float:
    """Share of the non-zero finite elements of ``x`` exactly representable in ``fmt``
    (1.0 when there are none)."""
    total, hits = 0, 0
    for c in x.reshape(-1).split(CHUNK_ELEMENTS):
        c = c[torch.isfinite(c) & (c != 0)]
        total += c.numel()
        hits += int((round_to_format(c, fmt) == c).sum())
    return hits / total if total else 1.0


def match_lower_precision(fp32_distance: float, distances: dict[str, float],
                          prefer: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """The lower-precision format an output matches, and a note.

    ``fp32_distance`` is the output's norm-wise distance to the FP32-input truth, ``distances``
    its smallest distance to each format's truth variants. A format matches when
    ``distance * LP_MATCH_FACTOR <= fp32_distance``; the closest match wins. TF32 and FP16 share
    a 10-bit mantissa, so they are told apart only by range (FP16 subnormals/overflow) or by an
    output stored in FP16; formats within 2x of the closest are a tie, the note names the
    others, and the tie goes to the first format in ``prefer`` (the formats the source scan
    found), else to the earlier one in LP_FORMATS.
    Returns (format or None, note).
    """
    hits = {f: d for f, d in distances.items()
            if math.isfinite(d) and d * LP_MATCH_FACTOR <= fp32_distance}
    if not hits:
        return None, ""
    order = {f: i for i, f in enumerate(LP_FORMATS)}
    best = min(hits.values())
    tied = [f for f in hits if hits[f] <= 2.0 * best]
    chosen = min(tied, key=lambda f: (f not in prefer, order.get(f, len(order))))
    others = [f for f in tied if f != chosen]
    note = f" (indistinguishable from {', '.join(others)} on these inputs)" if others else ""
    return chosen, note


def check_output_form(out: object, shape: torch.Size, dtype: torch.dtype,
                      device: torch.device) -> tuple[Reason, str] | None:
    """Is ``out`` a plain dense torch.Tensor of the reference's shape, dtype and device?

    Plain: ``type(out) is torch.Tensor`` (no subclass, no Parameter), strided layout, not meta,
    no lazy conjugate/negative bit, no overlapping (e.g. expanded, stride-0) dimensions, and an
    untyped storage large enough for every element it addresses.
    Returns None when it is, else (reason, what is wrong).
    """
    if type(out) is not torch.Tensor:
        return Reason.LAZY_OUTPUT, f"output is a {type(out).__module__}.{type(out).__name__}, " \
                                   "not a plain torch.Tensor"
    if out.layout != torch.strided or out.is_meta:
        return Reason.LAZY_OUTPUT, f"output has layout {out.layout} (meta={out.is_meta})"
    if out.is_conj() or out.is_neg():
        return Reason.LAZY_OUTPUT, "output carries a lazy conjugate/negative bit"
    if out.device != device:
        return Reason.LAZY_OUTPUT, f"output is on {out.device}, the reference on {device}"
    if out.dtype != dtype:
        return Reason.DTYPE_MISMATCH, f"output dtype {out.dtype}, reference {dtype}"
    if out.shape != shape:
        return Reason.SHAPE_MISMATCH, f"output shape {tuple(out.shape)}, reference {tuple(shape)}"
    if out.numel() == 0:
        return None
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(out.stride(), out.shape) if sz > 1):
        if stride < expected:
            return Reason.LAZY_OUTPUT, f"output dimensions overlap (strides {out.stride()})"
        expected = stride * size
    span = out.storage_offset() + sum((sz - 1) * st for sz, st in zip(out.shape, out.stride()))
    need = (span + 1) * out.element_size()
    have = out.untyped_storage().nbytes()
    if have < need:
        return Reason.LAZY_OUTPUT, f"output storage holds {have} bytes, its view needs {need}"
    return None


def lower_precision_match(out: torch.Tensor, truth: torch.Tensor, truth_norm: float,
                          lp_truths: dict[str, torch.Tensor | None],
                          reference_representable: dict[str, float],
                          prefer: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """Has ``out`` (float32) lowered precision? Returns (format, explanation) or None.

    Two tests, in order:
    1. Distances (norm-wise, float64) from ``out`` to each format's truth variants: the truths
       from rounded inputs and parameters (``lp_truths``, keyed by LP_TRUTHS names, so "tf32"
       and "tf32_rz" both count for tf32); for fp16/bf16 also that truth rounded to the format,
       and the FP32-input ``truth`` rounded to it (an output *stored* in the format).
       match_lower_precision decides with LP_MATCH_FACTOR (ties go to ``prefer``).
    2. Storage: at least REPRESENTABLE_MIN of ``out``'s values exactly representable in bf16
       (checked first: bf16 values are fp16-representable too) or fp16, while at most
       REFERENCE_REPRESENTABLE_MAX of PyTorch's output is (``reference_representable``).
    """
    d32 = error_stats(out, truth, t_norm=truth_norm)[0]
    dist = {fmt: math.inf for fmt in LP_FORMATS}
    for name, lp in lp_truths.items():
        fmt = name.split("_")[0]
        if lp is not None:
            dist[fmt] = min(dist[fmt], error_stats(out, lp)[0])
            if fmt != "tf32":
                dist[fmt] = min(dist[fmt], error_stats(out, lp, round_truth_to=fmt)[0])
    for fmt in ("fp16", "bf16"):
        dist[fmt] = min(dist[fmt], error_stats(out, truth, round_truth_to=fmt)[0])
    fmt, note = match_lower_precision(d32, dist, prefer)
    if fmt is not None:
        return fmt, (f"the output matches {fmt} rounding{note}: norm distance {dist[fmt]:.3g} "
                     f"to the {fmt} truth vs {d32:.3g} to the FP32 truth")
    for fmt in ("bf16", "fp16"):
        share, ref_share = representable_fraction(out, fmt), reference_representable.get(fmt, 1.0)
        if share >= REPRESENTABLE_MIN and ref_share <= REFERENCE_REPRESENTABLE_MAX:
            return fmt, (f"{100 * share:.1f}% of the output values are exactly representable in "
                         f"{fmt} (PyTorch's: {100 * ref_share:.1f}%): stored in {fmt}")
    return None


def inputs_modified(originals: object, after: object, path: str = "input") -> str:
    """"" when ``after`` equals ``originals`` element for element (NaN equal to NaN), else what
    changed, e.g. "input 0 modified: 4096 of 4096 elements differ". Recurses into lists/tuples."""
    if isinstance(originals, torch.Tensor):
        if not isinstance(after, torch.Tensor) or after.shape != originals.shape \
                or after.dtype != originals.dtype:
            return f"{path} was replaced or reshaped"
        same = after == originals
        if after.is_floating_point() or after.is_complex():
            same |= torch.isnan(after) & torch.isnan(originals)
        n = int((~same).sum())
        return f"{path} modified: {n} of {after.numel()} elements differ" if n else ""
    if isinstance(originals, (list, tuple)):
        for i, (a, b) in enumerate(zip(originals, after)):
            why = inputs_modified(a, b, f"{path} {i}" if path == "input" else f"{path}[{i}]")
            if why:
                return why
    return ""


def fingerprint(t: torch.Tensor) -> tuple[float, float, float]:
    """(sum, sum of squares, last element) in float64: equal fingerprints of outputs for
    different inputs reveal an output cached across calls."""
    d = t.detach().reshape(-1)
    s = sq = 0.0
    for c in d.split(CHUNK_ELEMENTS):
        c = c.double()
        s, sq = s + float(c.sum()), sq + float(c.square().sum())
    return s, sq, float(d[-1]) if d.numel() else 0.0


def describe(raw: object) -> str:
    """A short description of what a forward returned: "a tensor", "a tuple of 2", "a dict"."""
    if isinstance(raw, torch.Tensor):
        return "a tensor"
    if isinstance(raw, (tuple, list)):
        return f"a {type(raw).__name__} of {len(raw)}"
    return f"a {type(raw).__name__}"


def nonfinite_reason(ref_out: tuple[torch.Tensor, ...], truths: tuple[torch.Tensor, ...]) -> str:
    """"" when the truths and PyTorch's outputs are all finite, else which one is not."""
    for name, ts in (("float64 truth", truths), ("strict-FP32 reference", ref_out)):
        for i, t in enumerate(ts):
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
                return f"the {name} (output {i}) is non-finite"
    return ""


def map_tensors(x: object, fn: Callable[[torch.Tensor], object]) -> object:
    """``fn`` applied to every tensor in ``x`` (a tensor, or nested lists/tuples); other values
    pass through unchanged."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        return type(x)(map_tensors(v, fn) for v in x)
    return x


def upcast(t: torch.Tensor) -> torch.Tensor:
    """A floating tensor as float64 (complex as complex128); other dtypes unchanged."""
    if t.is_complex():
        return t.to(torch.complex128)
    return t.double() if t.is_floating_point() else t


def spot_tolerance(errors: list[tuple[float, float]], dtype: torch.dtype) -> float:
    """Largest allowed norm-wise relative distance between a timed output and PyTorch's FP32
    output on the same inputs: SPOT_MARGIN x the largest (candidate error + PyTorch's error)
    the gate measured on the problem's own distribution (``errors``: (candidate, PyTorch)
    norm-wise pairs), floored at SPOT_MARGIN x 2u of the output dtype."""
    u = unit_roundoff(dtype)
    worst = max([c + r for c, r in errors if math.isfinite(c + r)], default=0.0)
    return SPOT_MARGIN * max(worst, 2.0 * u)


def relative_distance(x: torch.Tensor, y: torch.Tensor) -> float:
    """||x - y||_2 / ||y||_2 in float64, chunked (absolute when ||y|| = 0; +inf on NaN/Inf or a
    shape mismatch)."""
    if x.shape != y.shape:
        return math.inf
    d, n = error_stats(x, y)
    return d if math.isfinite(d) else math.inf
