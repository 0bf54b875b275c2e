"""The precision gate on CPU: pure-PyTorch candidates that emulate honest FP32 variants, lower
precision, instability, wrong functions and cheats. CPU matmul error differs from cuBLAS's, but
the logic under test is the same."""
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from evokernel.gate import maths as gm
from evokernel.config import KNOWN_DISTRIBUTIONS, GateConfig
from evokernel.errors import ProblemError
from evokernel.gate.judge import gate_candidate, is_strict_fp32, strict_fp32
from evokernel.gate.reference import GateReference, align_parameters
from evokernel.problem import exec_module
from evokernel.records import EvalResult, Reason, Verdict

ALL = GateConfig(distributions=KNOWN_DISTRIBUTIONS)

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

LAYERNORM = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.ln = nn.LayerNorm(n)
        with torch.no_grad():                     # non-trivial affine parameters
            self.ln.weight.copy_(1 + 0.1 * torch.randn(n))
            self.ln.bias.copy_(0.1 * torch.randn(n))
    def forward(self, x):
        return self.ln(x)
def get_inputs():
    return [torch.randn(8, 4096)]
def get_init_inputs():
    return [4096]
'''

SOFTMAX = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
def get_inputs():
    return [torch.randn(4, 65536)]
def get_init_inputs():
    return []
'''

GELU = '''
import torch, torch.nn as nn, torch.nn.functional as F
class Model(nn.Module):
    def forward(self, x):
        return F.gelu(x)
def get_inputs():
    return [torch.randn(16, 4096)]
def get_init_inputs():
    return []
'''

TRIANGULAR = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, L, B):
        return L @ B
def get_inputs():
    L = torch.tril(torch.randn(128, 128))
    return [L, torch.randn(128, 32)]
def get_init_inputs():
    return []
'''

TWO_OUTPUTS = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x.exp(), x.sum(dim=1)
def get_inputs():
    return [torch.randn(32, 512)]
def get_init_inputs():
    return []
'''

EXP = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x)
def get_inputs():
    return [torch.randn(256)]
def get_init_inputs():
    return []
