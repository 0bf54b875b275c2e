"""The reference side of the precision gate: everything computed once per problem, before any
candidate is judged (docs/architecture.md, "The evaluation, as stages").

GateReference builds the reference ``Model`` in strict FP32 and, per (distribution, seed), a
GateSet: the drawn inputs, their float64 truth and PyTorch's own strict-FP32 error; it also
computes lower-precision (rounded-input) truths on demand. align_parameters and
perturb_constant_parameters set up the reference's and a candidate's weights. Judging a
candidate against all this is evokernel.gate.judge's job; the maths lives in evokernel.gate.maths.
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from loguru import logger

from evokernel.gate import maths as gm
from evokernel.config import GateConfig
from evokernel.gate.distributions import draw_inputs
from evokernel.errors import ProblemError
from evokernel.gate.run import strict_fp32

#: Relative spread of the values given to constant parameters (perturb_constant_parameters).
PERTURB_SPREAD = 0.1
_PERTURB_SEED = 20261130


def align_parameters(model: torch.nn.Module, model_new: torch.nn.Module) -> bool:
    """Load ``model``'s state_dict into ``model_new`` when their keys and shapes match, so both
    use identical weights. Otherwise leave ``model_new`` as built (both were constructed under
    ``torch.manual_seed(0)``, see GateReference.new_candidate). Returns whether it loaded."""
    sd, sd_new = model.state_dict(), model_new.state_dict()
    lazy = (torch.nn.parameter.UninitializedParameter, torch.nn.parameter.UninitializedBuffer)
    if not sd or sd.keys() != sd_new.keys() or any(isinstance(t, lazy) for t in sd_new.values()) \
            or any(sd[k].shape != sd_new[k].shape for k in sd):
        logger.debug("align_parameters: state_dicts differ; ModelNew keeps its own weights")
        return False
    model_new.load_state_dict(sd)
    return True


def constant_parameters(model: torch.nn.Module) -> dict[str, float]:
    """The floating-point parameters of ``model`` with more than one element, all equal:
    {name: that value}, in ``named_parameters`` order (what perturb_constant_parameters
    changes)."""
    found = {}
    for name, p in model.named_parameters():
        if not p.is_floating_point() or p.numel() < 2:
            continue
        flat = p.detach().reshape(-1)
        if bool((flat == flat[0]).all()):
            found[name] = float(flat[0])
    return found


def match_constant_parameters(model: torch.nn.Module, model_new: torch.nn.Module,
                              constants: Mapping[str, float]) -> tuple[dict[str, str], list[str]]:
    """Pair each parameter of ``model`` named in ``constants`` (name -> the constant all its
    elements held before perturb_constant_parameters) with a parameter of ``model_new`` of the
    same shape, floating point, all of whose elements still hold that constant. Each candidate
    parameter is used once. Among several that fit, in this order: the same name; a name that
    ends with the other (``model.batch_norm.weight`` and ``batch_norm.weight``); then the order
    of registration (the first unpaired with the first unpaired). Uninitialized (lazy)
    parameters never fit. Other parameters are not looked at: they keep whatever ModelNew built.
    Returns: ({reference name: candidate name}, [reference names left unpaired])."""
    ps = dict(model.named_parameters())
    new = {k: t for k, t in model_new.named_parameters()
           if not isinstance(t, torch.nn.parameter.UninitializedParameter)}

    def fits(k: str, t: torch.Tensor) -> bool:
        return (t.is_floating_point() and t.shape == ps[k].shape
                and bool((t.detach() == constants[k]).all()))

    def suffix(a: str, b: str) -> bool:
        return a == b or a.endswith("." + b) or b.endswith("." + a)

    pairs: dict[str, str] = {}
    used: set[str] = set()
    for rule in (lambda a, b: a == b, suffix, lambda a, b: True):
        for k in constants:
            if k in pairs or k not in ps:
                continue
            hit = next((n for n, t in new.items() if n not in used and rule(k, n) and fits(k, t)),
                       None)
            if hit is not None:
                pairs[k] = hit
                used.add(hit)
    return pairs, [k for k in constants if k not in pairs]


def perturb_constant_parameters(model: torch.nn.Module, spread: float = PERTURB_SPREAD,
                                seed: int = _PERTURB_SEED) -> tuple[str, ...]:
    """Give every floating-point parameter of ``model`` whose elements are all equal (and that
    has more than one) random values around that constant, in place: ``c + spread * s * z``
    with z ~ N(0, 1) from a generator seeded with ``seed`` and the parameter's name (so every
    worker draws the same values), s = |c|, or 1 when c = 0. LayerNorm's weight = 1 and
    bias = 0 become 1 + 0.1 z and 0.1 z, so a kernel that skips the affine step is wrong.
    Buffers (BatchNorm running statistics, masks) are left alone.
    Returns: the names of the parameters changed, in order.
    """
    changed = []
    constants = constant_parameters(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name not in constants:
                continue
            c = constants[name]
            g = torch.Generator().manual_seed(seed + sum(name.encode()))
            z = torch.randn(tuple(p.shape), generator=g, dtype=torch.float64)
            p.copy_((c + spread * (abs(c) if c else 1.0) * z).to(p.dtype))
            changed.append(name)
    return tuple(changed)


@dataclass(frozen=True)
class GateSet:
    """One (distribution, seed) input set with its float64 truth, computed once per problem.

    ``inputs`` live on the device and are never handed to a candidate (it gets clones).
    ``truths`` are float64, one per output; ``stats`` their TruthStats; ``reference_errors`` is
    PyTorch's strict-FP32 (norm-wise, max) error per output; ``dtypes`` the reference's output
    dtypes; ``representable`` the share of the reference's first output exactly representable in
    fp16/bf16 (gate_math.representable_fraction); ``fingerprints`` the truths' (gate_math)."""

    distribution: str
    seed: int
    inputs: tuple[Any, ...]
    truths: tuple[torch.Tensor, ...]
    stats: tuple[gm.TruthStats, ...]
    reference_errors: tuple[tuple[float, float], ...]
    dtypes: tuple[torch.dtype, ...]
    representable: dict[str, float]
    fingerprints: tuple[tuple[float, float, float], ...]


