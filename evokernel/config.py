"""Run configuration: nested frozen dataclasses, saved as ``config.json`` in every run directory.

The search config uses evokernel's names (population_size, offspring_per_generation, ...); they
are translated to DEAP's ``mu``/``lambda_`` only at the call into DEAP (evokernel.search.evolution).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from evokernel.errors import ConfigError

#: Input distributions the gate knows (evokernel.gate.distributions).
KNOWN_DISTRIBUTIONS = ("problem", "offset", "large_scale", "small_scale", "heavy_tailed")


def _number(where: str, value: Any, *, integer: bool = False) -> float:
    """``value`` as a finite number, or ConfigError naming ``where`` (bools and strings too)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite {'integer' if integer else 'number'}, got "
                          f"{value!r}")
    return value


def default_cache_dir() -> Path:
    """``$EVOKERNEL_CACHE`` or ``~/.cache/evokernel``: build cache and per-device measurements."""
    return Path(os.environ.get("EVOKERNEL_CACHE", Path.home() / ".cache" / "evokernel"))


@dataclass(frozen=True)
class GateConfig:
    """The precision gate (evokernel.gate.judge) and the anti-cheat checks around it (evokernel.engine.worker).

    tolerance_factor: a candidate's norm-wise and max element-wise errors against the float64
        truth must each be at most this many times PyTorch's own strict-FP32 error on the same
        inputs (with floors for exact outputs, gate_math.ratios). The default 16 is provisional.
        What decides it: ``experiments/gate_report.py`` runs the legitimate FP32 variants in
        ``tests/kernels/legit/`` (other reduction orders, warp-shuffle trees, Welford, split-K,
        fused epilogues, float4 elementwise, atomics) and the lower-precision cheats in
        ``tests/kernels/cheats/`` on every distribution and two seeds, and prints the largest
        legitimate ratio (L) and the smallest lower-precision ratio (P). The factor must sit
        with a margin of at least 2 on both sides, 2L <= factor <= P/2, and is set from those
        measurements once they are committed (gate_report.md/.json under results/). Each
        ratio pair counts by its larger member: a cheat must exceed the factor in one of them.
        Known so far (H200, 2026-11-30): the five seed kernels measured 0.05-1.28, FP16 wmma
        matmul 256 (norm) / 96.8 (max); docs/architecture.md quotes TF32 at K=4096 ~258x; an FP16 hi/lo
        split is expected near 1 on N(0, 1) and ~40-90 on small_scale (CPU emulation), which
        may set P. Do not change 16 without that data.
    distributions: input distributions to check (evokernel.gate.distributions); a problem may narrow
        them with a module-level ``DISTRIBUTIONS`` tuple.
    seeds: random seeds; every (distribution, seed) pair gets fresh draws.
    accumulation_error: "reject" (default) or "accept" candidates whose only fault is a larger
        FP32 rounding error than PyTorch's (a worse summation order, no lower precision).
    reference_fallback: "reject" (default) or "flag". The worker profiles one call of a candidate
        that passed the gate: a candidate that launches the reference's own library kernel for
        the main work (cuBLAS/cuDNN/ATen: evokernel.gate.fallback), directly or through a try/except
        fallback, is rejected as REFERENCE_FALLBACK, and one that launches no kernel of its own
        as NO_KERNEL_LAUNCHED. With "flag" both are accepted and carry a flag instead.
    perturb_constant_parameters: give the reference's constant floating-point parameters (e.g.
        LayerNorm's weight = 1 and bias = 0, KernelBench's default) random values before the
        truths are computed, so a kernel that skips an affine step cannot pass. A candidate
        gets the same values: all of the reference's weights when its state_dict matches by name
        (gate_reference.align_parameters), else each constant goes to the candidate parameter
        of that shape still holding that value (match_constant_parameters: same name, then name
        suffix, then registration order). It is judged against the perturbed reference either
        way: a kernel that assumes weight 1 and bias 0, or has no parameters, fails as
        wrong_function, and the detail says to create the parameters as the reference does.
    """

    tolerance_factor: float = 16.0
    distributions: tuple[str, ...] = ("problem", "offset")
    seeds: tuple[int, ...] = (0,)
    accumulation_error: str = "reject"
    reference_fallback: str = "reject"
    perturb_constant_parameters: bool = True

    def __post_init__(self) -> None:
        if not _number("gate.tolerance_factor", self.tolerance_factor) >= 1.0:
            raise ConfigError(f"gate.tolerance_factor must be >= 1, got {self.tolerance_factor}")
        bad = [d for d in self.distributions if d not in KNOWN_DISTRIBUTIONS]
        if bad or not self.distributions:
            raise ConfigError(f"gate.distributions: unknown {bad}; known: {KNOWN_DISTRIBUTIONS}")
        if not self.seeds:
            raise ConfigError("gate.seeds must not be empty")
        if self.accumulation_error not in ("reject", "accept"):
            raise ConfigError("gate.accumulation_error must be 'reject' or 'accept'")
        if self.reference_fallback not in ("reject", "flag"):
            raise ConfigError("gate.reference_fallback must be 'reject' or 'flag'")


