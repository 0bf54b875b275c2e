"""The physical floor of a problem: the time no correct kernel can beat on this device.

The **memory floor** is the one physical bound: the problem's minimum bytes (every input element
read once, every output element written once) over the fastest rate this device was measured to
move bytes (the largest of a device-to-device copy, a read-only reduction and a write-only fill,
each of 1 GiB, measured once per device and torch version). A candidate's time is reported as a
percentage of it (``EvalResult.pct_of_floor``: 100 means at the floor), and a candidate faster
than IMPOSSIBLE_MARGIN of it is rejected as impossible (``Reason.IMPOSSIBLE_SPEED``).

The reference algorithm's FLOPs (``torch.utils.flop_counter``: matmul, convolution, attention)
over the measured FP32 rate (the BF16 tensor-core rate for a half-precision problem) give the
**compute floor**, ``compute_floor_ms``: a compute reference reported beside it, never a reason to
reject. A kernel may legitimately do less arithmetic than the reference's algorithm: structure
(a diagonal, triangular or symmetric operand, known zeros), Winograd or FFT convolution,
Strassen-like schemes. KernelBench level 1 problem 12 (``torch.diag(A) @ B``) is the case in
point: computed element-wise it is exact and runs far under the GEMM's FLOP count.

The memory floor errs low on purpose: each distinct input element counts once whatever the
kernel re-reads, and a problem whose output does not depend on all of its inputs (slicing,
strided subsampling, structurally zero operands) can declare a smaller byte count with a
module-level ``MIN_BYTES = <int>``.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

import torch
from loguru import logger
from torch.utils import _pytree as pytree
from torch.utils.flop_counter import FlopCounterMode

from evokernel.jsonfile import write_json_atomic

#: Sizes of the peak measurements: copy 1 GiB -> 1 GiB (2 GiB of traffic), matmul 8192^3.
COPY_BYTES = 2**30
MATMUL_N = 8192
#: A candidate faster than this share of the memory floor is rejected as impossible. It absorbs
#: the measured peaks' noise (~1-2%), clocks that run higher on a short kernel than during the
#: 1 GiB measurements, and access patterns a little faster than all three measured ones.
IMPOSSIBLE_MARGIN = 0.8


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _count(call: Callable[[], object]) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        call()
    return int(counter.get_total_flops())


def count_flops(model: Callable[..., object], inputs: Iterable[Any], *, meta: bool = True) -> int:
    """FLOPs of one forward call ``model(*inputs)``, counted by FlopCounterMode.

    Counts matmul as 2*M*N*K and convolution as 2 * batch * out_spatial * C_out * C_in/groups *
    kernel_size (torch.utils.flop_counter); other ops count 0.
    With ``meta=True`` the call first runs on 'meta' copies (an nn.Module through
    ``torch.func.functional_call`` with meta parameters and buffers, inputs via
    ``torch.empty_like(..., device='meta')``), which computes nothing and allocates nothing, so
    big problems cost no time; if that fails (an op without a meta kernel, a data-dependent
    ``.item()``, a tensor attribute that is not a parameter or buffer) it falls back to a real
    run on the given inputs, under ``torch.no_grad()``.
    Returns: total FLOPs (int, >= 0).
    Raises: whatever the real forward raises.
    """
    inputs = tuple(inputs)
    if meta:
        def on_meta(x: Any) -> Any:
            return torch.empty_like(x, device="meta") if _is_tensor(x) else x

        meta_inputs = pytree.tree_map(on_meta, inputs)
        try:
            if isinstance(model, torch.nn.Module):
                state = {name: on_meta(t) for name, t in
                         [*model.named_parameters(), *model.named_buffers()]}
                return _count(lambda: torch.func.functional_call(model, state, meta_inputs))
            return _count(lambda: model(*meta_inputs))
        except Exception as e:  # noqa: BLE001 - any failure on meta: count on a real run instead
            logger.debug("count_flops: meta run failed ({}: {}); counting a real run",
                         type(e).__name__, e)
    return _count(lambda: model(*inputs))


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements of ``t``: dims of stride 0 (expand / broadcast) count once."""
    if t.numel() == 0:
        return 0
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size()