'''

_counter = [0]


def build(source, config=ALL):
    _counter[0] += 1
    module = exec_module(source, f"test_gate_problem_{_counter[0]}", "<test problem>")
    return GateReference.build(module, config, "cpu")


class Fn(nn.Module):
    """A candidate whose forward is a plain function."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


_DETAIL = re.compile(r"on (\w+) seed (\d+): norm ratio (\S+), max ratio (\S+) \(tolerance_factor 16\)")


def rejected(outcome, reason):
    """Assert a rejection with ``reason`` whose detail names where and both ratios."""
    assert not outcome.passed and outcome.reason is reason, (outcome.reason, outcome.detail)
    m = _DETAIL.search(outcome.detail)
    assert m, outcome.detail
    assert m.group(1) in KNOWN_DISTRIBUTIONS and outcome.distribution == m.group(1)
    assert int(m.group(2)) == outcome.seed
    return m


@pytest.fixture(scope="module")
def matmul():
    return build(MATMUL)


@pytest.fixture(scope="module")
def layernorm():
    return build(LAYERNORM, GateConfig(distributions=("problem", "offset")))


# --- the maths -----------------------------------------------------------------------------------

def test_error_stats_and_ratios_by_hand():
    t = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    x = torch.tensor([1.0, 2.0, 3.0])
    norm, mx = gm.error_stats(x, t)
    assert norm == pytest.approx(1 / math.sqrt(21), rel=1e-15) and mx == 1.0
    # Ratios divide by PyTorch's error, floored at u = 2^-24 (norm) and u * max|t| (max).
    u = 2.0 ** -24
    assert gm.ratios(3e-7, 4e-6, 1e-7, 1e-6, torch.float32, 4.0) == pytest.approx((3.0, 4.0))
    nr, mr = gm.ratios(1e-6, 1e-5, 0.0, 0.0, torch.float32, 4.0)
    assert nr == pytest.approx(1e-6 / u) and mr == pytest.approx(1e-5 / (4 * u))
    assert gm.error_ratio(0.0, 0.0, 0.0) == 0.0 and gm.error_ratio(1.0, 0.0, 0.0) == math.inf
    assert gm.error_stats(torch.tensor([1.0, math.nan]), t[:2])[0] == math.inf
    assert gm.error_stats(torch.zeros(2), torch.zeros(2, dtype=torch.float64)) == (0.0, 0.0)


def test_ratios_match_errors_in_a_gate_check(matmul):
    gs = matmul.sets[0]
    A, B = gs.inputs
    scale = 1 + 2.0 ** -16                   # a relative error of 2^-16 ~ 1.5e-5, by design
    outcome = gate_candidate(matmul, Fn(lambda a, b: (a @ b) * scale))
    c = outcome.checks[0]
    cn, cm = gm.error_stats((A @ B) * scale, gs.truths[0])
    assert cn == pytest.approx(2.0 ** -16, rel=0.05)
    assert cm == pytest.approx(2.0 ** -16 * gs.stats[0].max_abs, rel=0.05)
    rn, rm = gs.reference_errors[0]
    assert (c.candidate_norm_error, c.candidate_max_error) == pytest.approx((cn, cm))
    assert c.norm_ratio == pytest.approx(cn / rn) and c.max_ratio == pytest.approx(cm / rm)
    assert 16 < c.norm_ratio < 1000 and 16 < c.max_ratio < 1000
    m = rejected(outcome, Reason.ACCUMULATION_ERROR)   # FP32-only, no rounded-input match
    assert float(m.group(3)) == pytest.approx(c.norm_ratio, rel=1e-2)
    assert float(m.group(4)) == pytest.approx(c.max_ratio, rel=1e-2)


def test_round_tf32_is_round_to_nearest_even():
    one = 1.0
    x = torch.tensor([one + 2 ** -11, one + 3 * 2 ** -11, one + 2 ** -11 + 2 ** -20,
                      -(one + 3 * 2 ** -11), 3.4028234e38, math.inf, 0.0])
    r = gm.round_tf32(x)
    assert r.tolist() == [1.0, one + 2 ** -9, one + 2 ** -10, -(one + 2 ** -9), math.inf,
                          math.inf, 0.0]
    assert math.isnan(gm.round_tf32(torch.tensor([math.nan])).item())
    y = torch.randn(10000)
    assert torch.equal(gm.round_tf32(y), gm.round_tf32(gm.round_tf32(y)))     # idempotent
    # TF32 and FP16 share a 10-bit mantissa: equal wherever FP16 is normal.
    normal = y.abs() > 2 ** -14
    assert torch.equal(gm.round_tf32(y)[normal], y.half().float()[normal])
    with pytest.raises(ValueError):
        gm.round_tf32(y.double())
    t = gm.round_tf32(torch.tensor([one + 2 ** -10 - 2 ** -23, -(one + 2 ** -10 - 2 ** -23)]),
                      truncate=True)
    assert t.tolist() == [1.0, -1.0]                         # toward zero


def test_match_lower_precision_threshold_and_ties():
    assert gm.match_lower_precision(1e-3, {"tf32": 3e-4, "fp16": 1e-2, "bf16": 1.0})[0] is None
    assert gm.match_lower_precision(1e-3, {"tf32": 2.5e-4, "fp16": 1e-2, "bf16": 1.0})[0] == "tf32"
    fmt, note = gm.match_lower_precision(1e-3, {"tf32": 1e-7, "fp16": 1.5e-7, "bf16": 1.0})
    assert fmt == "tf32" and "fp16" in note
    assert gm.match_lower_precision(1e-3, {"tf32": 2e-4, "fp16": 0.0, "bf16": 1.0}) == ("fp16", "")
    # A tie goes to the format the source scan found.
    fmt, note = gm.match_lower_precision(1e-3, {"tf32": 1e-7, "fp16": 1.5e-7, "bf16": 1.0},
                                         prefer=("fp16",))
    assert fmt == "fp16" and "tf32" in note


def test_output_form_checks():
    shape, dev = torch.Size([4, 4]), torch.device("cpu")
    ok = torch.zeros(4, 4)
    assert gm.check_output_form(ok, shape, torch.float32, dev) is None
    assert gm.check_output_form(ok.t(), shape, torch.float32, dev) is None   # strided is fine
    assert gm.check_output_form(nn.Parameter(ok), shape, torch.float32, dev)[0] \
        is Reason.LAZY_OUTPUT
    assert gm.check_output_form(ok[:1].expand(4, 4), shape, torch.float32, dev)[0] \
        is Reason.LAZY_OUTPUT
    assert gm.check_output_form(ok.to_sparse(), shape, torch.float32, dev)[0] \
        is Reason.LAZY_OUTPUT
    assert gm.check_output_form(ok.double(), shape, torch.float32, dev)[0] \
        is Reason.DTYPE_MISMATCH
    assert gm.check_output_form(ok[:3], shape, torch.float32, dev)[0] is Reason.SHAPE_MISMATCH
    assert gm.check_output_form(torch.empty(4, 4, device="meta"), shape, torch.float32,
                                torch.device("meta"))[0] is Reason.LAZY_OUTPUT


def test_strict_fp32_restores_settings():
    with strict_fp32():                       # the outer one restores this session's settings
        torch.backends.cuda.matmul.allow_tf32 = True
        assert not is_strict_fp32()
        with pytest.raises(KeyError):
            with strict_fp32():
                assert is_strict_fp32()
                raise KeyError
        assert torch.backends.cuda.matmul.allow_tf32 is True


def test_gate_reexports_the_reference_side():
    """The reference side moved to evokernel.gate.reference; evokernel.gate.judge still exports it."""
    from evokernel.gate import judge as gate
    from evokernel.gate import reference as gate_reference
    from evokernel.gate import run as gate_run
    for name in ("GateReference", "GateSet", "align_parameters", "perturb_constant_parameters",
                 "PERTURB_SPREAD"):
        assert getattr(gate, name) is getattr(gate_reference, name)
    assert gate.strict_fp32 is gate_run.strict_fp32
    assert gate.is_strict_fp32 is gate_run.is_strict_fp32
    assert all(hasattr(gate, name) for name in gate.__all__)


# --- honest FP32 variants pass -------------------------------------------------------------------

@pytest.mark.parametrize("name,fn", [
    ("einsum", lambda a, b: torch.einsum("ik,kj->ij", a, b)),
    ("chunked K partial sums", lambda a, b: sum(a[:, k:k + 32] @ b[k:k + 32]
                                               for k in range(0, a.shape[1], 32))),
    ("reversed K order", lambda a, b: a.flip(1) @ b.flip(0)),
])
def test_honest_fp32_matmul_passes_every_distribution(matmul, name, fn):
    outcome = gate_candidate(matmul, Fn(fn))
    assert outcome.passed and outcome.reason is Reason.OK, outcome.detail
    assert {c.distribution for c in outcome.checks} == set(KNOWN_DISTRIBUTIONS)
    assert all(c.norm_ratio <= 16 and c.max_ratio <= 16 for c in outcome.checks)
    assert _DETAIL.search(outcome.detail)


def test_reference_itself_passes(matmul):
    assert gate_candidate(matmul, matmul.model).passed


def test_two_pass_layernorm_passes(layernorm):
    def two_pass(x, w, b):
        m = x.mean(-1, keepdim=True)
        d = x - m
        return d * torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-5) * w + b
    outcome = gate_candidate(layernorm, layernorm.new_candidate(lambda n: _LN(two_pass, n)))
    assert outcome.passed, outcome.detail
    assert [c.distribution for c in outcome.checks] == ["problem", "offset"]
    # Without the reference's weights (align_parameters) the same code is another function.
    rejected(gate_candidate(layernorm, _LN(two_pass)), Reason.WRONG_FUNCTION)


# --- lower precision -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,fn", [
    ("fp16", lambda a, b: (a.half() @ b.half()).float()),
    ("bf16", lambda a, b: (a.bfloat16() @ b.bfloat16()).float()),
    ("tf32", lambda a, b: gm.round_tf32(a) @ gm.round_tf32(b)),
    ("tf32", lambda a, b: gm.round_tf32(a, truncate=True) @ gm.round_tf32(b, truncate=True)),
])
def test_lower_precision_matmul_is_named(matmul, fmt, fn):
    outcome = gate_candidate(matmul, Fn(fn), source="e = __expf(x);  // the candidate's text")
    m = rejected(outcome, Reason.LOWER_PRECISION)
    assert f"matches {fmt}" in outcome.detail and f"lower_precision:{fmt}" in outcome.flags
    assert float(m.group(3)) > 100                           # far over the factor
    assert outcome.distribution == "problem"
    assert "source scan: fastmath:__expf" in outcome.detail and "fastmath:__expf" in outcome.flags


def test_lower_precision_truths_are_lazy_and_cached():
    ref = build(MATMUL, GateConfig())
    assert ref._lp_cache == {}
    assert gate_candidate(ref, Fn(torch.matmul)).passed
    assert ref._lp_cache == {}                               # a passing candidate costs nothing
    gate_candidate(ref, Fn(lambda a, b: (a.half() @ b.half()).float()))
    cached = ref.lower_precision_truths(0, "fp16")
    assert set(ref._lp_cache) == {(0, f) for f in gm.LP_TRUTHS}
    assert ref.lower_precision_truths(0, "fp16") is cached


def test_fp16_inputs_with_fp32_output_named_by_the_scan_when_tied(matmul):
    fn = Fn(lambda a, b: a.half().float() @ b.half().float())   # FP16 inputs, FP32 everything else
    plain = gate_candidate(matmul, fn)
    assert "lower_precision:tf32" in plain.flags and "indistinguishable from fp16" in plain.detail
    scanned = gate_candidate(matmul, fn, source="As[i] = __float2half(A[i]);")
    rejected(scanned, Reason.LOWER_PRECISION)
    assert "lower_precision:fp16" in scanned.flags and "fp16:__float2half" in scanned.flags


def test_lower_precision_cache_is_bounded(matmul):
    for index in (1, 2, 3):
        assert matmul.lower_precision_truths(index, "fp16") is not None
    assert {i for i, _ in matmul._lp_cache} <= {0, 3}


def test_tf32_switched_on_at_run_time(matmul):
    def sneaky(a, b):
        torch.backends.cuda.matmul.allow_tf32 = True
        return a @ b
    outcome = gate_candidate(matmul, Fn(sneaky))
    rejected(outcome, Reason.LOWER_PRECISION)
    assert "switched TF32" in outcome.detail
    assert torch.backends.cuda.matmul.allow_tf32 is False   # restored


# --- distributions, accumulation, wrong function -------------------------------------------------

class _LN(nn.Module):
    """A LayerNorm candidate with the reference's parameter names (weights get aligned)."""

    def __init__(self, fn, n=4096):
        super().__init__()
        self.ln = nn.LayerNorm(n)
        self.fn = fn

    def forward(self, x):
        return self.fn(x, self.ln.weight, self.ln.bias)


def test_one_pass_variance_is_unstable_on_offset(layernorm):
    def one_pass(x, w, b):            # E[x^2] - E[x]^2, clamped at 0 as real kernels do
        n = x.shape[-1]
        m = x.sum(-1, keepdim=True) / n
        var = ((x * x).sum(-1, keepdim=True) / n - m * m).clamp_min(0)
        return (x - m) * torch.rsqrt(var + 1e-5) * w + b
    cand = _LN(one_pass)
    assert align_parameters(layernorm.model, cand)
    outcome = gate_candidate(layernorm, cand)
    m = rejected(outcome, Reason.UNSTABLE_DISTRIBUTION)
    assert m.group(1) == "offset" and "passes on problem" in outcome.detail
    assert [c.passed for c in outcome.checks] == [True, False]
    assert "unstable:offset" in outcome.flags


def test_gelu_tanh_for_erf_is_wrong_function():
    # The two GELUs differ by <= ~5e-4 absolute, largest near |x| ~ 2: at the problem's own
    # scale (randn) that is ~3000x PyTorch's norm-wise error but only ~500x its max error, so the
    # worse of the two ratios decides. Far from 0 (large_scale) they coincide and would pass.
    ref = build(GELU, GateConfig())
    outcome = gate_candidate(ref, Fn(lambda x: F.gelu(x, approximate="tanh")))
    m = rejected(outcome, Reason.WRONG_FUNCTION)
    assert float(m.group(3)) > 1000
    assert gate_candidate(ref, Fn(lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))).passed


class _SequentialSoftmax(nn.Module):
    """Softmax whose row sum accumulates each block of 2048 terms sequentially in FP32 with
    round-toward-zero (a rounded-up partial sum is stepped back one ulp with nextafter), then
    adds the 32 block sums: FP32 throughout, but a systematic loss of ~u/4 of the partial sum per
    step, ~2048 u / 4 ~ 3e-5 relative. PyTorch's own FP32 error is 1e-7 to 4e-7 whatever the
    CPU's vector unit, so the ratio lands between ~50 and ~500. (A plain sequential sum, rounded
    to nearest, gave 12.8x on an AMD EPYC and over 16x elsewhere: too close to the factor.)"""

    def forward(self, x):
        e = torch.exp(x - x.max(1, keepdim=True).values)
        blocks = e.reshape(x.shape[0], -1, 2048)
        acc = torch.zeros(blocks.shape[:2])
        for j in range(blocks.shape[2]):
            term = blocks[:, :, j]
            s = acc + term
            rounded_up = (s - acc) > term          # exact: s and acc are within a factor of 2
            acc = torch.where(rounded_up, torch.nextafter(s, torch.zeros_like(s)), s)
        return e / acc.sum(1, keepdim=True)


@pytest.mark.parametrize("mode", ["reject", "accept"])
def test_accumulation_error(mode):
    ref = build(SOFTMAX, GateConfig(distributions=("problem",), accumulation_error=mode))
    outcome = gate_candidate(ref, _SequentialSoftmax())
    c = outcome.checks[0]
    assert 16 < max(c.norm_ratio, c.max_ratio) <= 1000
    if mode == "reject":
        rejected(outcome, Reason.ACCUMULATION_ERROR)
    else:
        assert outcome.passed and "accumulation_error" in outcome.flags, outcome.detail


def test_accept_mode_still_rejects_lower_precision():
    ref = build(MATMUL, GateConfig(accumulation_error="accept"))
    rejected(gate_candidate(ref, Fn(lambda a, b: (a.half() @ b.half()).float())),
             Reason.LOWER_PRECISION)


def test_softmax_without_max_is_non_finite_off_problem():
    small = SOFTMAX.replace("torch.randn(4, 65536)", "torch.randn(8, 1024)")
    ref = build(small, GateConfig(distributions=("problem", "large_scale")))
    outcome = gate_candidate(ref, Fn(lambda x: x.exp() / x.exp().sum(1, keepdim=True)))
    m = rejected(outcome, Reason.NON_FINITE)
    assert m.group(1) == "large_scale" and "passes on problem" in outcome.detail


# --- output form and anti-cheat ------------------------------------------------------------------

class _Sub(torch.Tensor):
    pass


@pytest.mark.parametrize("reason,fn", [
    (Reason.INPUT_MUTATION, lambda a, b: (a @ b, a.zero_())[0]),
    (Reason.LAZY_OUTPUT, lambda a, b: (a @ b).as_subclass(_Sub)),
    (Reason.LAZY_OUTPUT, lambda a, b: (a @ b)[:1].expand(a.shape[0], -1)),
    (Reason.SHAPE_MISMATCH, lambda a, b: (a @ b)[:-1]),
    (Reason.SHAPE_MISMATCH, lambda a, b: (a @ b, a @ b)),
    (Reason.DTYPE_MISMATCH, lambda a, b: a.double() @ b.double()),
    (Reason.NON_FINITE, lambda a, b: (a @ b).index_fill_(0, torch.tensor([3]), math.nan)),
    (Reason.CONSTANT_OUTPUT, lambda a, b: torch.ones(a.shape[0], b.shape[1])),
    (Reason.PARTIAL_OUTPUT, lambda a, b: torch.cat([a[:1] @ b, a.new_zeros(a.shape[0] - 1,
                                                                            b.shape[1])])),
    (Reason.WRONG_FUNCTION, lambda a, b: (a @ b).t().contiguous()),
    (Reason.RUNTIME_ERROR, lambda a, b: a @ a),
])
def test_rejections_name_reason_and_numbers(matmul, reason, fn):
    outcome = gate_candidate(matmul, Fn(fn))
    rejected(outcome, reason)
    assert outcome.distribution == "problem" and outcome.seed == 0
    if reason is Reason.RUNTIME_ERROR:
        assert "RuntimeError" in outcome.detail and "Traceback" in outcome.log
    result = outcome.to_eval_result("abc")
    assert result.verdict is Verdict.REJECT and result.reason is reason
    assert EvalResult.from_dict(result.to_dict()) == result


def test_inputs_given_to_candidates_are_clones(matmul):
    seen = []
    gate_candidate(matmul, Fn(lambda a, b: (seen.append(a), a @ b)[1]))
    cached = [s.inputs[0] for s in matmul.sets]
    assert seen and all(x is not c for x in seen for c in cached)


class _Caching(nn.Module):
    def __init__(self, clone):
        super().__init__()
        self.cache, self.clone = None, clone

    def forward(self, a, b):
        if self.cache is None:
            self.cache = a @ b
        return self.cache.clone() if self.clone else self.cache


def test_cached_output_and_reused_buffer(matmul):
    rejected(gate_candidate(matmul, _Caching(clone=True)), Reason.CACHED_OUTPUT)
    rejected(gate_candidate(matmul, _Caching(clone=False)), Reason.RESULT_REUSE)


class _Drifting(nn.Module):
    """Correct until the gate's re-run, then off by `noise` (a race that shows up sometimes)."""

    def __init__(self, calls_before, noise):
        super().__init__()
        self.calls, self.calls_before, self.noise = 0, calls_before, noise

    def forward(self, a, b):
        self.calls += 1
        out = a @ b
        if self.calls > self.calls_before:
            out = out * (1 + self.noise * torch.randn_like(out))
        return out


def test_nondeterminism_beyond_and_within_rounding(matmul):
    n = len(matmul.sets)
    outcome = gate_candidate(matmul, _Drifting(n, 1e-3))
    rejected(outcome, Reason.NONDETERMINISTIC)
    assert "second run" in outcome.detail
    ok = gate_candidate(matmul, _Drifting(n, 2.0 ** -24))   # rounding-level, like atomics
    assert ok.passed and "nondeterministic_within_rounding" in ok.flags, ok.detail


# --- problems: structure, multiple outputs, skipping, parameters ---------------------------------

def test_triangular_problem_keeps_structure_and_gates():
    ref = build(TRIANGULAR)
    for gs in ref.sets:
        L = gs.inputs[0]
        assert torch.equal(L, torch.tril(L)), gs.distribution
    assert gate_candidate(ref, Fn(lambda L, B: torch.tril(L) @ B)).passed
    rejected(gate_candidate(ref, Fn(lambda L, B: L.t() @ B)), Reason.WRONG_FUNCTION)


def test_tuple_outputs():
    ref = build(TWO_OUTPUTS, GateConfig())
    assert ref.multi_output
    assert gate_candidate(ref, Fn(lambda x: (x.exp(), x.sum(dim=1)))).passed
    rejected(gate_candidate(ref, Fn(lambda x: x.exp())), Reason.SHAPE_MISMATCH)
    outcome = gate_candidate(ref, Fn(lambda x: (x.exp(), x.half().float().sum(dim=1))))
    assert not outcome.passed and outcome.reason is not Reason.OK


def test_non_finite_reference_distribution_is_skipped():
    ref = build(EXP, GateConfig(distributions=("problem", "large_scale", "small_scale")))
    assert ref.distributions == ("problem", "small_scale")
    skipped = dict(ref.skipped)
    assert list(skipped) == ["large_scale seed 0"] and "non-finite" in skipped["large_scale seed 0"]
    with pytest.raises(ProblemError, match="non-finite on every input set"):
        build(EXP, GateConfig(distributions=("large_scale",)))


def test_declared_distributions_narrow_the_config():
    module = exec_module(MATMUL, "test_gate_declared", "<declared>")
    ref = GateReference.build(module, ALL, "cpu", declared=("small_scale", "problem"))
    assert ref.distributions == ("problem", "small_scale")


def test_align_parameters(layernorm):
    cand = _LN(lambda x, w, b: x)
    assert not torch.equal(cand.ln.weight, layernorm.model.ln.weight)
    assert align_parameters(layernorm.model, cand)
    assert torch.equal(cand.ln.weight, layernorm.model.ln.weight)
    other = nn.Linear(3, 3)
    before = other.weight.detach().clone()
    assert not align_parameters(layernorm.model, other)
    assert torch.equal(other.weight, before)
    built = layernorm.new_candidate(lambda n: _LN(lambda x, w, b: x, n))
    assert torch.equal(built.ln.bias, layernorm.model.ln.bias)


def test_fresh_inputs_for_timing(matmul):
    sets = matmul.timing_input_sets(2)
    assert len(sets) == 2 and not torch.equal(sets[0][0], sets[1][0])
    assert not torch.equal(sets[0][0], matmul.sets[0].inputs[0])
    assert torch.equal(matmul.fresh_inputs(1000)[0], sets[0][0])


# --- on the GPU (marked `gpu`: skipped where no CUDA device is visible) --------------------------

GPU_MATMUL = MATMUL.replace("torch.randn(64, 256), torch.randn(256, 64)",
                            "torch.randn(512, 4096), torch.randn(4096, 512)")


@pytest.fixture(scope="module")
def gpu_matmul():
    module = exec_module(GPU_MATMUL, "test_gate_gpu_matmul", "<gpu matmul>")
    return GateReference.build(module, ALL, "cuda")


@pytest.mark.gpu
def test_gpu_honest_passes_and_cublas_tf32_is_lower_precision(gpu_matmul):
    assert gate_candidate(gpu_matmul, Fn(lambda a, b: torch.einsum("ik,kj->ij", a, b))).passed

    def tf32_then_restore(a, b):          # TF32 in cuBLAS, the switch put back before returning
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return a @ b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = False
    outcome = gate_candidate(gpu_matmul, Fn(tf32_then_restore))
    rejected(outcome, Reason.LOWER_PRECISION)
    assert "lower_precision:tf32" in outcome.flags, outcome.detail


@pytest.mark.gpu
def test_gpu_unwritten_output_is_result_reuse(gpu_matmul):
    assert gate_candidate(gpu_matmul, Fn(torch.matmul)).passed   # leaves correct outputs freed
    outcome = gate_candidate(gpu_matmul, Fn(lambda a, b: torch.empty(
        a.shape[0], b.shape[1], device=a.device)))
    rejected(outcome, Reason.RESULT_REUSE)                      # it reads the gate's poison
    half = gate_candidate(gpu_matmul, Fn(lambda a, b: torch.cat([a[:8] @ b, torch.empty(
        a.shape[0] - 8, b.shape[1], device=a.device)])))
    rejected(half, Reason.PARTIAL_OUTPUT)


@pytest.mark.gpu
def test_gpu_fp16_wmma_fixture_is_lower_precision(gpu_matmul):
    path = Path(__file__).resolve().parents[1] / "kernels" / "matmul_fp16.py"
    source = path.read_text()
    fixture = exec_module(source, "test_gate_fixture_matmul_fp16", str(path))   # builds CUDA
    outcome = gate_candidate(gpu_matmul, gpu_matmul.new_candidate(fixture.ModelNew), source)
    rejected(outcome, Reason.LOWER_PRECISION)
    assert "lower_precision:fp16" in outcome.flags and "fp16:__float2half" in outcome.flags
