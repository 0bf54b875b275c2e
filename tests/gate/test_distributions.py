"""Input distributions: generator substitution keeps get_inputs()'s structure (CPU)."""
import math

import pytest
import torch

from evokernel.config import KNOWN_DISTRIBUTIONS
from evokernel.gate.distributions import draw_inputs, substituted_generators
from evokernel.problem import exec_module

GENERATORS = '''
import torch
from torch import randn as aliased_randn

def get_inputs():
    idx = torch.randint(0, 10, (1000,))          # drawn first: unaffected by later draws
    a = torch.randn(200, 200)
    b = torch.rand(40000)
    c = torch.randn_like(b)
    d = torch.rand_like(b)
    e = torch.normal(5.0, 2.0, size=(40000,))
    f = torch.empty(40000).normal_()
    g = torch.empty(40000).uniform_(-1.0, 1.0)
    h = aliased_randn(40000)
    w = torch.empty(40000, requires_grad=True)
    torch.nn.init.uniform_(w, 0.0, 1.0)           # nn.init goes through Tensor.uniform_
    return [idx, a, b, c, d, e, f, g, h, w]

def get_init_inputs():
    return []
'''

STRUCTURED = '''
import torch

N = 48

def get_inputs():
    a = torch.randn(N, N)
    lower = torch.tril(a)                                    # triangular
    sym = (a + a.T) / 2                                      # symmetric
    spd = a @ a.T + N * torch.eye(N) * a.abs().max() ** 2    # positive definite at any scale
    pos = torch.rand(N) + 0.5                                # positive
    labels = torch.randint(0, 7, (N,))                       # index range
    return [lower, sym, spd, pos, labels]

def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def gen_module():
    return exec_module(GENERATORS, "test_dist_generators", "<generators>")


@pytest.fixture(scope="module")
def structured():
    return exec_module(STRUCTURED, "test_dist_structured", "<structured>")


def _std(x):
    return float(x.double().std())


def test_problem_distribution_is_plain_get_inputs(gen_module):
    torch.manual_seed(3)
    plain = gen_module.get_inputs()
    drawn = draw_inputs(gen_module, "problem", 3)
    assert all(torch.equal(p, d) for p, d in zip(plain, drawn))


def test_same_seed_same_draws_and_different_seed_differs(gen_module):
    for name in KNOWN_DISTRIBUTIONS:
        a, b = draw_inputs(gen_module, name, 1), draw_inputs(gen_module, name, 1)
        assert all(torch.equal(x, y) for x, y in zip(a, b)), name
        c = draw_inputs(gen_module, name, 2)
        assert not torch.equal(a[1], c[1]), name


def test_offset_formulas(gen_module):
    idx, a, b, c, d, e, f, g, h, w = draw_inputs(gen_module, "offset", 0)
    for normal in (a, c, f, h):          # 1000 + 0.1 z
        assert abs(float(normal.double().mean()) - 1000) < 0.01
        assert abs(_std(normal) - 0.1) < 0.005
    for uniform in (b, d):               # 1000 + 0.1 u, u in [0, 1)
        assert float(uniform.min()) >= 1000 and float(uniform.max()) <= 1000.1 + 1e-3
    # torch.normal(5, 2) = 5 + 2 * (1000 + 0.1 z); uniform_(-1, 1) = -1 + 2 * (1000 + 0.1 u)
    assert abs(float(e.double().mean()) - 2005) < 0.05 and abs(_std(e) - 0.2) < 0.01
    assert float(g.min()) >= 1999 - 1e-3 and float(g.max()) <= 1999.2 + 1e-3
    assert float(w.detach().min()) >= 1000 and w.requires_grad


@pytest.mark.parametrize("name,scale", [("large_scale", 1e3), ("small_scale", 1e-3)])
def test_scale_formulas(gen_module, name, scale):
    base = draw_inputs(gen_module, "problem", 0)
    scaled = draw_inputs(gen_module, name, 0)
    # Up to torch.normal the RNG stream is the same, so each substituted draw is exactly
    # scale * the standard draw (up to the float32 rounding of the product).
    for i in (1, 2, 3, 4):
        assert torch.allclose(scaled[i].double(), scale * base[i].double(), rtol=1e-6, atol=0)
    assert torch.equal(scaled[0], base[0])                  # randint untouched
    # torch.normal(5, 2) = 5 + 2 * scale * z; later draws (another stream position): statistics.
    assert abs(float(scaled[5].double().mean()) - 5) < 0.05 * 2 * scale + 1e-3
    assert abs(_std(scaled[5]) - 2 * scale) < 0.05 * 2 * scale
    for i in (6, 8):                                        # normal_() and the module's alias
        assert abs(_std(scaled[i]) - scale) < 0.05 * scale
    assert abs(_std(scaled[7]) - 2 * scale / math.sqrt(12)) < 0.05 * scale  # uniform_(-1, 1)


def test_heavy_tailed_is_student_t3(gen_module):
    idx, a, b, c, d, e, f, g, h, w = draw_inputs(gen_module, "heavy_tailed", 0)
    z = a.double().reshape(-1)
    assert abs(float(z.median())) < 0.05
    # Student t3: variance 3, P(|t| > 5) = 0.0154 (vs 6e-7 for a normal), heavy max.
    tail = float((z.abs() > 5).double().mean())
    assert 0.01 < tail < 0.022
    assert float(z.abs().max()) > 30
    assert float(b.min()) >= 0 and float(d.min()) >= 0      # uniform -> |t3|
    assert float((b > 5).double().mean()) > 0.01


def test_generators_restored_even_on_exception():
    orig = (torch.randn, torch.rand, torch.randn_like, torch.rand_like, torch.normal)
    had = {n: n in torch.Tensor.__dict__ for n in ("normal_", "uniform_")}
    bad = exec_module("import torch\ndef get_inputs():\n    torch.randn(3)\n"
                      "    raise RuntimeError('boom')\ndef get_init_inputs():\n    return []\n",
                      "test_dist_bad", "<bad>")
    with pytest.raises(RuntimeError, match="boom"):
        draw_inputs(bad, "offset", 0)
    assert (torch.randn, torch.rand, torch.randn_like, torch.rand_like, torch.normal) == orig
    assert {n: n in torch.Tensor.__dict__ for n in had} == had
    aliasing = exec_module("import torch\nfrom torch import randn as r\n"
                           "def get_inputs():\n    return [r(1000)]\n", "test_dist_alias", "<a>")
    assert _std(draw_inputs(aliasing, "large_scale", 0)[0]) > 100    # the alias was substituted
    assert aliasing.r is orig[0]                                      # and restored
    with substituted_generators("large_scale"):
        assert torch.randn is not orig[0]
    assert torch.randn is orig[0]
    x = torch.empty(1000).normal_()
    assert _std(x) < 2                                     # no scale left behind


def test_unknown_distribution_raises(gen_module):
    with pytest.raises(ValueError, match="unknown distribution"):
        draw_inputs(gen_module, "gaussian", 0)
    with pytest.raises(ValueError, match="get_inputs"):
        draw_inputs(object(), "problem", 0)


@pytest.mark.parametrize("name", KNOWN_DISTRIBUTIONS)
def test_structure_survives_every_distribution(structured, name):
    lower, sym, spd, pos, labels = draw_inputs(structured, name, 0)
    assert torch.equal(lower, torch.tril(lower)) and bool((lower.diagonal() != 0).all())
    assert torch.equal(sym, sym.T)
    torch.linalg.cholesky(spd.double())                    # raises unless positive definite
    assert bool((pos > 0).all())
    assert labels.dtype == torch.int64 and 0 <= int(labels.min()) and int(labels.max()) < 7
    if name == "offset":
        assert abs(float(lower.diagonal().double().mean()) - 1000) < 0.1
    if name == "small_scale":
        assert float(lower.abs().max()) < 0.01
    assert math.isfinite(float(spd.abs().max()))