def gate_distributions(config: GateConfig, declared: tuple[str, ...] | None = None,
                       warn: bool = False) -> list[str]:
    """The distributions a problem's gate sets are drawn from, in order: the config's, narrowed
    to the problem's ``declared`` ones (all of ``declared``, or "problem", when none is left;
    logged when ``warn``), "problem" first."""
    names = [d for d in config.distributions if declared is None or d in declared]
    if not names:
        if warn:
            logger.warning("no configured distribution is declared by the problem; using {}",
                           declared)
        names = list(declared or ("problem",))
    names.sort(key=lambda d: d != "problem")
    return names


def make_model(module: Any) -> tuple[list, torch.nn.Module]:
    """A problem's reference as a set-up makes it, on the CPU: ``get_init_inputs()`` and
    ``Model(*init_inputs)``, each after ``torch.manual_seed(0)``. Returns (init_inputs, model).
    Raises: what the problem's code raises."""
    torch.manual_seed(0)
    init_inputs = list(module.get_init_inputs())
    torch.manual_seed(0)
    return init_inputs, module.Model(*init_inputs)


class GateReference:
    """Everything about one problem the gate needs, built once per worker: the reference model,
    its init inputs, and the cached input sets with truths. Not thread-safe."""

    def __init__(self, module: Any, config: GateConfig, device: torch.device,
                 model: torch.nn.Module, init_inputs: list, sets: tuple[GateSet, ...],
                 skipped: tuple[tuple[str, str], ...], multi_output: bool,
                 device_out: torch.device, declared: tuple[str, ...] | None = None,
                 perturbed: tuple[str, ...] = (), constants: Mapping[str, float] | None = None):
        self.module, self.config, self.device = module, config, device
        self.model, self.init_inputs = model, init_inputs
        self.sets, self.skipped = sets, skipped
        self.multi_output, self.output_device = multi_output, device_out
        self.declared, self.perturbed = declared, perturbed
        #: The perturbed parameters' original constant values (match_constant_parameters).
        self.constants = dict(constants or {})
        #: How input sets are drawn (``build``'s ``draw``).
        self.draw: Callable[[Any, str, int], list] = draw_inputs
        self._lp_cache: dict[tuple[int, str], tuple[torch.Tensor, ...] | None] = {}
        self._notes: weakref.WeakKeyDictionary[torch.nn.Module, str] = \
            weakref.WeakKeyDictionary()

    @classmethod
    def build(cls, module: Any, config: GateConfig, device: str | torch.device,
              declared: tuple[str, ...] | None = None,
              draw: Callable[[Any, str, int], list] = draw_inputs,
              make: Callable[[Any], tuple[list, torch.nn.Module]] = make_model
              ) -> "GateReference":
        """Construct ``Model(*get_init_inputs())`` under ``torch.manual_seed(0)`` on ``device``
        and, for each distribution (config's, narrowed to ``declared`` when given, "problem"
        first) and each seed, draw inputs, the float64 truth and PyTorch's own strict-FP32 error.
        With ``config.perturb_constant_parameters`` the model's constant parameters get random
        values first (perturb_constant_parameters; their names in ``.perturbed``).

        ``draw`` draws one input set (draw_inputs' signature and values) and ``make`` makes
        (init inputs, the model on the CPU) as ``make_model`` does: a worker passes ones that
        hand out what it made before its set-up (evokernel.engine.predraw); ``draw`` is kept
        as ``.draw`` for ``fresh_inputs``.
        A set on which the truth or PyTorch's FP32 output is non-finite is skipped and recorded
        in ``.skipped`` as ("<distribution> seed <seed>", why) pairs (``dict()``-able).
        Memory, per set: the inputs plus a float64 truth (2x an FP32 output), on ``device``.
        Raises: ProblemError when the model's output is not a tensor (or tuple of tensors), or
        when every set is skipped.
        """
        device, names = torch.device(device), gate_distributions(config, declared, warn=True)
        init_inputs, model = make(module)
        model = model.to(device)
        constants = constant_parameters(model) if config.perturb_constant_parameters else {}
        perturbed = (perturb_constant_parameters(model) if config.perturb_constant_parameters
                     else ())
        if perturbed:
            logger.info("gate: constant parameters given random values: {}", perturbed)
        model64 = copy.deepcopy(model).double()
        sets, skipped, multi, out_device = [], [], False, device
        for name in names:
            for seed in config.seeds:
                inputs = tuple(_to_device(draw(module, name, seed), device))
                with strict_fp32(), torch.no_grad():
                    raw = model(*inputs)
                    ref_out = _as_outputs(raw, module)
                    truths = _as_outputs(_run_fp64(model64, inputs), module)
                why = gm.nonfinite_reason(ref_out, truths)
                if why:
                    skipped.append((f"{name} seed {seed}", why))
                    logger.info("gate: skipping {} seed {}: {}", name, seed, why)
                    continue
                multi, out_device = not isinstance(raw, torch.Tensor), ref_out[0].device
                stats = tuple(gm.truth_stats(t) for t in truths)
                errs = tuple(gm.error_stats(o, t, t_norm=s.norm)
                             for o, t, s in zip(ref_out, truths, stats))
                rep = ({f: gm.representable_fraction(ref_out[0], f) for f in ("fp16", "bf16")}
                       if ref_out[0].dtype == torch.float32 else {})
                sets.append(GateSet(name, seed, inputs, tuple(t.detach() for t in truths),
                                    stats, errs, tuple(o.dtype for o in ref_out), rep,
                                    tuple(gm.fingerprint(t) for t in truths)))
                del ref_out
        if not sets:
            raise ProblemError(f"{getattr(module, '__file__', module)}: the reference is "
                               f"non-finite on every input set ({dict(skipped)})")
        ref = cls(module, config, device, model, init_inputs, tuple(sets), tuple(skipped),
                  multi, out_device, declared, perturbed, {k: constants[k] for k in perturbed})
        ref.draw = draw
        return ref

    @property
    def distributions(self) -> tuple[str, ...]:
        """The distributions actually checked, in order (skipped sets excluded)."""
        return tuple(dict.fromkeys(s.distribution for s in self.sets))

    def fresh_inputs(self, seed: int) -> list:
        """A new input set from the problem's own distribution with ``seed``, on the device: for
        timing, which rotates sets so cached outputs cannot help (use seeds the gate does not)."""
        return _to_device(self.draw(self.module, "problem", seed), self.device)

    def timing_input_sets(self, n: int, first_seed: int = 1000) -> list[list]:
        """``n`` fresh input sets (fresh_inputs with seeds first_seed, first_seed + 1, ...)."""
        return [self.fresh_inputs(first_seed + i) for i in range(n)]

    def new_candidate(self, model_new_cls: Callable[..., torch.nn.Module]) -> torch.nn.Module:
        """``ModelNew(*init_inputs)`` under ``torch.manual_seed(0)`` on the device, with the
        reference's weights loaded when the state_dicts match (align_parameters)."""
        torch.manual_seed(0)
        model_new = model_new_cls(*self.init_inputs).to(self.device)
        align_parameters(self.model, model_new)
        return model_new

    def prepare_candidate(self, model_new_cls: Callable[..., torch.nn.Module]
                          ) -> tuple[torch.nn.Module, "GateReference"]:
        """``ModelNew(*init_inputs)`` under ``torch.manual_seed(0)`` on the device, with the
        reference's weights, perturbed ones included, loaded into it when its state_dict
        matches by name (align_parameters); otherwise each perturbed constant parameter goes to
        the candidate parameter that match_constant_parameters pairs it with, and the rest of
        ModelNew keeps what it built. It is judged against this (perturbed) reference either
        way: a kernel that assumes the initial values (LayerNorm's weight 1 and bias 0, or no
        parameters at all) is wrong, and ``parameter_note`` names the constants nothing
        received, for the rejection's detail.
        Returns: (the model, this reference).
        Raises: whatever ModelNew(...) raises."""
        torch.manual_seed(0)
        model_new = model_new_cls(*self.init_inputs).to(self.device)
        if align_parameters(self.model, model_new) or not self.perturbed:
            return model_new, self
        pairs, unpaired = match_constant_parameters(self.model, model_new, self.constants)
        ref_ps, new_ps = dict(self.model.named_parameters()), dict(model_new.named_parameters())
        with torch.no_grad():
            for k, n in pairs.items():
                new_ps[n].copy_(ref_ps[k])
        if pairs:
            logger.info("gate: ModelNew's parameters have other names; the perturbed constants "
                        "went to {}", pairs)
        if unpaired:
            self._notes[model_new] = (
                "the gate gave the reference's constant parameters random values, and ModelNew "
                "has no parameter to receive "
                + ", ".join(f"{k} {tuple(ref_ps[k].shape)} (initially {self.constants[k]:g})"
                            for k in unpaired)
                + " (one of that shape still holding that value), so it computes with values "
                  "of its own; a kernel must read its parameters, not assume their initial "
                  "values. Create them as the reference does (same names and shapes)")
            logger.info("gate: no ModelNew parameter receives {}; judged against the perturbed "
                        "reference all the same", unpaired)
        return model_new, self

    def parameter_note(self, model_new: torch.nn.Module) -> str:
        """Why ``model_new`` (from prepare_candidate) kept its own parameters; "" when it got
        the reference's or nothing was perturbed."""
        return self._notes.get(model_new, "")

    def lower_precision_truths(self, index: int, fmt: str) -> tuple[torch.Tensor, ...] | None:
        """Float64 truth of set ``index`` with every FP32 input, parameter and buffer first
        rounded to ``fmt`` (a gate_math.LP_TRUTHS name). Computed on first use and cached: one
        float64 output per (set, name), for set 0 and at most one other set (older ones are
        dropped), so at most 8 float64 outputs. None when the model cannot run on the rounded
        values.
        """
        key = (index, fmt)
        if key not in self._lp_cache:
            held = {i for i, _ in self._lp_cache} - {0, index}
            for old in [k for k in self._lp_cache if k[0] in held]:
                del self._lp_cache[old]
            gs = self.sets[index]
            try:
                rounded = copy.deepcopy(self.model)
                with torch.no_grad():
                    for t in [*rounded.parameters(), *rounded.buffers()]:
                        if t.dtype == torch.float32:
                            t.copy_(gm.round_to_format(t, fmt))
                    inputs = gm.map_tensors(gs.inputs, lambda x: gm.round_to_format(x, fmt)
                                          if x.dtype == torch.float32 else x)
                    self._lp_cache[key] = _as_outputs(_run_fp64(rounded.double(), inputs),
                                                      self.module)
            except Exception as e:  # a model that rejects the values: no such truth
                logger.warning("gate: no {} truth for {} seed {}: {}", fmt, gs.distribution,
                               gs.seed, e)
                self._lp_cache[key] = None
        return self._lp_cache[key]


