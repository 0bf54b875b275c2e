"""CPU tests of the anti-cheat additions: the poison pattern (outputs never written), partial
outputs, lower precision named by the source scan, perturbed constant parameters, the spot-check
tolerance, launch-error classification, the kernel-name logic of the reference-fallback check,
and the fixture tags that experiments/gate_report.py reads."""
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from evokernel.gate import fallback
from evokernel.gate import maths as gm
from evokernel.gate import unwritten
from evokernel.config import GateConfig
from evokernel.errors import ConfigError
from evokernel.gate.judge import gate_candidate
from evokernel.gate.reference import (GateReference, match_constant_parameters,
                                      perturb_constant_parameters)
from evokernel.gate.run import exception_reason, is_launch_error, is_sticky
from evokernel.problem import exec_module
from evokernel.records import Reason, Verdict
from evokernel.engine.faults import classify_exception

ROOT = Path(__file__).resolve().parents[2]

MATMUL = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, A, B):
        return A @ B
def get_inputs():
    return [torch.randn(64, 256), torch.randn(256, 64)]
def get_init_inputs():
    return []
'''

LAYERNORM_DEFAULT = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.ln = nn.LayerNorm(n)                 # weight = 1, bias = 0: KernelBench's default
    def forward(self, x):
        return self.ln(x)
def get_inputs():
    return [torch.randn(8, 1024)]
def get_init_inputs():
    return [1024]
'''

_n = [0]


def build(source, config=GateConfig()):
    _n[0] += 1
    module = exec_module(source, f"test_gate_cheats_{_n[0]}", "<test problem>")
    return GateReference.build(module, config, "cpu")


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@pytest.fixture(scope="module")
def matmul():
    return build(MATMUL)


# --- the poison pattern --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_poison_reads_as_nan_and_is_counted(dtype):
    p = unwritten.poison_tensor((3, 5), dtype)
    assert p.dtype == dtype and torch.isnan(p).all()
    assert unwritten.count_poison(p) == 15
    computed = torch.full((3, 5), math.nan, dtype=dtype)   # a NaN from arithmetic: not poison
    assert unwritten.count_poison(computed) == 0
    mixed = torch.cat([p, torch.zeros(2, 5, dtype=dtype)])
    assert unwritten.count_poison(mixed) == 15
    assert unwritten.count_poison(torch.zeros(4, dtype=torch.int32)) == 0


def test_poison_word_is_the_int32_fill_the_gate_writes():
    words = torch.full((4,), unwritten.POISON_WORD, dtype=torch.int32)
    assert unwritten.count_poison(words.view(torch.float32)) == 4
    assert unwritten.count_poison(words.view(torch.float64)) == 2
    assert unwritten.count_poison(words.view(torch.float16)) == 8


def test_unwritten_output_is_result_reuse_and_half_written_is_partial(matmul):
    def never_written(a, b):
        return unwritten.poison_tensor((a.shape[0], b.shape[1]), torch.float32)

    def half(a, b):
        out = a @ b
        out[32:] = unwritten.poison_tensor((32, b.shape[1]), torch.float32)
        return out
    outcome = gate_candidate(matmul, Fn(never_written))
    assert outcome.reason is Reason.RESULT_REUSE and "never written" in outcome.detail
    outcome = gate_candidate(matmul, Fn(half))
    assert outcome.reason is Reason.PARTIAL_OUTPUT and "2048 of 4096" in outcome.detail


# --- partial outputs -----------------------------------------------------------------------------

def test_partial_output_by_slices():
    t = torch.randn(8, 100, dtype=torch.float64)
    out = t.float().clone()
    assert unwritten.partial_output(out, t, 1e-6) == ""                       # all right
    out[3:] = 0
    found = unwritten.partial_output(out, t, 1e-6)
    assert "3 of 8 slices along dim 0 are right" in found and "5 wholly wrong" in found
    assert unwritten.partial_output(torch.zeros_like(out), t, 1e-6) == ""     # nothing right: not partial
    noisy = (t * (1 + 1e-3 * torch.randn_like(t))).float()               # wrong everywhere, a bit
    assert unwritten.partial_output(noisy, t, 1e-6) == ""
    batch = torch.randn(1, 4, 10, 10, dtype=torch.float64)               # first dim of size 1
    b_out = batch.float().clone()
    b_out[0, 1:] = float("nan")
    assert "along dim 1" in unwritten.partial_output(b_out, batch, 1e-6)