def _tensor_bytes(tree: Any) -> int:
    seen: set[Any] = set()
    total = 0
    for t in pytree.tree_leaves(tree):
        if not _is_tensor(t):
            continue
        if t.device.type == "meta":
            key: Any = id(t)
        else:
            key = (str(t.device), t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        total += _distinct_bytes(t)
    return total


def min_bytes(inputs: Any, outputs: Any) -> int:
    """Minimum memory traffic of one call: every input element read once plus every output
    element written once, in bytes.

    inputs: the call's inputs *and* the model's parameters and buffers, e.g.
        ``[*get_inputs(), *model.parameters(), *model.buffers()]``; any nesting of lists,
        tuples and dicts; non-tensors are ignored.
    outputs: the output tensor(s), same nesting rules.
    The same tensor (same storage, offset, shape, strides, dtype) passed twice counts once; a
    stride-0 (expanded) dimension counts once. Partly overlapping views are counted in full.
    Returns: bytes (int, >= 0).
    """
    return _tensor_bytes(inputs) + _tensor_bytes(outputs)


@dataclass(frozen=True)
class DevicePeaks:
    """Measured peak rates of one device under one torch version.

    copy_gbs: bytes read + written per second / 1e9 in a 1 GiB device-to-device copy.
    read_gbs: bytes read per second / 1e9 by a sum over 1 GiB.
    write_gbs: bytes written per second / 1e9 by a fill of 1 GiB.
    fp32_tflops: FP32 matmul (8192^3, TF32 off), 2*N^3 FLOPs / s / 1e12.
    tf32_tflops: the same matmul with TF32 on (kept for reference; no floor uses it).
    bf16_tflops: the same matmul in bfloat16.
    torch_version: ``torch.__version__`` at measurement; measured_at: ISO date.
    """

    device_name: str
    copy_gbs: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    torch_version: str
    measured_at: str
    read_gbs: float = 0.0
    write_gbs: float = 0.0

    @property
    def bandwidth_gbs(self) -> float:
        """The fastest measured byte rate (GB/s): max of copy, read and write."""
        return max(self.copy_gbs, self.read_gbs, self.write_gbs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DevicePeaks":
        """Raises: KeyError or ValueError if a field is missing or not a number."""
        return cls(device_name=str(d["device_name"]), copy_gbs=float(d["copy_gbs"]),
                   fp32_tflops=float(d["fp32_tflops"]), tf32_tflops=float(d["tf32_tflops"]),
                   bf16_tflops=float(d["bf16_tflops"]), torch_version=str(d["torch_version"]),
                   measured_at=str(d["measured_at"]), read_gbs=float(d["read_gbs"]),
                   write_gbs=float(d["write_gbs"]))


def _median_event_ms(fn: Callable[[], object], warmup: int = 2, reps: int = 5) -> float:
    """Median CUDA-event time (ms) of ``fn`` on the current stream, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def measure_device_peaks(device: torch.device | int | str) -> DevicePeaks:
    """Measure copy, read and write bandwidth and FP32 / TF32 / BF16 matmul rates on ``device``.

    Copy: ``dst.copy_(src)`` of 1 GiB (17x the H200's L2), 2 GiB of traffic per copy; read:
    ``src.sum()`` over the same 1 GiB; write: ``dst.fill_(1.0)``. Matmul:
    ``torch.matmul(a, b, out=c)`` with N = 8192, random normal data. Each: 2 warm-up calls, then
    the median of 5 CUDA-event timed calls. About 0.5 s of GPU time on an H200 (the FP32 matmul
    dominates); needs ~3 GiB free. TF32 flags are restored afterwards.
    Raises: RuntimeError (torch's) if the device is not usable or memory runs out.
    """
    device = torch.device(device)
    with torch.cuda.device(device):
        src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).normal_()
        dst = torch.empty_like(src)
        copy_ms = _median_event_ms(lambda: dst.copy_(src))
        read_ms = _median_event_ms(lambda: src.sum())
        write_ms = _median_event_ms(lambda: dst.fill_(1.0))
        del src, dst
        n = MATMUL_N
        flops = 2 * n**3
        a = torch.randn(n, n, dtype=torch.float32, device=device)
        b = torch.randn(n, n, dtype=torch.float32, device=device)
        c = torch.empty(n, n, dtype=torch.float32, device=device)
        allow_tf32 = torch.backends.cuda.matmul.allow_tf32
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            fp32_ms = _median_event_ms(lambda: torch.matmul(a, b, out=c))
            torch.backends.cuda.matmul.allow_tf32 = True
            tf32_ms = _median_event_ms(lambda: torch.matmul(a, b, out=c))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        a, b, c = a.bfloat16(), b.bfloat16(), c.bfloat16()
        bf16_ms = _median_event_ms(lambda: torch.matmul(a, b, out=c))
        del a, b, c
        torch.cuda.empty_cache()
    return DevicePeaks(
        device_name=torch.cuda.get_device_name(device),
        copy_gbs=2 * COPY_BYTES / copy_ms / 1e6, read_gbs=COPY_BYTES / read_ms / 1e6,
        write_gbs=COPY_BYTES / write_ms / 1e6,
        fp32_tflops=flops / fp32_ms / 1e9, tf32_tflops=flops / tf32_ms / 1e9,
        bf16_tflops=flops / bf16_ms / 1e9, torch_version=torch.__version__,
        measured_at=datetime.date.today().isoformat())


def peaks_path(cache_dir: Path, device_name: str, torch_version: str) -> Path:
    """``cache_dir/peaks/<slug>.json``, slug from the device name and torch version."""
    slug = re.sub(r"[^a-z0-9.]+", "-", f"{device_name}-torch-{torch_version}".lower()).strip("-")
    return Path(cache_dir) / "peaks" / f"{slug}.json"


def measure_peaks(device: torch.device | int | str, cache_dir: Path, *,
                  measure_fn: Callable[[torch.device | int | str], DevicePeaks] | None = None,
                  device_name: str | None = None) -> DevicePeaks:
    """Peaks of ``device``, measured once per (device name, torch version) and cached.

    Looks for :func:`peaks_path` under ``cache_dir`` (e.g. ``config.default_cache_dir()``); if
    absent, unreadable, or for another device / torch version, measures with ``measure_fn``
    (default :func:`measure_device_peaks`) and writes the JSON atomically (temp file + rename,
    so concurrent workers never read half a file).
    device_name: defaults to ``torch.cuda.get_device_name(device)``; pass it to test on CPU.
    Returns: DevicePeaks. Raises: what ``measure_fn`` raises; OSError if the cache is unwritable.
    """
    name = device_name if device_name is not None else torch.cuda.get_device_name(device)
    path = peaks_path(cache_dir, name, torch.__version__)
    if path.exists():
        try:
            peaks = DevicePeaks.from_dict(json.loads(path.read_text()))
            if peaks.device_name == name and peaks.torch_version == torch.__version__:
                return peaks
            logger.warning("{}: for {} / torch {}; measuring again", path, peaks.device_name,
                           peaks.torch_version)
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("{}: unreadable ({}); measuring again", path, e)
    peaks = (measure_fn or measure_device_peaks)(device)
    write_json_atomic(path, peaks.to_dict(), sort_keys=True)
    logger.info("measured peaks of {}: {}", name, peaks)
    return peaks


def compute_tflops(peaks: DevicePeaks, dtype: torch.dtype) -> float:
    """The measured arithmetic rate that an accurate kernel in ``dtype`` can use: the FP32 rate
    for float32 and float64 (TF32 tensor cores are a lower precision, which the gate rejects),
    the BF16 tensor-core rate for bfloat16 and float16 (the same rate on sm_80/sm_90).
    Raises: ValueError for other dtypes (int8, fp8, ... have rates that are not measured)."""
    if dtype in (torch.float32, torch.float64):
        return peaks.fp32_tflops
    if dtype in (torch.bfloat16, torch.float16):
        return peaks.bf16_tflops
    raise ValueError(f"no measured arithmetic rate for {dtype}")


def memory_floor_ms(nbytes: int, peaks: DevicePeaks) -> float:
    """The memory floor of one call in milliseconds: ``nbytes / (peaks.bandwidth_gbs * 1e9)`` x 1e3.
    Raises: ValueError if nbytes is negative or the bandwidth is not positive."""
    if nbytes < 0:
        raise ValueError(f"memory_floor_ms: negative bytes ({nbytes})")
    if not peaks.bandwidth_gbs > 0:
        raise ValueError(f"memory_floor_ms: the bandwidth must be positive: {peaks}")
    return nbytes / peaks.bandwidth_gbs / 1e6


def compute_floor_ms(flops: int, peaks: DevicePeaks, dtype: torch.dtype = torch.float32) -> float:
    """The reference algorithm's FLOPs over the measured rate for ``dtype``
    (:func:`compute_tflops`), in milliseconds: information, never a bound (module docstring).
    Raises: ValueError if flops is negative, the rate is not positive or the dtype has none."""
    if flops < 0:
        raise ValueError(f"compute_floor_ms: negative flops ({flops})")
    rate = compute_tflops(peaks, dtype)
    if not rate > 0:
        raise ValueError(f"compute_floor_ms: the rate must be positive: {peaks}")
    return flops / rate / 1e9


def bound(memory_ms: float, compute_ms: float) -> Literal["compute", "memory"]:
    """Which resource the reference's algorithm would be bound by: "compute" when its compute
    floor exceeds the memory floor, else "memory" (a hint for prompts and reports)."""
    return "compute" if compute_ms > memory_ms else "memory"


def impossible(candidate_ms: float, floor_ms: float, margin: float = IMPOSSIBLE_MARGIN) -> bool:
    """True if ``candidate_ms < margin * floor_ms`` (``floor_ms``: the memory floor): faster than
    the device can move the problem's bytes. See IMPOSSIBLE_MARGIN for the margin.
    Raises: ValueError if a time is NaN or negative, or margin is not in (0, 1].
    """
    if not 0.0 < margin <= 1.0:
        raise ValueError(f"margin must be in (0, 1], got {margin}")
    if math.isnan(candidate_ms) or math.isnan(floor_ms) or candidate_ms < 0 or floor_ms < 0:
        raise ValueError(f"impossible: bad times candidate_ms={candidate_ms}, "
                         f"floor_ms={floor_ms}")
    return candidate_ms < margin * floor_ms
