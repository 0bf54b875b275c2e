"""Static scan of a candidate's source (Python and CUDA text) for lower-precision use.

The scan *explains*; the numeric gate *decides* (evokernel.gate.judge). Its flags are appended to a
failed candidate's detail and to ``EvalResult.flags``, so a rejection for lower precision can say
where in the source it comes from. Fast-math is reported as a flag of its own ("fastmath:..."):
it changes rounding of a few intrinsics, it is not a lower storage or compute format.

Flags are short "family:token" strings, each distinct, in order of first appearance:
    fp16:...      half, __half, half2, __float2half, __half2float, __hmul, torch.float16, .half(),
                  at::Half, CUDA_R_16F, cutlass::half_t, wmma fragments of half, mma .f16
    bf16:...      __nv_bfloat16, bfloat16 (any spelling), CUDA_R_16BF, wmma/mma bf16
    fp8:...       __nv_fp8_*, float8_e4m3fn / e5m2
    tf32:...      wmma::precision::tf32, __float_to_tf32, mma/cvt .tf32, tfloat32_t,
                  CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_COMPUTE_32F_FAST_*, allow_tf32 = True,
                  set_float32_matmul_precision("high"/"medium"), fp32_precision = "tf32"
    mathmode:...  cublasSetMathMode, CUBLAS_TENSOR_OP_MATH, CUBLAS_GEMM_DEFAULT_TENSOR_OP,
                  cudnnSetConvolutionMathType, CUDNN_TENSOR_OP_MATH*
    autocast:...  torch.autocast(...) / torch.cuda.amp.autocast(...) (FP16/BF16 underneath)
    fastmath:...  --use_fast_math, -ffast-math, --ftz=true, -prec-div/sqrt=false, __expf-style
                  intrinsics (__expf, __logf, __sinf, __cosf, __tanf, __powf, __fdividef, ...)
Comments (``//``, ``/* */`` and Python ``# `` comments) are removed first, so prose such as
"half the threads" in a comment does not flag. (A Python floor division ``a // b`` also hides the
rest of its line from the scan; the scan only explains, so a miss costs an explanation, not a
verdict.)
"""
from __future__ import annotations

import re

_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
# A Python comment: "#" then a space, unless it is a C preprocessor line ("# define", "# pragma").
_PY_COMMENT = re.compile(
    r"#(?=\s)(?!\s*(?:include|define|undef|pragma|if|ifdef|ifndef|elif|else|endif|error)\b)"
    r"[^\n]*")