def test_partial_output_names_the_reason(matmul):
    outcome = gate_candidate(matmul, Fn(lambda a, b: torch.cat(
        [a[:16] @ b, torch.zeros(a.shape[0] - 16, b.shape[1])])))
    assert outcome.reason is Reason.PARTIAL_OUTPUT and "partial_output" in outcome.flags


# --- lower precision named by the scan -----------------------------------------------------------

def test_partial_lowering_is_named_by_the_scan(matmul):
    # Only B rounded to FP16: no rounded-input truth matches (A's rounding is missing), ~100x.
    cand = Fn(lambda a, b: a @ b.half().float())
    plain = gate_candidate(matmul, cand)
    assert not plain.passed and plain.reason is not Reason.LOWER_PRECISION
    source = "y = A @ B.half().float()  # __float2half in the CUDA"
    named = gate_candidate(matmul, cand, source=source)
    assert named.reason is Reason.LOWER_PRECISION, named.detail
    assert "lower_precision:scan" in named.flags and "fp16:.half()" in named.detail


def test_scan_lowering_is_not_accepted_as_accumulation_error():
    ref = build(MATMUL, GateConfig(accumulation_error="accept"))
    outcome = gate_candidate(ref, Fn(lambda a, b: a @ b.half().float()), source="x.half()")
    assert outcome.reason is Reason.LOWER_PRECISION


# --- constant parameters -------------------------------------------------------------------------

class _LN(nn.Module):
    def __init__(self, n, affine=True):
        super().__init__()
        self.ln = nn.LayerNorm(n)
        self.affine = affine

    def forward(self, x):
        if self.affine:
            return self.ln(x)
        return nn.functional.layer_norm(x, self.ln.normalized_shape, eps=self.ln.eps)


def test_constant_parameters_are_perturbed_and_shared():
    ref = build(LAYERNORM_DEFAULT)
    assert ref.perturbed == ("ln.weight", "ln.bias")
    w = ref.model.ln.weight.detach()
    assert not bool((w == w[0]).all()) and abs(float(w.mean()) - 1) < 0.05
    honest, gate_ref = ref.prepare_candidate(_LN)
    assert gate_ref is ref and torch.equal(honest.ln.weight, ref.model.ln.weight)
    assert gate_candidate(gate_ref, honest).passed
    skipping, gate_ref = ref.prepare_candidate(lambda n: _LN(n, affine=False))
    outcome = gate_candidate(gate_ref, skipping)
    assert outcome.reason is Reason.WRONG_FUNCTION, outcome.detail


class _Renamed(nn.Module):
    """LayerNorm with its own parameter names (gamma = 1, beta = 0), optionally skipping them."""

    def __init__(self, n, affine=True):
        super().__init__()
        self.gamma, self.beta = nn.Parameter(torch.ones(n)), nn.Parameter(torch.zeros(n))
        self.n, self.affine = n, affine

    def forward(self, x):
        y = nn.functional.layer_norm(x, (self.n,), eps=1e-5)
        return y * self.gamma + self.beta if self.affine else y


def test_renamed_parameters_are_matched_by_value_and_get_the_perturbed_weights():
    ref = build(LAYERNORM_DEFAULT)
    honest, gate_ref = ref.prepare_candidate(_Renamed)
    assert gate_ref is ref and torch.equal(honest.gamma, ref.model.ln.weight)
    assert torch.equal(honest.beta, ref.model.ln.bias)
    assert gate_candidate(gate_ref, honest).passed
    # hard-coding weight 1 and bias 0 under other names is caught like the named version
    skipping, gate_ref = ref.prepare_candidate(lambda n: _Renamed(n, affine=False))
    assert gate_ref is ref
    outcome = gate_candidate(gate_ref, skipping)
    assert outcome.reason is Reason.WRONG_FUNCTION, outcome.detail


