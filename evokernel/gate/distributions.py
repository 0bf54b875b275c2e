"""Input distributions for the precision gate, drawn by substituting torch's random generators.

A problem's ``get_inputs()`` often post-processes its random draws (a triangular or symmetric
matrix, a positive-definite one, a positive scale, index ranges). Transforming the tensors it
returns would break that structure, so instead the *generators* are substituted while
``get_inputs()`` runs, and its own post-processing is applied to the substituted draws.

Substituted (for the duration of one ``get_inputs()`` call, restored afterwards even when it
raises): ``torch.randn``, ``torch.rand``, ``torch.randn_like``, ``torch.rand_like``,
``torch.normal``, ``torch.Tensor.normal_``, ``torch.Tensor.uniform_``, and any module-level alias
of these in the problem's own namespace (``from torch import randn``). Integer generators
(``torch.randint``, ``torch.randperm``, ...) are left alone: they carry index structure.

Every distribution maps a *standard normal* draw ``z`` ~ N(0, 1) and a *standard uniform* draw
``u`` ~ U[0, 1) to a substitute ``g``:

==============  =========================  =============================
name            normal draw -> g           uniform draw -> g
==============  =========================  =============================
problem         z (no substitution)        u (no substitution)
offset          1000 + 0.1 z               1000 + 0.1 u
large_scale     1e3 z                      1e3 u
small_scale     1e-3 z                     1e-3 u
heavy_tailed    t3                         |t3|
==============  =========================  =============================

``t3`` is Student's t with 3 degrees of freedom, ``z0 / sqrt((z1^2 + z2^2 + z3^2) / 3)`` from four
independent standard normals: finite variance (3) but polynomial tails (P(|t3| > 10) ~ 2e-3, so a
4096x4096 draw holds values in the hundreds). The uniform substitute is ``|t3|`` so that problems
that rely on ``rand`` being non-negative (scales, probabilities before normalising) stay
non-negative.

Generator arguments are honoured through the substitute: ``torch.normal(mean, std)`` returns
``mean + std * g`` and ``x.uniform_(a, b)`` writes ``a + (b - a) * g``; shape, dtype, device,
``generator=``, ``out=`` and ``requires_grad=`` behave as in torch. The offset (mean 1000, spread
0.1) exposes one-pass variance and other cancellation (docs/architecture.md, "Measurements the design relies on"); the
constants are the ones the project's founding notes name. In FP16/BF16 inputs the offset spread is below the
format's spacing at 1000; that is a property of the format, not of this module.

Not thread-safe: torch's module attributes are patched process-wide while a draw runs (the GPU
worker that calls this is single-threaded). Only torch's generators are seeded and substituted;
a problem drawing from numpy or ``random`` gets neither.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from loguru import logger

from evokernel.config import KNOWN_DISTRIBUTIONS

#: Affine substitutes, g = shift + scale * d: name -> ((shift, scale) for normal d = z,
#: (shift, scale) for uniform d = u).
_AFFINE: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "offset": ((1000.0, 0.1), (1000.0, 0.1)),
    "large_scale": ((0.0, 1e3), (0.0, 1e3)),
    "small_scale": ((0.0, 1e-3), (0.0, 1e-3)),
}

_PATCHED_TORCH = ("randn", "rand", "randn_like", "rand_like", "normal")
_PATCHED_TENSOR = ("normal_", "uniform_")


def draw_inputs(module: Any, distribution: str, seed: int) -> list:
    """Run ``module.get_inputs()`` under ``torch.manual_seed(seed)`` with the named distribution.

    Args:
        module: a loaded problem module (defines ``get_inputs()``).
        distribution: one of ``evokernel.config.KNOWN_DISTRIBUTIONS`` (see the module docstring
            for each formula).
        seed: the seed given to ``torch.manual_seed`` (all devices) before the call.
    Returns: the inputs as a list, where ``get_inputs()`` put them (usually the CPU).
    Raises:
        ValueError: unknown distribution name, or the module has no ``get_inputs``.
    """
    if distribution not in KNOWN_DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; known: {KNOWN_DISTRIBUTIONS}")
    get_inputs = getattr(module, "get_inputs", None)
    if not callable(get_inputs):
        raise ValueError(f"{getattr(module, '__name__', module)!r} has no get_inputs()")
    torch.manual_seed(seed)
    if distribution == "problem":
        return list(get_inputs())
    with substituted_generators(distribution, namespace=getattr(module, "__dict__", None)):
        return list(get_inputs())


@contextmanager
def substituted_generators(distribution: str, namespace: dict | None = None) -> Iterator[None]:
    """Context manager: torch's float random generators draw from ``distribution``.

    ``namespace`` (a module's ``__dict__``) also has its aliases of the patched functions
    substituted. Everything is restored on exit, including when the body raises.
    Raises: ValueError for an unknown name; "problem" substitutes nothing.
    """
    if distribution not in KNOWN_DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; known: {KNOWN_DISTRIBUTIONS}")
    if distribution == "problem":
        yield
        return
    orig = {name: getattr(torch, name) for name in _PATCHED_TORCH}
    orig_tensor = {name: getattr(torch.Tensor, name) for name in _PATCHED_TENSOR}
    own_tensor = {name: name in torch.Tensor.__dict__ for name in _PATCHED_TENSOR}
    normal_g, uniform_g = _substitutes(distribution, orig["randn"])
    repl = _replacements(orig, orig_tensor, normal_g, uniform_g)
    aliases: dict[str, Any] = {}
    if namespace is not None:
        by_id = {id(f): name for name, f in orig.items()}
        aliases = {k: v for k, v in namespace.items() if id(v) in by_id}
    try:
        for name in _PATCHED_TORCH:
            setattr(torch, name, repl[name])
        for name in _PATCHED_TENSOR:
            setattr(torch.Tensor, name, repl[name])
        for k, v in aliases.items():
            namespace[k] = repl[_name_of(orig, v)]
        yield
    finally:
        for name, f in orig.items():
            setattr(torch, name, f)
        for name, f in orig_tensor.items():
            if own_tensor[name]:
                setattr(torch.Tensor, name, f)
            else:  # inherited from torch._C.TensorBase: remove our override
                delattr(torch.Tensor, name)
        for k, v in aliases.items():
            namespace[k] = v
        logger.trace("generators restored after drawing {}", distribution)


def _name_of(orig: dict[str, Any], f: Any) -> str:
    return next(name for name, g in orig.items() if g is f)


# A substitute fills a standard draw tensor in place: (tensor holding z or u, generator) -> None.
Substitute = Callable[[torch.Tensor, Any], None]


def _substitutes(distribution: str, randn: Callable) -> tuple[Substitute, Substitute]:
    """(normal substitute, uniform substitute) for ``distribution``; each maps a tensor holding
    standard draws to the distribution's draws, in place, without autograd."""
    if distribution in _AFFINE:
        (n_shift, n_scale), (u_shift, u_scale) = _AFFINE[distribution]

        def affine(shift: float, scale: float) -> Substitute:
            def fill(x: torch.Tensor, generator: Any) -> None:
                with torch.no_grad():
                    x.mul_(scale).add_(shift)
            return fill
        return affine(n_shift, n_scale), affine(u_shift, u_scale)
    if distribution == "heavy_tailed":
        def student_t3(x: torch.Tensor, generator: Any, absolute: bool) -> None:
            real = x.real.dtype if x.is_complex() else x.dtype
            with torch.no_grad():
                z = randn((3, *x.shape), dtype=real, device=x.device, generator=generator)
                chi = z.square().sum(0).div_(3.0).sqrt_()   # sqrt(chi2_3 / 3)
                fresh = randn(tuple(x.shape), dtype=x.dtype, device=x.device,
                              generator=generator)
                x.copy_(fresh.div_(chi))
                if absolute:
                    x.abs_()
        return (lambda x, g: student_t3(x, g, False)), (lambda x, g: student_t3(x, g, True))
    raise ValueError(f"no substitute for distribution {distribution!r}")


def _replacements(orig: dict[str, Any], orig_tensor: dict[str, Any], normal_g: Substitute,
                  uniform_g: Substitute) -> dict[str, Callable]:
    """The patched generators. Each calls the original for shape/dtype/device/RNG handling and
    then substitutes the standard draw in place."""

    def draw(fn: Callable, sub: Substitute) -> Callable:
        def patched(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = fn(*args, **kwargs)
            sub(out, kwargs.get("generator"))
            return out
        patched.__name__ = getattr(fn, "__name__", "patched")
        return patched

    def normal(*args: Any, **kwargs: Any) -> torch.Tensor:
        # torch.normal(mean, std[, size], *, generator, out, dtype, ...) = mean + std * g.
        names = ("mean", "std", "size")
        bound = dict(zip(names, args))
        mean = bound.get("mean", kwargs.get("mean", 0.0))
        std = bound.get("std", kwargs.get("std", 1.0))
        gen = kwargs.get("generator")
        shaped = orig["normal"](*args, **kwargs)      # the right shape/dtype/device (and `out`)
        g = torch.empty_like(shaped, requires_grad=False)
        orig_tensor["normal_"](g, 0.0, 1.0, generator=gen)
        normal_g(g, gen)
        out = kwargs.get("out")
        if out is not None:
            with torch.no_grad():
                out.copy_(mean + std * g)
            return out
        result = (mean + std * g).to(shaped.dtype)
        if kwargs.get("requires_grad"):
            result.requires_grad_(True)
        return result

    def normal_(self: torch.Tensor, mean: float = 0.0, std: float = 1.0, *,
                generator: Any = None) -> torch.Tensor:
        orig_tensor["normal_"](self, 0.0, 1.0, generator=generator)
        normal_g(self, generator)
        with torch.no_grad():
            self.mul_(std).add_(mean)
        return self

    def uniform_(self: torch.Tensor, from_: float = 0.0, to: float = 1.0, *,
                 generator: Any = None, **kw: Any) -> torch.Tensor:
        lo, hi = kw.pop("from", from_), to
        if kw:
            raise TypeError(f"uniform_() got unexpected keyword arguments {sorted(kw)}")
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"uniform_ expects finite bounds, got [{lo}, {hi})")
        orig_tensor["uniform_"](self, 0.0, 1.0, generator=generator)
        uniform_g(self, generator)
        with torch.no_grad():
            self.mul_(hi - lo).add_(lo)
        return self

    return {"randn": draw(orig["randn"], normal_g), "rand": draw(orig["rand"], uniform_g),
            "randn_like": draw(orig["randn_like"], normal_g),
            "rand_like": draw(orig["rand_like"], uniform_g),
            "normal": normal, "normal_": normal_, "uniform_": uniform_}