#: TimingConfig.hide_host_ms's cap (ms): the host's own work and copies on other streams can
#: overlap the spin, so it stays short (evokernel.timing.spin).
MAX_HIDE_HOST_MS = 2.0
#: TimingConfig.hide_host_ms's default (ms): covers the host time of the seed kernels' calls and
#: their references, up to 0.06 ms on an H200 (results/h200-2026-11-30-s3), many times over.
DEFAULT_HIDE_HOST_MS = 1.0


@dataclass(frozen=True)
class TimingConfig:
    """Timing (evokernel.timing.interleaved): warm-up and repeat are time budgets, as in triton.testing.

    Trials are added in rounds until the 95% confidence interval of the median is within
    ``target_rel_ci`` of the median, or ``max_trials`` is reached.

    hide_host_ms: when > 0, each trial queues a spin that fills every SM for this many
        milliseconds before its start event, so up to that much host time of the call
        (Python, dispatch, launches) is not counted, as in ``triton.testing.do_bench``
        (evokernel.timing.interleaved, evokernel.timing.spin). Default DEFAULT_HIDE_HOST_MS (1 ms).
        0: the device is idle at the start event, and the host time counts. At most
        MAX_HIDE_HOST_MS: host work and copy-engine copies can also hide behind the spin.
    """

    warmup_ms: float = 25.0
    min_trials: int = 20
    max_trials: int = 400
    target_rel_ci: float = 0.01
    max_time_s: float = 20.0
    hide_host_ms: float = DEFAULT_HIDE_HOST_MS

    def __post_init__(self) -> None:
        for name in ("warmup_ms", "target_rel_ci", "max_time_s", "hide_host_ms"):
            _number(f"timing.{name}", getattr(self, name))
        for name in ("min_trials", "max_trials"):
            _number(f"timing.{name}", getattr(self, name), integer=True)
        if self.min_trials < 5 or self.max_trials < self.min_trials:
            raise ConfigError("timing: need 5 <= min_trials <= max_trials")
        if self.warmup_ms < 0 or self.max_time_s <= 0 or self.target_rel_ci <= 0:
            raise ConfigError(f"timing: need warmup_ms >= 0, max_time_s > 0 and target_rel_ci "
                              f"> 0 (got {self.warmup_ms}, {self.max_time_s}, "
                              f"{self.target_rel_ci})")
        if not 0 <= self.hide_host_ms <= MAX_HIDE_HOST_MS:      # False for NaN too
            raise ConfigError(f"timing.hide_host_ms must be in [0, {MAX_HIDE_HOST_MS:g}] ms, "
                              f"got {self.hide_host_ms}")