@pytest.mark.parametrize("kind", ["no parameters", "packed"])
def test_unmatched_parameters_are_judged_against_the_perturbed_reference(kind):
    """A candidate whose parameters cannot be matched keeps its own: one that assumes weight 1
    and bias 0 (here: F.layer_norm without them, or ones/zeros packed in one tensor) is wrong
    against the perturbed reference, and the detail says what to do."""
    ref = build(LAYERNORM_DEFAULT)

    class Unmatched(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n
            if kind == "packed":
                self.affine = nn.Parameter(torch.stack([torch.ones(n), torch.zeros(n)]))

        def forward(self, x):
            y = nn.functional.layer_norm(x, (self.n,), eps=1e-5)
            if kind == "packed":
                return y * self.affine[0] + self.affine[1]
            return y
    model_new, gate_ref = ref.prepare_candidate(Unmatched)
    assert gate_ref is ref and gate_ref.parameter_note(model_new)
    outcome = gate_candidate(gate_ref, model_new)
    assert outcome.reason is Reason.WRONG_FUNCTION, outcome.detail
    assert "Create them as the reference does" in outcome.detail


@pytest.mark.parametrize("affine", [True, False])
def test_an_extra_parameter_does_not_stop_the_constants_from_arriving(affine):
    ref = build(LAYERNORM_DEFAULT)

    class Extra(_Renamed):
        def __init__(self, n):
            super().__init__(n, affine=affine)
            self.unused = nn.Parameter(torch.ones(3))
    model_new, gate_ref = ref.prepare_candidate(Extra)
    assert torch.equal(model_new.gamma, ref.model.ln.weight)
    assert gate_candidate(gate_ref, model_new).passed is affine


def test_matched_candidates_carry_no_parameter_note():
    ref = build(LAYERNORM_DEFAULT)
    for cls in (_LN, _Renamed):
        model_new, gate_ref = ref.prepare_candidate(cls)
        assert gate_ref.parameter_note(model_new) == ""
        assert "note:" not in gate_candidate(gate_ref, model_new).detail


def test_constant_matching_prefers_names_then_suffixes_then_order():
    ref = nn.Module()
    ref.bn, ref.gn = nn.BatchNorm1d(4), nn.GroupNorm(2, 4)    # two weight 1 / bias 0 pairs
    constants = {"bn.weight": 1.0, "bn.bias": 0.0, "gn.weight": 1.0, "gn.bias": 0.0}
    same = nn.Module()
    same.gn, same.bn = nn.GroupNorm(2, 4), nn.BatchNorm1d(4)  # registered the other way round
    assert match_constant_parameters(ref, same, constants)[0] == {k: k for k in constants}
    wrapped = nn.Module()
    wrapped.model = ref.__class__()
    wrapped.model.bn, wrapped.model.gn = nn.BatchNorm1d(4), nn.GroupNorm(2, 4)
    pairs, unpaired = match_constant_parameters(ref, wrapped, constants)
    assert pairs == {k: "model." + k for k in constants} and unpaired == []
    renamed = nn.Module()
    renamed.a, renamed.b = nn.BatchNorm1d(4), nn.GroupNorm(2, 4)
    pairs, _ = match_constant_parameters(ref, renamed, constants)
    assert pairs == {"bn.weight": "a.weight", "bn.bias": "a.bias",
                     "gn.weight": "b.weight", "gn.bias": "b.bias"}
    none = nn.Module()
    none.w = nn.Parameter(torch.full((4,), 2.0))             # holds no reference constant
    assert match_constant_parameters(ref, none, constants) == ({}, list(constants))


TWO_NORMS = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, i, o, g):
        super().__init__()
        self.gemm = nn.Linear(i, o)
        self.batch_norm = nn.BatchNorm1d(o)
        self.group_norm = nn.GroupNorm(g, o)
    def forward(self, x):
        x = torch.nn.functional.gelu(self.batch_norm(self.gemm(x)))
        return self.group_norm(x)
