"""Did a candidate do the main work with its own kernels, or fall back to the reference's?

A candidate can pass the precision gate by calling the reference's own op (``torch.softmax``,
``torch.matmul``, cuDNN through ``F.conv2d``), directly or in a ``try/except`` around a custom
kernel that fails. KernelBench lets a candidate replace some of the reference's operators and
keep others; so does evokernel, up to a stated share. The worker traces one call of the reference
(at set-up) and one call of the candidate (evokernel.gate.trace) and judges the two lists of
kernels here:

* **library kernels** are PyTorch's (names in the ``at::`` / ``at_cuda_detail`` / ``c10::``
  namespaces, inductor's ``triton_*_fused``) and cuBLAS/cuDNN's (``nvjet_*``, ``sm90_xmma_*``,
  ``ampere_sgemm_*``, ``cutlass_80_*`` inside cuBLAS, ``cudnn::*``, ``implicit_convolve_sgemm``,
  ``gemv2T_kernel``, ``splitKreduce_kernel``, ...). Every other kernel, including CUTLASS or CUB
  templates compiled into the candidate's own extension, is the candidate's **own**; so is any
  kernel whose function name is a ``__global__`` function in the candidate's source.
* a candidate library kernel is a **reference kernel** when the reference launches it too (the
  same demangled name; the same function name, or one extending the other as ATen's
  shape-dependent variants do, suffices unless it is a generic ATen launcher such as
  ``vectorized_elementwise_kernel`` or ``reduce_kernel``, whose functor is the op), or when both
  are dense-algebra library kernels (GEMM or convolution: cuBLAS/cuDNN), whatever the tile.

**The rule** (GateConfig.reference_fallback = "reject"): REFERENCE_FALLBACK when the reference
kernels the candidate also launches take at least MAX_REFERENCE_SHARE (half) of the *reference's*
GPU time: most of the problem's work is then done by PyTorch's own kernels. Else
NO_KERNEL_LAUNCHED when no own kernel ran; else accepted, with the share reported as the flag
``reference_kernels:<share>``. The share is measured against the reference's time, not the
candidate's: a candidate cannot lower it by padding itself with slow kernels of its own, and
small kernels whose time is mostly launch latency do not weigh more than the work they do. On
an H200 a candidate for KernelBench level 1 problem 98 (KL divergence: its own element-wise
kernel, then ``torch.sum`` and the division by the batch size) spent 59% of its own GPU time in
those two reused kernels, three small kernels of nearly equal length (results/
h200-2026-12-01-s5/call2), while they are a minority of what the reference does (a log, the
element-wise kl_div, the sum, the division). A candidate whose output comes from the reference's
kernels reuses the bulk of them and is rejected; one that only calls ``torch.softmax`` beside a
trivial kernel of its own reuses all of it (100%). Other library kernels (a fill, a copy for
``.contiguous()``) are only reported, as the flag ``aten_kernels:...``. The reference's **main
kernels** (at least MAIN_SHARE of its kernel time) are kept for information. Pure string and arithmetic logic: tested on the CPU with recorded
names (tests/gate/test_gate_cheats.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from evokernel.records import Reason

#: A reference kernel taking at least this share of the reference's kernel time is main work.
MAIN_SHARE = 0.2
#: Reference kernels the candidate also launches taking at least this share of the reference's
#: GPU time: REFERENCE_FALLBACK.
MAX_REFERENCE_SHARE = 0.5

_LIBRARY_NAMESPACE = re.compile(r"(?:^|[\s(<,:])(?:at|c10|at_cuda_detail|caffe2)::")
_LIBRARY_NAME = re.compile(
    r"^(?:void\s+)?(?:"
    r"nvjet_|sm\d+_xmma_|xmma_|cutlass_\d+_|ampere_|volta_|turing_|maxwell_|hopper_|sm\d+_gemm|"
    r"gemmSN_|gemmk1_|gemv2[NT]_|gemv_|splitKreduce_|cublas|cublasLt|dot_kernel|scal_kernel|"
    r"axpy_kernel|nrm2_|asum_|cudnn|implicit_convolve|explicit_convolve|fft2d_|im2col4d|"
    r"computeOffsetsKernel|triton_(?:poi|red|per|tem)_fused)")
# cuBLAS's own CUTLASS kernels are instantiated on cutlass_NN_ configurations.
_CUBLAS_CUTLASS = re.compile(r"cutlass_\d+_")
_DENSE = re.compile(r"gemm|nvjet|xmma|sgemm|gemv|splitKreduce|cudnn|conv|winograd|fft|"
                    r"cutlass_\d+_", re.IGNORECASE)
#: ATen launchers whose function name says nothing about the op (the functor does).
GENERIC_ATEN = frozenset({
    "vectorized_elementwise_kernel", "unrolled_elementwise_kernel", "elementwise_kernel",
    "reduce_kernel", "index_elementwise_kernel", "distribution_elementwise_grid_stride_kernel",
    "vectorized_templated_elementwise_kernel", "CatArrayBatchedCopy",
    "CatArrayBatchedCopy_contig", "launch_kernel"})
_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?"
                     r"(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                     r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)")


def function_name(kernel: str) -> str:
    """The bare function name of a demangled kernel name: no return type, namespace, template
    arguments or parameter list. ``"void at::native::(anonymous namespace)::cunn_SoftMaxForward
    <4, float>(float*, float const*, int)"`` -> ``"cunn_SoftMaxForward"``."""
    return qualified_name(kernel).split("::")[-1].strip() or kernel.strip()