@dataclass(frozen=True)
class EvalConfig:
    """The evaluation engine (evokernel.engine.evaluator).

    sandbox: contain the build and GPU workers that run candidate code (evokernel.sandbox):
        another user when evokernel is root, no network, no view of other processes,
        read-only files except their own folder. False turns that off (said at start).
    sandbox_user: the unprivileged account workers run as when evokernel is root: a name or
        a uid, never root. Default "nobody" (uid 65534 where the password file lacks it); a
        dedicated one (``useradd --system --no-create-home evokernel-sandbox``) keeps its
        files apart from other programs'.
    require_sandbox: refuse to start (SandboxError) when a containment step is not possible
        here, instead of saying so once and going on.
    trim_headers: build candidates' ``cuda_sources`` with a light stand-in for ``#include
        <torch/extension.h>`` (2.2-2.4x faster ``.cu`` compiles; a failed light build is
        rebuilt from the source as written; evokernel.build.headers).
    gpu_sharing: what to do when another process uses the GPU (evokernel.engine.gpu_share):
        "wait" (default) waits up to ``gpu_wait_s`` seconds before a candidate and measures a
        contended one again; "mark" only marks what was measured on a shared GPU.
    """

    gate: GateConfig = field(default_factory=GateConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    sandbox: bool = True                      # contain workers (evokernel.sandbox)
    sandbox_user: str = "nobody"              # who they run as when evokernel is root
    require_sandbox: bool = False             # an error when containment is incomplete
    build_timeout_s: float = 600.0
    eval_timeout_s: float = 300.0
    build_workers: int | None = None          # None: three per four CPU cores
    trim_headers: bool = True                 # light stand-in for <torch/extension.h>
    cache_dir: str | None = None              # None: default_cache_dir()
    baseline: str = "eager"                   # fitness baseline: "eager" or "compile"
    measure_compile: bool = True              # also time torch.compile (reported)
    gpu_sharing: str = "wait"                 # another process on the GPU: "wait" or "mark"
    gpu_wait_s: float = 120.0                 # the longest wait for it to leave, per wait

    def __post_init__(self) -> None:
        for name, tp in (("gate", GateConfig), ("timing", TimingConfig)):
            if not isinstance(getattr(self, name), tp):
                raise ConfigError(f"evaluation.{name} must be a {tp.__name__}, got "
                                  f"{getattr(self, name)!r}")
        user = self.sandbox_user
        if isinstance(user, int) and not isinstance(user, bool):    # a uid from config.json
            user = str(user)
            object.__setattr__(self, "sandbox_user", user)
        if not isinstance(user, str) or not user.strip() or user.strip() in ("root", "0"):
            raise ConfigError(f"evaluation.sandbox_user must name an unprivileged user (a name "
                              f"or a uid, not root), got {user!r}")
        if self.require_sandbox and not self.sandbox:
            raise ConfigError("evaluation.require_sandbox=True needs sandbox=True")
        if self.baseline not in ("eager", "compile"):
            raise ConfigError("evaluation.baseline must be 'eager' or 'compile'")
        if self.baseline == "compile" and not self.measure_compile:
            raise ConfigError("evaluation.baseline='compile' needs measure_compile=True")
        if self.gpu_sharing not in ("wait", "mark"):
            raise ConfigError(f"evaluation.gpu_sharing must be 'wait' or 'mark', got "
                              f"{self.gpu_sharing!r}")
        if not _number("evaluation.gpu_wait_s", self.gpu_wait_s) >= 0:
            raise ConfigError(f"evaluation.gpu_wait_s must be >= 0, got {self.gpu_wait_s}")
        for name in ("build_timeout_s", "eval_timeout_s"):
            if not _number(f"evaluation.{name}", getattr(self, name)) > 0:
                raise ConfigError(f"evaluation.{name} must be > 0 seconds, got "
                                  f"{getattr(self, name)}")

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()


@dataclass(frozen=True)
class LLMConfig:
    """LLM access through litellm (evokernel.llm.client). ``model=None`` means no LLM: the search uses
    the LLM-free operators only. API keys come from the provider's usual environment variables
    (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...), never from this config, so they are not saved."""

    model: str | None = None
    api_base: str | None = None
    temperature: float = 0.8
    max_tokens: int | None = None
    max_concurrency: int = 8
    timeout_s: float = 600.0
    max_retries: int = 4
    max_total_tokens: int | None = None       # budget stop, checked between generations
    max_cost_usd: float | None = None
    # Optional weighted ensemble: ((model, weight), ...). Each call picks one model with an RNG
    # seeded by the request, so a replay picks the same one. With an ensemble and model=None,
    # model is set to the heaviest member (so "an LLM is configured" stays `model is not None`).
    models: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        models = tuple((str(m), float(w)) for m, w in self.models)  # JSON lists -> tuples
        if any(not m or not w > 0 for m, w in models):
            raise ConfigError(f"llm.models: need (model, weight > 0) pairs, got {self.models}")
        object.__setattr__(self, "models", models)
        if models and self.model is None:
            object.__setattr__(self, "model", max(models, key=lambda mw: mw[1])[0])
        if self.max_concurrency < 1 or self.max_retries < 0 or not self.timeout_s > 0:
            raise ConfigError("llm: need max_concurrency >= 1, max_retries >= 0, timeout_s > 0")
        for name in ("max_tokens", "max_total_tokens", "max_cost_usd"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"llm.{name} must be a positive number (or unset), got "
                                  f"{value!r}")


#: SearchConfig.candidate_form's values: the forms of evokernel.build.forms, or either.
CANDIDATE_FORMS = ("load_inline", "nvrtc", "any")
#: SearchConfig.strategy's values: four ways to spend an LLM budget (evokernel.search.strategies;
#: experiments/ablation_branching.py compares them). "evokernel" is the default search.
STRATEGIES = ("best_of_n", "sequential", "branching", "evokernel")


@dataclass(frozen=True)
class SearchConfig:
    """The (mu + lambda) loop (evokernel.search.evolution).

    population_size is DEAP's mu and offspring_per_generation its lambda_ (operator calls per
    generation, each of which may return several children); crossover_prob is cxpb, and every
    other call is a mutation (mutpb = 1 - cxpb: DEAP's remaining "reproduction" share would
    re-time a kernel, which evokernel never does).
    ideas_per_call (k) and implementations_per_idea (m) shape the idea mutation's branching.
    repair_attempts: how many times a rejected child's lineage goes back to the repair operator
        within its generation (a failed fix is repaired again, up to this many rounds).

    Islands (optional; ``islands=1`` is one population): with ``islands`` > 1 the search keeps
    that many populations, each of ``population_size`` individuals and ``offspring_per_generation``
    operator calls per generation (so a generation makes ``islands`` times as many calls, all
    issued at once). Every ``migration_interval`` generations the ``migrants`` best correct
    kernels of each island replace the worst of the next island in a ring (DEAP's migRing:
    island i sends to island i+1, the last to the first).

    candidate_form: the candidate form the run prefers (evokernel.build.forms): "load_inline"
    (a PyTorch extension), "nvrtc" (NVRTC-compiled source, evokernel.nvrtc: builds in about a
    second instead of about 30 s) or "any". The prompts teach both forms and state this one;
    the run starts from the problem's seed kernel of this form (``seeds/nvrtc/<name>.py``;
    "any" and a problem without one: ``seeds/<name>.py``).

    strategy: how the search spends its LLM calls, one of STRATEGIES (evokernel.search.strategies):
    "evokernel" (default: every operator, crossover, survival by archive cell), or a baseline:
    "best_of_n" (independent samples of the seed kernel), "sequential" (refinement of one kernel)
    or "branching" (Stanford CRFM's k ideas x m implementations of each kept kernel). A baseline
    makes its children with the idea mutation alone and fixes part of the shape above
    (``evokernel.search.strategies.preset`` makes its config; ``Evolution`` refuses one whose
    shape does not match).
    """

    population_size: int = 4
    offspring_per_generation: int = 8
    generations: int = 3
    crossover_prob: float = 0.2
    seed: int = 0
    ideas_per_call: int = 3
    implementations_per_idea: int = 2
    repair_attempts: int = 1
    islands: int = 1
    migration_interval: int = 2
    migrants: int = 1
    candidate_form: str = "load_inline"
    strategy: str = "evokernel"

    def __post_init__(self) -> None:
        if self.population_size < 1 or self.offspring_per_generation < 1 or self.generations < 0:
            raise ConfigError("search: population_size and offspring_per_generation must be >= 1,"
                              " generations >= 0")
        if not 0.0 <= self.crossover_prob <= 1.0:
            raise ConfigError("search.crossover_prob must be in [0, 1]")
        if self.ideas_per_call < 1 or self.implementations_per_idea < 1:
            raise ConfigError("search: ideas_per_call and implementations_per_idea must be >= 1")
        if self.repair_attempts < 0:
            raise ConfigError("search.repair_attempts must be >= 0")
        if self.islands < 1 or self.migration_interval < 1:
            raise ConfigError(f"search: islands and migration_interval must be >= 1 (got "
                              f"islands={self.islands}, "
                              f"migration_interval={self.migration_interval})")
        if not 0 <= self.migrants <= self.population_size:
            raise ConfigError(f"search.migrants must be in [0, population_size="
                              f"{self.population_size}], got {self.migrants}")
        if self.candidate_form not in CANDIDATE_FORMS:
            raise ConfigError(f"search.candidate_form must be one of "
                              f"{', '.join(CANDIDATE_FORMS)}, got {self.candidate_form!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"search.strategy must be one of {', '.join(STRATEGIES)}, got "
                              f"{self.strategy!r}")


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs besides its operators; saved as ``config.json``."""

    problem: str = "softmax"
    run_dir: str | None = None
    search: SearchConfig = field(default_factory=SearchConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        def build(tp: Any, data: dict[str, Any]) -> Any:
            if not isinstance(data, dict):
                raise ConfigError(f"config.json: {tp.__name__} must be an object, got {data!r}")
            unknown = sorted(set(data) - {f.name for f in dataclasses.fields(tp)})
            if unknown:                     # a typo, or a setting this version no longer has
                logger.warning("config.json: {} ignores unknown keys {}", tp.__name__, unknown)
            kwargs = {}
            for f in dataclasses.fields(tp):
                if f.name not in data:
                    continue
                v = data[f.name]
                sub = _DATACLASS_FIELDS.get((tp, f.name))
                if sub is not None:
                    v = build(sub, v)
                elif isinstance(v, list):
                    v = tuple(v)
                kwargs[f.name] = v
            return tp(**kwargs)
        try:
            return build(cls, d)
        except ConfigError as e:
            if str(e).startswith("config.json"):
                raise
            raise ConfigError(f"config.json: {e}") from e
        except TypeError as e:
            raise ConfigError(f"config.json: {e}") from e


_DATACLASS_FIELDS = {
    (RunConfig, "search"): SearchConfig,
    (RunConfig, "evaluation"): EvalConfig,
    (RunConfig, "llm"): LLMConfig,
    (EvalConfig, "gate"): GateConfig,
    (EvalConfig, "timing"): TimingConfig,
}