def get_inputs(): return [torch.randn(16, 64)]
def get_init_inputs(): return [64, 128, 8]
"""


class _TwoNorms(nn.Module):
    """TWO_NORMS written the ways an LLM might (the second review's cases); ``skip`` hard-codes
    the group norm's weight 1 and bias 0."""

    def __init__(self, i, o, g, style="renamed", skip=False):
        super().__init__()
        self.style, self.skip, self.g = style, skip, g
        if style == "sequential":
            self.net = nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o))
        else:
            self.linear, self.bn = nn.Linear(i, o), nn.BatchNorm1d(o)
        self.gn = nn.GroupNorm(g, o)
        if style == "transposed":                  # a GEMM kernel's pre-transposed weight
            self.weight_t = nn.Parameter(self.linear.weight.detach().t().contiguous())
            self.bias = nn.Parameter(self.linear.bias.detach().clone())
            del self.linear

    def forward(self, x):
        if self.style == "sequential":
            x = self.net(x)
        elif self.style == "transposed":
            x = self.bn(x @ self.weight_t + self.bias)
        else:
            x = self.bn(self.linear(x))
        x = nn.functional.gelu(x)
        if self.skip:
            return nn.functional.group_norm(x, self.g, eps=self.gn.eps)
        return self.gn(x)


@pytest.mark.parametrize("style", ["renamed", "sequential", "transposed"])
def test_two_norms_written_differently_pass_and_skipping_one_fails(style):
    ref = build(TWO_NORMS)
    assert len(ref.perturbed) == 4
    honest, gate_ref = ref.prepare_candidate(lambda *a: _TwoNorms(*a, style=style))
    assert gate_ref.parameter_note(honest) == ""
    outcome = gate_candidate(gate_ref, honest)
    assert outcome.passed, outcome.detail
    cheat, gate_ref = ref.prepare_candidate(lambda *a: _TwoNorms(*a, style=style, skip=True))
    assert not gate_candidate(gate_ref, cheat).passed


def test_lazy_and_odd_extra_parameters_do_not_break_preparation():
    ref = build(LAYERNORM_DEFAULT)

    class Odd(_Renamed):
        def __init__(self, n):
            super().__init__(n)
            self.lazy = nn.LazyLinear(4)                   # uninitialized until first call
            self.eps_param = nn.Parameter(torch.tensor(1e-5))   # 0-d
    model_new, gate_ref = ref.prepare_candidate(Odd)
    assert gate_ref.parameter_note(model_new) == ""
    assert torch.equal(model_new.gamma, ref.model.ln.weight)


def test_perturbation_is_deterministic_and_can_be_turned_off():
    a, b = nn.LayerNorm(16), nn.LayerNorm(16)
    assert perturb_constant_parameters(a) == perturb_constant_parameters(b) == ("weight", "bias")
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    lin = nn.Linear(4, 4)                          # random already: untouched
    before = lin.weight.detach().clone()
    assert perturb_constant_parameters(lin) == () and torch.equal(lin.weight, before)
    ref = build(LAYERNORM_DEFAULT, GateConfig(perturb_constant_parameters=False))
    assert ref.perturbed == () and torch.equal(ref.model.ln.weight, torch.ones(1024))


def test_gate_config_policy_values():
    assert GateConfig().reference_fallback == "reject"
    GateConfig(reference_fallback="flag")
    with pytest.raises(ConfigError):
        GateConfig(reference_fallback="maybe")


# --- spot checks ---------------------------------------------------------------------------------

def test_spot_tolerance_and_distance():
    tol = gm.spot_tolerance([(1e-6, 2e-6), (3e-6, 1e-6)], torch.float32)
    assert tol == pytest.approx(gm.SPOT_MARGIN * 4e-6)
    assert gm.spot_tolerance([], torch.float32) == pytest.approx(
        gm.SPOT_MARGIN * 2 * 2.0 ** -24)
    x = torch.randn(100, 100)
    assert gm.relative_distance(x, x) == 0.0
    assert gm.relative_distance(torch.randn(100, 100), x) > 1.0        # another set's output
    assert gm.relative_distance(x[:10], x) == math.inf


def test_worker_stale_output_detection():
    from evokernel.engine.outputs import stale_outputs as _stale
    expected = [(torch.randn(10, 10),), (torch.randn(10, 10),)]
    assert _stale({0: expected[0][0].clone(), 1: expected[1][0]}, expected, 1e-5, "set") == ""
    why = _stale({0: expected[1][0].clone()}, expected, 1e-5, "the output on timing set")
    assert "timing set 0" in why and "it is the output for timing set 1" in why