def qualified_name(kernel: str) -> str:
    """A demangled kernel name without return type, template arguments and parameter list, but
    with its namespaces: ``"at::native::(anonymous namespace)::cunn_SoftMaxForward"``."""
    s = kernel.strip()
    if s.startswith("void "):
        s = s[5:]
    out, depth, i = [], 0, 0
    while i < len(s):
        c = s[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0:
            if s.startswith("(anonymous namespace)", i):
                out.append("(anonymous namespace)")
                i += len("(anonymous namespace)")
                continue
            break
        elif depth == 0:
            out.append(c)
        i += 1
    return "".join(out).strip()


def own_kernel_names(source: str) -> frozenset[str]:
    """Names of the ``__global__`` functions defined in a candidate's source text."""
    return frozenset(_GLOBAL.findall(source or ""))


def is_library(kernel: str, own: frozenset[str] = frozenset()) -> bool:
    """Is ``kernel`` PyTorch's, cuBLAS's or cuDNN's (not the candidate's own)? A kernel whose
    function name is one of ``own`` (the candidate's ``__global__`` functions) never is."""
    base = function_name(kernel)
    if base in own:
        return False
    if _LIBRARY_NAMESPACE.search(kernel):
        return True
    if kernel.lstrip().startswith(("void cutlass::", "cutlass::")):
        return bool(_CUBLAS_CUTLASS.search(kernel))       # cuBLAS's, not the candidate's CUTLASS
    return bool(_LIBRARY_NAME.search(kernel.strip()) or _LIBRARY_NAME.search(base))


def is_dense(kernel: str) -> bool:
    """A GEMM or convolution library kernel (cuBLAS/cuDNN/ATen), judged on its qualified name
    (template arguments such as a functor's name do not count) or cuBLAS's cutlass_NN_ tiles."""
    return is_library(kernel) and bool(_DENSE.search(qualified_name(kernel))
                                       or _CUBLAS_CUTLASS.search(kernel))


def main_kernels(reference: list[tuple[str, float]]) -> tuple[str, ...]:
    """The reference's kernels that take >= MAIN_SHARE of its kernel time (always the largest
    one), by total time over repeated launches, largest first. ``reference``: (name, us)."""
    total: dict[str, float] = {}
    for name, us in reference:
        total[name] = total.get(name, 0.0) + max(0.0, us)
    if not total:
        return ()
    ranked = sorted(total, key=lambda n: -total[n])
    whole = sum(total.values())
    return tuple(n for i, n in enumerate(ranked)
                 if i == 0 or (whole > 0 and total[n] >= MAIN_SHARE * whole))


def _matches(kernel: str, main: str) -> bool:
    """Same kernel; or the same non-generic function name, where one name extending the other
    counts too (ATen's shape-dependent variants: cunn_SoftMaxForward / cunn_SoftMaxForwardSmem);
    or both dense-algebra library kernels."""
    if kernel == main:
        return True
    a, b = function_name(kernel), function_name(main)
    if a not in GENERIC_ATEN and b not in GENERIC_ATEN:
        short, long_ = sorted((a, b), key=len)
        if short == long_ or (len(short) >= 8 and long_.startswith(short)):
            return True
    return is_dense(kernel) and is_dense(main)


@dataclass(frozen=True)
class KernelVerdict:
    """What one traced candidate call launched. ``reason`` is None (fine), REFERENCE_FALLBACK or
    NO_KERNEL_LAUNCHED; ``reference_share`` is the share of the reference's GPU time taken by
    the reference kernels the candidate also launches (by launch count when no times were
    recorded); ``flags`` are always reported."""

    reason: Reason | None
    detail: str
    own: tuple[str, ...]
    fallback: tuple[str, ...]
    library: tuple[str, ...]
    flags: tuple[str, ...]
    reference_share: float = 0.0


def _share(kernels: list[tuple[str, float]], names: set[str]) -> float:
    """The share of ``kernels``' time (by count when no times) in kernels named in ``names``."""
    total = sum(max(0.0, us) for _, us in kernels)
    if total > 0:
        return sum(max(0.0, us) for n, us in kernels if n in names) / total
    return sum(n in names for n, _ in kernels) / len(kernels) if kernels else 0.0


def judge_kernels(candidate: list[tuple[str, float]], reference: list[tuple[str, float]],
                  source: str = "") -> KernelVerdict:
    """Judge the kernels of one candidate call against the reference's (see the module docstring).

    Args:
        candidate: (demangled name, device us) of each kernel the candidate's call launched.
        reference: the same for one reference call (every kernel, not only the main ones).
        source: the candidate's source, whose ``__global__`` functions are its own kernels.
    Returns: the KernelVerdict.
    """
    own_names = own_kernel_names(source)
    names = list(dict.fromkeys(n for n, _ in candidate))
    ref_names = list(dict.fromkeys(n for n, _ in reference))
    own = tuple(n for n in names if not is_library(n, own_names))
    library = tuple(n for n in names if is_library(n, own_names))
    reused = tuple(n for n in library if any(_matches(n, m) for m in ref_names))
    reused_ref = {m for m in ref_names if any(_matches(n, m) for n in reused)}
    share = _share(reference, reused_ref)
    short = lambda ns: ", ".join(dict.fromkeys(function_name(n) for n in ns))  # noqa: E731
    flags = []
    if library:
        flags.append(f"aten_kernels:{short(library)[:200]}")
    if reused:
        flags.append(f"reference_kernels:{share:.0%}:{short(reused)[:200]}")
    if reused and share >= MAX_REFERENCE_SHARE:
        flags.append(f"reference_fallback:{short(reused)[:200]}")
        return KernelVerdict(Reason.REFERENCE_FALLBACK,
                             f"the reference's own kernels that the candidate launches "
                             f"({short(reused)}) are {share:.0%} of the reference's GPU time "
                             f"(allowed: under {MAX_REFERENCE_SHARE:.0%}); its own kernels: "
                             f"{short(own) or 'none'}", own, reused, library, tuple(flags), share)
    if not own:
        flags.append("no_own_kernel")
        what = short(library) if library else "no kernel at all"
        return KernelVerdict(Reason.NO_KERNEL_LAUNCHED, "the candidate launched no kernel of its "
                             f"own (only: {what})", own, reused, library, tuple(flags), share)
    detail = f"own kernels: {short(own)}"
    if reused:
        detail += (f"; reuses the reference's {short(reused)}, {share:.0%} of the reference's "
                   "GPU time")
    return KernelVerdict(None, detail, own, reused, library, tuple(flags), share)
