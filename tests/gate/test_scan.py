"""Static scan of candidate source for lower precision and fast math."""
from pathlib import Path

import pytest

from evokernel.gate.scan import scan_source, strip_comments

ROOT = Path(__file__).resolve().parents[2]


def test_fp16_fixture_is_flagged():
    flags = scan_source((ROOT / "tests/kernels/matmul_fp16.py").read_text())
    assert {"fp16:__float2half", "fp16:__half", "fp16:wmma"} <= set(flags)
    assert len(flags) == len(set(flags))


@pytest.mark.parametrize("path", sorted((ROOT / "problems/seeds").glob("[!_]*.py")))
def test_seed_kernels_have_no_lower_precision(path):
    flags = scan_source(path.read_text())
    assert not [f for f in flags if f.split(":")[0] in ("fp16", "bf16", "tf32", "fp8",
                                                          "mathmode", "autocast")], flags


@pytest.mark.parametrize("snippet,flag", [
    ("__half h = __float2half(x);", "fp16:__float2half"),
    ("float y = __half2float(h);", "fp16:__half2float"),
    ("half2 v = __floats2half2_rn(a, b);", "fp16:half2"),
    ("const half* __restrict__ a,", "fp16:half"),
    ("auto p = reinterpret_cast<half*>(ptr);", "fp16:half"),
    ("float f = (float)(half)x;", "fp16:half"),
    ("c = __hfma(a, b, c);", "fp16:__hfma"),
    ("wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;", "fp16:wmma"),
    ("asm(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ...\");", "fp16:mma"),
    ("y = x.half()", "fp16:.half()"),
    ("y = x.to(torch.float16)", "fp16:torch.float16"),
    ("auto t = torch::empty(s, x.options().dtype(at::kHalf));", "fp16:at::kHalf"),
    ("__nv_bfloat16 b = __float2bfloat16(x);", "bf16:__float2bfloat16"),
    ("y = x.to(torch.bfloat16)", "bf16:bfloat16"),
    ("wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;",
     "bf16:wmma"),
    ("wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;",
     "tf32:wmma::precision::tf32"),
    ("a.x[i] = wmma::__float_to_tf32(a.x[i]);", "tf32:__float_to_tf32"),
    ("asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : \"f\"(x));", "tf32:cvt"),
    ("asm(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 ...\");", "tf32:mma"),
    ("cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);", "tf32:CUBLAS_TF32_TENSOR_OP_MATH"),
    ("cublasSetMathMode(handle, CUBLAS_TENSOR_OP_MATH);", "mathmode:CUBLAS_TENSOR_OP_MATH"),
    ("cublasGemmEx(h, ..., CUBLAS_COMPUTE_32F_FAST_TF32, ...);",
     "tf32:CUBLAS_COMPUTE_32F_FAST_TF32"),
    ("cudnnSetConvolutionMathType(desc, CUDNN_TENSOR_OP_MATH);",
     "mathmode:cudnnSetConvolutionMathType"),
    ("torch.backends.cuda.matmul.allow_tf32 = True", "tf32:allow_tf32"),
    ("torch.backends.cudnn.allow_tf32=True", "tf32:allow_tf32"),
    ("torch.set_float32_matmul_precision('high')", "tf32:set_float32_matmul_precision"),
    ("torch.backends.cuda.matmul.fp32_precision = 'tf32'", "tf32:fp32_precision"),
    ("with torch.autocast(device_type='cuda'):", "autocast:autocast"),
    ("__nv_fp8_e4m3 q = __nv_fp8_e4m3(x);", "fp8:__nv_fp8_e4m3"),
    ("extra_cuda_cflags=['-O3', '--use_fast_math']", "fastmath:--use_fast_math"),
    ("float e = __expf(x - m);", "fastmath:__expf"),
    ("float r = __fdividef(a, b);", "fastmath:__fdividef"),
])
def test_snippets_flag(snippet, flag):
    assert flag in scan_source(snippet), scan_source(snippet)


@pytest.mark.parametrize("snippet", [
    "// use half the threads per block\n/* half2 would be faster */",
    "x = y  # half of the rows, see .half() notes",
    "int half = blockDim.x / 2; if (tid < half) s[tid] += s[tid + half];",
    "for (int half = n >> 1; half > 0; half >>= 1) {}",
    "torch.backends.cuda.matmul.allow_tf32 = False",
    "torch.set_float32_matmul_precision('highest')",
    "float e = expf(x); float l = logf(y); float r = rsqrtf(v);",
    "#include <cuda_fp16.h>\n#pragma unroll\nfloat acc = 0.0f;",
])
def test_honest_text_does_not_flag(snippet):
    assert scan_source(snippet) == ()


def test_flags_are_distinct_and_ordered():
    src = "__expf(a); __half h; __expf(b); __half g; x.half()"
    assert scan_source(src) == ("fastmath:__expf", "fp16:__half", "fp16:.half()")


def test_strip_comments_keeps_positions_and_preprocessor():
    src = "int a; // half\n# define X 1\n#include <x.h>\ny = 1  # half\n"
    out = strip_comments(src)
    assert len(out) == len(src) and out.count("\n") == src.count("\n")
    assert "half" not in out and "# define X 1" in out and "#include <x.h>" in out


def test_non_string_raises():
    with pytest.raises(ValueError):
        scan_source(None)