# --- launch errors -------------------------------------------------------------------------------

_ADVICE = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
           "stacktrace below might be incorrect.\nFor debugging consider passing "
           "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
           "assertions.\n")


def test_launch_errors_are_not_sticky():
    smem = RuntimeError("CUDA error: invalid argument" + _ADVICE)
    grid = RuntimeError("CUDA error: invalid configuration argument" + _ADVICE)
    oob = RuntimeError("CUDA error: an illegal memory access was encountered" + _ADVICE)
    plain = ValueError("invalid argument")                  # not a CUDA error
    assert is_launch_error(smem) and not is_sticky(smem)
    assert is_launch_error(grid) and not is_sticky(grid)
    assert is_sticky(oob) and not is_launch_error(oob)
    assert not is_launch_error(plain)
    assert exception_reason(smem) is Reason.RUNTIME_ERROR
    assert exception_reason(oob) is Reason.CUDA_FAULT
    assert classify_exception(smem) == (Reason.RUNTIME_ERROR, False)
    assert classify_exception(oob) == (Reason.CUDA_FAULT, True)


# --- the reference-fallback check ----------------------------------------------------------------

SOFTMAX_ATEN = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, "
                "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, "
                "float const*, int)")
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
COPY = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() "
        "const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, "
        "unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast"
        "<1>, at::native::memory::StoreWithCast<1> >(int, float, std::array<char*, 2ul>)")
GEMM = "nvjet_sm90_sss_128x128_64x4_2x1_v_bz_coopA_NNN"
GEMM2 = ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"
         "segment_k_off_kernel__5x_cublas")
RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
        "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::"
        "operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float, "
        "std::array<char*, 2ul>)")
OWN_SOURCE = "__global__ void softmax_block_kernel(const float* x) {}\n" \
             "__global__ __launch_bounds__(256) void relu_kernel(float* y) {}"


def test_kernel_names():
    assert fallback.function_name(SOFTMAX_ATEN) == "cunn_SoftMaxForward"
    assert fallback.function_name("void softmax_block_kernel<256>(float const*, float*)") == \
        "softmax_block_kernel"
    assert fallback.own_kernel_names(OWN_SOURCE) == {"softmax_block_kernel", "relu_kernel"}
    for lib in (SOFTMAX_ATEN, FILL, COPY, GEMM, GEMM2, RELU,
                "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)",
                "void cudnn::cnn::conv2d_grouped_direct_kernel<float>(int)"):
        assert fallback.is_library(lib), lib
    for own in ("softmax_block_kernel(float const*, float*, long, long)",
                "void (anonymous namespace)::my_kernel(float*)",
                "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<float>>(Params)"):
        assert not fallback.is_library(own), own
    assert fallback.is_dense(GEMM) and fallback.is_dense(GEMM2)
    assert not fallback.is_dense(FILL) and not fallback.is_dense(SOFTMAX_ATEN)


def test_main_kernels_by_time_share():
    assert fallback.main_kernels([(GEMM, 90.0), (RELU, 10.0)]) == (GEMM,)
    assert fallback.main_kernels([(GEMM, 60.0), (RELU, 40.0)]) == (GEMM, RELU)
    assert fallback.main_kernels([(RELU, 1.0), (RELU, 1.0), (GEMM, 1.5)]) == (RELU, GEMM)
    assert fallback.main_kernels([(RELU, 1.0), (RELU, 1.0), (GEMM, 0.3)]) == (RELU,)
    assert fallback.main_kernels([]) == ()


