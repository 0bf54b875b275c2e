"""Run configuration: nested frozen dataclasses, saved as ``config.json`` in every run directory.

The search config uses evokernel's names (population_size, offspring_per_generation, ...); they
are translated to DEAP's ``mu``/``lambda_`` only at the call into DEAP (evokernel.search).
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.errors import ConfigError

#: Input distributions the gate knows (evokernel.distributions).
KNOWN_DISTRIBUTIONS = ("problem", "offset", "large_scale", "small_scale", "heavy_tailed")


def default_cache_dir() -> Path:
    """``$EVOKERNEL_CACHE`` or ``~/.cache/evokernel``: build cache and per-device measurements."""
    return Path(os.environ.get("EVOKERNEL_CACHE", Path.home() / ".cache" / "evokernel"))


@dataclass(frozen=True)
class GateConfig:
    """The precision gate (evokernel.gate).

    tolerance_factor: a candidate's norm-wise and max element-wise errors against the float64
        truth must each be at most this many times PyTorch's own strict-FP32 error on the same
        inputs. TF32 or FP16 compute lands ~250x above it on a 4096-long dot product (measured on
        the H200, DESIGN.md), so 16 leaves a wide margin on both sides; see results/ for the
        measurements of legitimate FP32 variants behind the choice.
    distributions: input distributions to check (evokernel.distributions); a problem may narrow
        them with a module-level ``DISTRIBUTIONS`` tuple.
    seeds: random seeds; every (distribution, seed) pair gets fresh draws.
    accumulation_error: "reject" (default) or "accept" candidates whose only fault is a larger
        FP32 rounding error than PyTorch's (a worse summation order, no lower precision).
    """

    tolerance_factor: float = 16.0
    distributions: tuple[str, ...] = ("problem", "offset")
    seeds: tuple[int, ...] = (0,)
    accumulation_error: str = "reject"

    def __post_init__(self) -> None:
        if not self.tolerance_factor >= 1.0:
            raise ConfigError(f"gate.tolerance_factor must be >= 1, got {self.tolerance_factor}")
        bad = [d for d in self.distributions if d not in KNOWN_DISTRIBUTIONS]
        if bad or not self.distributions:
            raise ConfigError(f"gate.distributions: unknown {bad}; known: {KNOWN_DISTRIBUTIONS}")
        if not self.seeds:
            raise ConfigError("gate.seeds must not be empty")
        if self.accumulation_error not in ("reject", "accept"):
            raise ConfigError("gate.accumulation_error must be 'reject' or 'accept'")


@dataclass(frozen=True)
class TimingConfig:
    """Timing (evokernel.timing): warm-up and repeat are time budgets, as in triton.testing.

    Trials are added in rounds until the 95% confidence interval of the median is within
    ``target_rel_ci`` of the median, or ``max_trials`` is reached.
    """

    warmup_ms: float = 25.0
    min_trials: int = 20
    max_trials: int = 400
    target_rel_ci: float = 0.01
    max_time_s: float = 20.0

    def __post_init__(self) -> None:
        if self.min_trials < 5 or self.max_trials < self.min_trials:
            raise ConfigError("timing: need 5 <= min_trials <= max_trials")


@dataclass(frozen=True)
class EvalConfig:
    """The evaluation engine (evokernel.evaluator)."""

    gate: GateConfig = field(default_factory=GateConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    build_timeout_s: float = 600.0
    eval_timeout_s: float = 300.0
    build_workers: int | None = None          # None: one per two CPU cores
    cache_dir: str | None = None              # None: default_cache_dir()
    baseline: str = "eager"                   # fitness baseline: "eager" or "compile"
    measure_compile: bool = True              # also time torch.compile (reported)

    def __post_init__(self) -> None:
        if self.baseline not in ("eager", "compile"):
            raise ConfigError("evaluation.baseline must be 'eager' or 'compile'")
        if self.baseline == "compile" and not self.measure_compile:
            raise ConfigError("evaluation.baseline='compile' needs measure_compile=True")

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_dir()


@dataclass(frozen=True)
class LLMConfig:
    """LLM access through litellm (evokernel.llm). ``model=None`` means no LLM: the search uses
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


@dataclass(frozen=True)
class SearchConfig:
    """The (mu + lambda) loop (evokernel.search).

    population_size is DEAP's mu, offspring_per_generation its lambda_; crossover_prob and
    mutation_prob are cxpb and mutpb (the rest of the offspring slots are re-evaluations of
    nothing: evokernel never re-times a candidate, so cxpb + mutpb must be 1 here, split as given).
    ideas_per_call (k) and implementations_per_idea (m) shape the idea mutation's branching.
    """

    population_size: int = 4
    offspring_per_generation: int = 8
    generations: int = 3
    crossover_prob: float = 0.2
    seed: int = 0
    ideas_per_call: int = 3
    implementations_per_idea: int = 2
    repair_attempts: int = 1

    def __post_init__(self) -> None:
        if self.population_size < 1 or self.offspring_per_generation < 1 or self.generations < 0:
            raise ConfigError("search: population_size and offspring_per_generation must be >= 1,"
                              " generations >= 0")
        if not 0.0 <= self.crossover_prob <= 1.0:
            raise ConfigError("search.crossover_prob must be in [0, 1]")


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
        except TypeError as e:
            raise ConfigError(f"config.json: {e}") from e


_DATACLASS_FIELDS = {
    (RunConfig, "search"): SearchConfig,
    (RunConfig, "evaluation"): EvalConfig,
    (RunConfig, "llm"): LLMConfig,
    (EvalConfig, "gate"): GateConfig,
    (EvalConfig, "timing"): TimingConfig,
}