# (family, regex); a pattern's group "tok" (or the whole match) names the flag.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fam, re.compile(rx)) for fam, rx in (
        # --- tensor-core instructions and fragments (checked first: most specific) ---
        ("tf32", r"(?P<tok>wmma::precision::tf32)"),
        ("fp16", r"(?P<tok>wmma)::fragment<[^;>]*\b(?:__half|half)\b"),
        ("bf16", r"(?P<tok>wmma)::fragment<[^;>]*\b(?:__nv_bfloat16|bfloat16)\b"),
        ("tf32", r"\b(?P<tok>(?:wg)?mma)\.[\w.]*\.tf32\b"),
        ("bf16", r"\b(?P<tok>(?:wg)?mma)\.[\w.]*\.bf16\b"),
        ("fp16", r"\b(?P<tok>(?:wg)?mma)\.[\w.]*\.f16\b"),
        ("tf32", r"\b(?P<tok>cvt)\.[\w.]*\.tf32\b"),
        ("tf32", r"\b(?P<tok>__float_to_tf32|tfloat32_t)\b"),
        # --- libraries' math modes ---
        ("tf32", r"\b(?P<tok>CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_TF32)\b"),
        ("fp16", r"\b(?P<tok>CUBLAS_COMPUTE_32F_FAST_16F|CUBLAS_COMPUTE_16F|CUDA_R_16F)\b"),
        ("bf16", r"\b(?P<tok>CUBLAS_COMPUTE_32F_FAST_16BF|CUDA_R_16BF)\b"),
        ("mathmode", r"\b(?P<tok>cublasSetMathMode|CUBLAS_TENSOR_OP_MATH|"
                     r"CUBLAS_GEMM_DEFAULT_TENSOR_OP|cudnnSetConvolutionMathType|"
                     r"CUDNN_TENSOR_OP_MATH(?:_ALLOW_CONVERSION)?)\b"),
        # --- PyTorch switches ---
        ("tf32", r"\b(?P<tok>allow_tf32)\s*=\s*True\b"),
        ("tf32", r"\b(?P<tok>set_float32_matmul_precision)\s*\(\s*['\"](?:high|medium)['\"]"),
        ("tf32", r"\b(?P<tok>fp32_precision)\s*=\s*['\"]tf32['\"]"),
        ("autocast", r"\b(?P<tok>autocast)\s*\("),
        # --- types and conversions ---
        ("fp8", r"\b(?P<tok>__nv_fp8\w*|float8_e\dm\d\w*)\b"),
        ("bf16", r"(?P<tok>\b\w*[bB][fF]loat16\w*)\b"),
        ("fp16", r"(?P<tok>\b__\w*half\w*\b)"),
        ("fp16", r"\b(?P<tok>__h(?:add|sub|mul|div|fma|neg|abs|max|min|sqrt|exp|log)2?)\b"),
        ("fp16", r"(?P<tok>\.half\(\))"),
        ("fp16", r"\b(?P<tok>torch\.(?:float16|half))\b"),
        ("fp16", r"\b(?P<tok>(?:at|c10)::(?:Half|kHalf)|kHalf|ScalarType::Half|half_t)\b"),
        # `half` / `half2` as a C++ type: a cast, a template argument, or a declaration (a
        # variable *named* half, as in `int half = n / 2; if (i < half)`, does not match).
        ("fp16", r"\(\s*(?:const\s+)?(?P<tok>half2?)\s*\**\s*\)"),
        ("fp16", r"<(?:const\s+)?(?P<tok>half2?)\s*\**\s*[,>]|,\s*(?P<tok2>half2?)\s*>"),
        ("fp16", r"(?m)(?:^|[;{}(,]|\bconst|\bstatic|__shared__)\s*(?P<tok>half2?)\s*[*&]*\s*"
                 r"(?:__restrict__\s*)?[A-Za-z_]\w*\s*[=;,\[)]"),
        # --- fast math (a flag of its own, not lower precision) ---
        ("fastmath", r"(?P<tok>--?use_fast_math|-ffast-math|--?ftz=true|-prec-div=false|"
                     r"-prec-sqrt=false)"),
        ("fastmath", r"\b(?P<tok>__(?:expf|exp10f|logf|log2f|log10f|sinf|cosf|sincosf|tanf|"
                     r"powf|fdividef|tanhf))\b"),
    ))


def strip_comments(source: str) -> str:
    """``source`` without C/C++ comments and Python ``# `` comments (preprocessor lines kept).
    Comment text is replaced by spaces, so positions and line numbers are unchanged."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731
    return _PY_COMMENT.sub(blank, _C_COMMENT.sub(blank, source))


def scan_source(source: str) -> tuple[str, ...]:
    """Lower-precision and fast-math uses in a candidate's source.

    Args:
        source: the whole candidate module text (Python with embedded CUDA/C++ strings).
    Returns: distinct flags such as ``("fp16:__float2half", "fp16:wmma", "fastmath:__expf")``,
        in order of first appearance; empty when nothing is found.
    Raises:
        ValueError: ``source`` is not a string.
    """
    if not isinstance(source, str):
        raise ValueError(f"scan_source needs the source text, got {type(source).__name__}")
    text = strip_comments(source)
    found: list[tuple[int, str]] = []
    for family, rx in _PATTERNS:
        for m in rx.finditer(text):
            tok = next((m.group(g) for g in ("tok", "tok2")
                        if g in rx.groupindex and m.group(g)), m.group(0))
            found.append((m.start(), f"{family}:{tok}"))
    seen: dict[str, None] = {}
    for _, flag in sorted(found):
        seen.setdefault(flag, None)
    return tuple(seen)