def test_judge_kernels():
    own = ("softmax_block_kernel(float const*, float*, long, long)", 50.0)
    ref = [(SOFTMAX_ATEN, 40.0)]
    ok = fallback.judge_kernels([(FILL, 1.0), own], ref, OWN_SOURCE)
    assert ok.reason is None and any(f.startswith("aten_kernels:") for f in ok.flags)
    # The reference's own softmax beside a kernel of its own, however slow that one is: the
    # share is of the reference's time, which the reused softmax is all of.
    mixed = fallback.judge_kernels([("softmax_block_kernel(float const*, float*, long, long)",
                                     500.0), (SOFTMAX_ATEN, 40.0), (COPY, 5.0)], ref, OWN_SOURCE)
    assert mixed.reason is Reason.REFERENCE_FALLBACK and "cunn_SoftMaxForward" in mixed.detail
    assert "100% of the reference's GPU time" in mixed.detail and mixed.reference_share == 1.0
    only_torch = fallback.judge_kernels([(SOFTMAX_ATEN, 40.0)], ref, "")
    assert only_torch.reason is Reason.REFERENCE_FALLBACK
    composed = fallback.judge_kernels([(FILL, 1.0), (COPY, 2.0)], ref, "")
    assert composed.reason is Reason.NO_KERNEL_LAUNCHED and "no_own_kernel" in composed.flags
    nothing = fallback.judge_kernels([], ref, "")
    assert nothing.reason is Reason.NO_KERNEL_LAUNCHED and "no kernel at all" in nothing.detail
    # A GEMM reference: another cuBLAS tile is still the reference's GEMM; a generic ATen
    # launcher with another functor (ReLU vs fill) is not the reference's op.
    linear = fallback.judge_kernels([(GEMM2, 80.0), ("relu_kernel(float*, long)", 3.0)],
                                    [(GEMM, 90.0)], OWN_SOURCE)
    assert linear.reason is Reason.REFERENCE_FALLBACK
    fused = fallback.judge_kernels([("linear_relu_kernel(float const*)", 80.0), (FILL, 1.0)],
                                   [(GEMM, 90.0), (RELU, 10.0)], "")
    assert fused.reason is None


# KernelBench level 1 problem 98, KL divergence: F.kl_div(torch.log(predictions), targets,
# reduction="batchmean"), batch 128 x 4096. Its reference launches a log, the kl_div element-wise
# kernel, a sum and a division; a candidate that computes the element-wise part in one kernel of
# its own and reduces with torch.sum launches the reference's very reduce_kernel. (Kernel names as
# ATen 2.11 demangles them; the times are the shape of an H200 profile: the fused kernel reads
# two inputs and writes one, the sum reads one.)
KL_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
          "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>"
          "::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, "
          "4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
          "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)"
          "::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)")
KL_REFERENCE = [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::log_kernel_cuda(at::"
     "TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::"
     "{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", 4.2),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::kl_div_kernel_cuda(at::"
     "TensorIteratorBase&)::{lambda(float, float)#1}, std::array<char*, 3ul> >(int, ...)", 5.1),
    (KL_SUM, 4.0),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
     "float, at::native::binary_internal::DivFunctor<float> >, std::array<char*, 3ul> >(int, "
     "...)", 1.9)]


def test_kl_divergence_with_its_own_elementwise_kernel_and_torch_sum_is_accepted():
    """The case the old rule got wrong (rejected as reference_fallback for launching the
    reference's reduce_kernel): the candidate's own kernel does most of its GPU time, so the
    reused sum is reported, not rejected."""
    own = ("kl_div_elementwise_kernel(float const*, float const*, float*, int)", 5.0)
    source = "__global__ void kl_div_elementwise_kernel(const float* p, const float* q, float* o, int n)"
    div = KL_REFERENCE[3]
    # As on the H200 (results/h200-2026-12-01-s5/call2): the reused sum and division were 59% of
    # the candidate's own GPU time, but they are 5.9 of the reference's 15.2 us.
    v = fallback.judge_kernels([own, (KL_SUM, 4.1), (div[0], 3.1)], KL_REFERENCE, source)
    assert v.reason is None, v.detail
    assert v.reference_share == pytest.approx(5.9 / 15.2)
    assert any(f.startswith("reference_kernels:39%:reduce_kernel") for f in v.flags), v.flags
    assert "reuses the reference's reduce_kernel, vectorized_elementwise_kernel, 39% of the " \
           "reference's GPU time" in v.detail
    # Reusing the element-wise kl_div and the log as well is reusing most of the reference.
    heavy = fallback.judge_kernels([(KL_REFERENCE[0][0], 4.2), (KL_REFERENCE[1][0], 5.1),
                                    (own[0], 1.0), (KL_SUM, 4.0)], KL_REFERENCE, source)
    assert heavy.reason is Reason.REFERENCE_FALLBACK and "88%" in heavy.detail