def _as_outputs(raw: Any, module: Any) -> tuple[torch.Tensor, ...]:
    outs = (raw,) if isinstance(raw, torch.Tensor) else tuple(raw) if isinstance(
        raw, (tuple, list)) else None
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise ProblemError(f"{getattr(module, '__file__', module)}: Model.forward must return a "
                           f"tensor or a tuple of tensors, got {gm.describe(raw)}")
    return outs


def _to_device(inputs: list, device: torch.device) -> list:
    return gm.map_tensors(list(inputs), lambda t: t.to(device))


def _run_fp64(model64: torch.nn.Module, inputs: tuple[Any, ...]) -> Any:
    """``model64`` (already .double()) on the inputs upcast to float64; on the CPU when the
    device has no float64 kernel for an op (the truth is moved back to the device)."""
    with torch.no_grad():
        try:
            return model64(*gm.map_tensors(inputs, gm.upcast))
        except (RuntimeError, NotImplementedError) as e:
            device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), None)
            if device is None or device.type == "cpu":
                raise
            logger.warning("float64 truth on {} failed ({}); computing it on the CPU", device, e)
            cpu = copy.deepcopy(model64).cpu()
            out = cpu(*gm.map_tensors(inputs, lambda t: gm.upcast(t).cpu()))
            return gm.map_tensors(out, lambda t: t.to(device))