# --- the fixtures' tags --------------------------------------------------------------------------

def _report():
    spec = importlib.util.spec_from_file_location("gate_report", ROOT / "experiments" /
                                                  "gate_report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod             # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_fixture_is_tagged_and_covers_the_checks():
    report = _report()
    fixtures = report.discover(ROOT)
    cheats = [f for f in fixtures if f.kind == "cheat"]
    legit = [f for f in fixtures if f.kind == "legit"]
    assert len(legit) >= 8 and all(f.verdict == "accept" for f in legit)
    assert all(f.verdict == "reject" for f in cheats)
    covered = {f.reason for f in cheats}
    for reason in ("result_reuse", "input_mutation", "side_stream", "threads", "lazy_output",
                   "timer_tampering", "cached_output", "lower_precision", "constant_output",
                   "unstable_distribution", "partial_output", "reference_fallback",
                   "silent_failure", "impossible_speed"):
        assert reason in covered, reason
    assert {f.check for f in cheats} >= set(report.ISSUE_CHECKS)
    for f in fixtures:
        source = f.path.read_text()
        compile(source, str(f.path), "exec")
        assert "class ModelNew" in source, f.name


def test_fixture_tag_errors(tmp_path):
    report = _report()
    (tmp_path / "p.py").write_text("x = 1\n")
    bad = tmp_path / "legit"
    bad.mkdir()
    f = bad / "k.py"
    f.write_text('"""A kernel.\n\nEXPECTED: accept bogus\nPROBLEM: p.py\n"""\n')
    with pytest.raises(ValueError, match="unknown reason"):
        report.parse_fixture(f, tmp_path)
    f.write_text('"""A kernel.\n\nEXPECTED: reject ok\nPROBLEM: p.py\n"""\n')
    with pytest.raises(ValueError, match="does not fit"):
        report.parse_fixture(f, tmp_path)
    f.write_text('"""A kernel.\n\nEXPECTED: accept ok\nPROBLEM: p.py\n"""\n')
    parsed = report.parse_fixture(f, tmp_path)
    assert parsed.kind == "legit" and parsed.verdict == "accept" and parsed.reason == "ok"


def test_report_rendering_and_factor_evidence():
    report = _report()
    rows = [
        {"fixture": "a", "kind": "legit", "problem": "p", "expected": "accept ok",
         "verdict": "accept", "reason": "ok", "ok": True, "norm_ratio": 1.5, "max_ratio": 0.9,
         "where": "offset seed 0", "candidate_ms": 0.1, "reference_ms": 0.2, "floor_ms": 0.05,
         "flags": [], "detail": "", "checks": [
             {"distribution": "problem", "seed": 0, "norm_ratio": 1.0, "max_ratio": 0.5,
              "passed": True},
             {"distribution": "offset", "seed": 0, "norm_ratio": 1.5, "max_ratio": 0.9,
              "passed": True}]},
        {"fixture": "b", "kind": "cheat", "problem": "p", "expected": "reject lower_precision",
         "verdict": "reject", "reason": "lower_precision", "ok": True, "norm_ratio": 256.0,
         "max_ratio": 96.8, "where": "problem seed 0", "candidate_ms": None,
         "reference_ms": None, "floor_ms": 0.3, "flags": [], "detail": "", "checks": [
             {"distribution": "problem", "seed": 0, "norm_ratio": 256.0, "max_ratio": 96.8,
              "passed": False}]},
        {"fixture": "c", "kind": "cheat", "problem": "p", "expected": "reject threads",
         "verdict": "accept", "reason": "ok", "ok": False, "norm_ratio": 1.0, "max_ratio": 1.0,
         "where": "-", "candidate_ms": 0.1, "reference_ms": 0.2, "floor_ms": 0.05, "flags": [],
         "detail": "", "checks": []},
    ]
    ev = report.factor_evidence(rows)
    assert ev["largest_legit_ratio"] == 1.5 and ev["largest_legit_at"] == "a on offset seed 0"
    assert ev["smallest_lower_precision_ratio"] == 256.0
    assert ev["factor_range"] == [3.0, 128.0]
    md = report.render(rows, ev, 16.0)
    assert "| c | cheat | reject threads | accept | ok | **NO** |" in md
    assert "cheat fixtures rejected for the right reason: 1 of 2" in md
    assert "checks rejected for the right reason (every fixture of the check): 0 of 14" in md
    assert "[3, 128]" in md


def test_eval_result_round_trips_new_reasons():
    from evokernel.records import EvalResult
    for reason in (Reason.PARTIAL_OUTPUT, Reason.SILENT_FAILURE):
        r = EvalResult.failure("x", reason, "why")
        assert EvalResult.from_dict(r.to_dict()) == r and r.verdict is Verdict.REJECT


def test_report_main_with_a_fake_evaluator(tmp_path, monkeypatch):
    """experiments/gate_report.py end to end without a GPU: builds and evaluators are fakes that
    give every fixture its expected reason except one, so the report must exit with 1."""
    import evokernel.build.builder as build_mod
    import evokernel.engine.evaluator as evaluator_mod
    from evokernel.records import ErrorCheck, EvalResult
    report = _report()
    expected = {f.name: f for f in report.discover(ROOT)}

    class FakeBuilder:
        def __init__(self, *a, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def build_many(self, cands):
            return [type("B", (), {"ok": True, "cache_hit": True, "log": ""})() for _ in cands]

    class FakeEvaluator:
        def __init__(self, problem, config, log_dir=None):
            self.info = {"device": "fake", "floor_ms": 0.01}

        def evaluate(self, cands):
            out = []
            for c in cands:
                f = expected[c.idea]
                reason = Reason(f.reason)
                if c.idea == "threads":                  # one wrong verdict
                    reason = Reason.OK
                check = ErrorCheck("problem", 0, 1e-7, 1e-6, 1e-7, 1e-6, 1.0, 1.0, True)
                out.append(EvalResult(c.id, Verdict.ACCEPT if reason is Reason.OK else
                                      Verdict.REJECT, reason, "why", "problem", 0, 1.0, 1.0,
                                      16.0, 0.2, 0.1, checks=(check,)))
            return out

        def close(self):
            pass
    monkeypatch.setattr(build_mod, "Builder", FakeBuilder)
    monkeypatch.setattr(build_mod, "device_arch", lambda: "9.0")
    monkeypatch.setattr(evaluator_mod, "CudaEvaluator", FakeEvaluator)
    import evokernel.timing.floor as floor_mod
    monkeypatch.setattr(floor_mod, "measure_peaks", lambda *a, **kw: None)
    import torch
    assert report.main(["--out", str(tmp_path / "none"), "--only", "threads"]) == 2 \
        or torch.cuda.is_available()                     # no GPU: refused, nothing made
    assert not (tmp_path / "none").exists() or torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    status = report.main(["--out", str(tmp_path), "--only", "softmax", "threads", "cached"])
    assert status == 1
    md = (tmp_path / "gate_report.md").read_text()
    assert "| threads | cheat | reject threads | accept | ok | **NO** |" in md
    import json
    data = json.loads((tmp_path / "gate_report.json").read_text())
    names = {r["fixture"] for r in data["rows"]}
    assert {"threads", "cached_shape", "softmax_online_warp"} <= names
    assert data["factor_evidence"]["largest_legit_ratio"] == 1.0


def test_renamed_batchnorm_matches_its_parameters_whatever_its_running_statistics():
    ref = nn.BatchNorm1d(8)
    assert perturb_constant_parameters(ref) == ("weight", "bias")
    ref(torch.randn(16, 8) + 100)                  # the reference's forward moves its buffers
    cand = nn.Module()
    cand.bn = nn.BatchNorm1d(8)
    pairs, unpaired = match_constant_parameters(ref, cand, {"weight": 1.0, "bias": 0.0})
    assert pairs == {"weight": "bn.weight", "bias": "bn.bias"} and unpaired == []
