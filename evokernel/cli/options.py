"""What the CLI's commands share: the flags that map onto the config dataclasses, the configs
built from them, the GPU check and the logging set-up.

Every flag's default is read from the config dataclass it sets (evokernel.config), so the
command line and the Python API cannot drift apart; ``with_default`` writes that value into the
flag's help once. The flag names follow the config's field names (``--tolerance-factor`` sets
``GateConfig.tolerance_factor``); ``--tolerance`` is kept as an alias of it.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from loguru import logger

from evokernel.config import (CANDIDATE_FORMS, KNOWN_DISTRIBUTIONS, STRATEGIES, EvalConfig,
                              GateConfig, LLMConfig, RunConfig, SearchConfig)
from evokernel.engine import factory
from evokernel.errors import ConfigError

GATE, SEARCH, EVAL, RUN = GateConfig(), SearchConfig(), EvalConfig(), RunConfig()

NO_GPU_HELP = (
    "evokernel: this command needs a CUDA GPU, and PyTorch sees none here.\n"
    "  Needed: an NVIDIA GPU with a working driver, a CUDA build of PyTorch, and nvcc\n"
    "  (CUDA_HOME) to build kernels. The project is tuned on an H200 (sm_90).\n"
    "  What works without a GPU: `make test` (the CPU test suite), `evokernel check\n"
    "  --build-only` (a kernel file's faults, and its compile), `evokernel problems --run`\n"
    "  (load and run problem files' set-up on the CPU), `evokernel show`, `report` and\n"
    "  `export` on a copied run, and `evokernel suite --from-checks DIR`.")


def with_default(text: str, value: Any) -> str:
    """``text`` followed by the flag's default, written once: "... (default: 16.0)"."""
    return f"{text} (default: {value})"


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    """The precision gate's and the baseline's flags (EvalConfig, GateConfig)."""
    p.add_argument("--tolerance-factor", "--tolerance", dest="tolerance_factor", type=float,
                   default=GATE.tolerance_factor, metavar="F",
                   help=with_default("gate.tolerance_factor: a candidate's norm-wise and max "
                                     "element-wise errors may each be at most F times "
                                     "PyTorch's own FP32 error", GATE.tolerance_factor))
    p.add_argument("--distributions", default=",".join(GATE.distributions),
                   help=with_default("input distributions to gate on, comma-separated, from "
                                     + ",".join(KNOWN_DISTRIBUTIONS),
                                     ",".join(GATE.distributions)))
    p.add_argument("--gate-seeds", type=int, default=len(GATE.seeds),
                   help=with_default("random seeds per distribution", len(GATE.seeds)))
    p.add_argument("--no-compile-baseline", action="store_true",
                   help="skip timing torch.compile (saves its compile time)")
    p.add_argument("--vs-compile", action="store_true",
                   help="fitness = speedup over torch.compile instead of eager")
    p.add_argument("--require-sandbox", action="store_true",
                   help="refuse to run candidate code unless it is fully contained (another "
                        "user, no network, read-only files; README, Security)")
    p.add_argument("--eval-timeout", type=float, metavar="S",
                   help=with_default("seconds one candidate's evaluation (gate and timing) "
                                     "may take before its worker is killed and the candidate "
                                     "fails with `timeout`, at least 1",
                                     EVAL.eval_timeout_s))
    add_placement_arguments(p)


def add_placement_arguments(p: argparse.ArgumentParser) -> None:
    """Where candidates are evaluated: ``--gpus``, ``--dask``, ``--dask-scheduler``. Not part
    of the saved config (a resumed run may use other GPUs or another cluster)."""
    p.add_argument("--gpus", type=int, metavar="N",
                   help="use this host's first N GPUs, one worker each (default: all)")
    p.add_argument("--dask", action="store_true",
                   help="evaluate on a Dask cluster started on this host: one GPU worker per "
                        "GPU, one build worker (needs the 'dask' extra)")
    p.add_argument("--dask-scheduler", metavar="ADDRESS",
                   help="evaluate on the Dask cluster whose scheduler is at ADDRESS "
                        "(tcp://host:8786); its workers advertise GPU=1 or build=N "
                        "(README, Many GPUs and hosts)")


def placement(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of evokernel.engine.factory.make_evaluator for the placement
    flags: ``devices`` and ``dask``. Raises: ConfigError for --gpus < 1 or --gpus with
    --dask-scheduler (a remote cluster's workers pick their GPUs)."""
    gpus, address = getattr(args, "gpus", None), getattr(args, "dask_scheduler", None)
    out: dict[str, Any] = {}
    if gpus is not None:
        if gpus < 1:
            raise ConfigError(f"--gpus must be >= 1, got {gpus}")
        if address:
            raise ConfigError("--gpus is for this host's GPUs; with --dask-scheduler each "
                              "GPU worker is started on its own GPU")
        out["devices"] = list(range(gpus))
    if address:
        out["dask"] = address
    elif getattr(args, "dask", False):
        out["dask"] = True
    return out


def add_search_arguments(p: argparse.ArgumentParser, *, branching: bool = True) -> None:
    """The search's flags (SearchConfig); ``branching``: also the idea operator's k and m and
    the islands' flags."""
    p.add_argument("--population", type=int, default=SEARCH.population_size,
                   help=with_default("population size (DEAP's mu)", SEARCH.population_size))
    p.add_argument("--offspring", type=int, default=SEARCH.offspring_per_generation,
                   help=with_default("operator calls per generation (DEAP's lambda)",
                                     SEARCH.offspring_per_generation))
    p.add_argument("--generations", type=int, default=SEARCH.generations,
                   help=with_default("generations to run", SEARCH.generations))
    p.add_argument("--seed", type=int, default=SEARCH.seed,
                   help=with_default("the search's RNG seed", SEARCH.seed))
    p.add_argument("--candidate-form", choices=CANDIDATE_FORMS, default=SEARCH.candidate_form,
                   help=with_default("the kernel form the prompts ask for and the seed kernel "
                                     "starts in: load_inline (a PyTorch extension, ~30 s "
                                     "builds), nvrtc (evokernel.nvrtc, ~1 s builds) or any",
                                     SEARCH.candidate_form))
    if not branching:
        return
    p.add_argument("--strategy", choices=STRATEGIES, default=SEARCH.strategy,
                   help=with_default(
                       "how the LLM budget is spent (evokernel.search.strategies; "
                       "experiments/ablation_branching.py compares them): evokernel, every flag "
                       "as given; best_of_n, --offspring samples of the seed kernel per "
                       "generation, the seed the only parent (fixes --population 1, --ideas 1, "
                       "--implementations 1); sequential, one idea and one implementation of "
                       "the best kernel so far per generation (fixes --population 1, --offspring "
                       "1, --ideas 1, --implementations 1); branching (Stanford CRFM), --ideas "
                       "ideas x --implementations implementations for each of the --population "
                       "best kernels (fixes --offspring to --population). The three baselines: "
                       "idea mutation only, no crossover, --islands 1; --generations, --seed, "
                       "--repair-attempts and --candidate-form as given", SEARCH.strategy))
    p.add_argument("--ideas", type=int, default=SEARCH.ideas_per_call,
                   help=with_default("ideas per idea call (k)", SEARCH.ideas_per_call))
    p.add_argument("--implementations", type=int, default=SEARCH.implementations_per_idea,
                   help=with_default("implementations written per idea (m)",
                                     SEARCH.implementations_per_idea))
    p.add_argument("--repair-attempts", type=int, default=SEARCH.repair_attempts,
                   help=with_default("rounds a rejected child goes back to the repair operator "
                                     "within its generation (0: none; in the batch mode each "
                                     "round is one more export, after the GPU's verdicts)",
                                     SEARCH.repair_attempts))
    p.add_argument("--islands", type=int, default=SEARCH.islands,
                   help=with_default("populations evolving apart, with ring migration",
                                     SEARCH.islands))
    p.add_argument("--migration-interval", type=int, default=SEARCH.migration_interval,
                   help=with_default("generations between migrations",
                                     SEARCH.migration_interval))
    p.add_argument("--migrants", type=int, default=SEARCH.migrants,
                   help=with_default("best kernels each island sends to the next",
                                     SEARCH.migrants))


def add_llm_arguments(p: argparse.ArgumentParser, *, budget: str = "") -> None:
    """The LLM's flags (LLMConfig): model, endpoint and the budget (``budget`` says whose)."""
    p.add_argument("--model", help="litellm model, provider/name (e.g. openai/gpt-5, "
                   "anthropic/claude-sonnet-4-5, ollama/qwen2.5-coder); none: LLM-free")
    p.add_argument("--api-base", help="endpoint for local vLLM / Ollama / proxies")
    p.add_argument("--max-tokens", type=int,
                   help=f"stop when{budget} LLM tokens exceed this (none: no limit)")
    p.add_argument("--max-cost-usd", type=float,
                   help=f"stop when{budget} LLM cost exceeds this many US dollars "
                        "(none: no limit)")


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """EvalConfig from the flags of ``add_eval_arguments``. Raises: ConfigError naming a bad
    flag or setting."""
    if args.gate_seeds < 1:
        raise ConfigError(f"--gate-seeds must be >= 1, got {args.gate_seeds}")
    gate = GateConfig(tolerance_factor=args.tolerance_factor,
                      distributions=tuple(args.distributions.split(",")),
                      seeds=tuple(range(args.gate_seeds)))
    timeout = eval_timeout(args)
    return EvalConfig(gate=gate, measure_compile=not args.no_compile_baseline,
                      baseline="compile" if args.vs_compile else "eager",
                      require_sandbox=getattr(args, "require_sandbox", False),
                      **({} if timeout is None else {"eval_timeout_s": timeout}))


def eval_timeout(args: argparse.Namespace) -> float | None:
    """``--eval-timeout`` (seconds), None when not given. Raises: ConfigError unless it is a
    finite number >= 1 (the timeout verdict counts whole seconds)."""
    value = getattr(args, "eval_timeout", None)
    if value is not None and not (1 <= value < float("inf")):
        raise ConfigError(f"--eval-timeout must be a finite number of seconds >= 1, got {value}")
    return value


def search_config(args: argparse.Namespace) -> SearchConfig:
    """SearchConfig from the flags of ``add_search_arguments``; settings a command has no flag
    for keep SearchConfig's defaults. With ``--strategy``, the strategy's preset of them
    (evokernel.search.strategies.preset: it fixes part of the shape); where the strategy keeps
    one island (the baselines), ``--migrants`` is capped at the population, as nothing migrates
    (overridden_flags reports it as not used). Raises: ConfigError naming a bad setting."""
    optional = {key: getattr(args, flag) for key, flag in (
        ("islands", "islands"), ("migration_interval", "migration_interval"),
        ("migrants", "migrants"), ("ideas_per_call", "ideas"),
        ("implementations_per_idea", "implementations"),
        ("candidate_form", "candidate_form"), ("repair_attempts", "repair_attempts"))
        if hasattr(args, flag)}
    shape = dict(population_size=args.population, generations=args.generations,
                 offspring_per_generation=args.offspring, seed=args.seed, **optional)
    if not hasattr(args, "strategy"):
        return SearchConfig(**shape)
    from evokernel.search.strategies import fixed, preset
    fixes = fixed(args.strategy, SearchConfig())
    if "population_size" in fixes:        # best_of_n, sequential: --population is not used
        shape["population_size"] = fixes["population_size"]
    if fixes.get("islands") == 1 and "migrants" in shape:   # one island: nothing migrates
        shape["migrants"] = min(shape["migrants"], shape["population_size"])
    return preset(args.strategy, SearchConfig(**shape))


#: The flag that sets each SearchConfig field a strategy can fix (evokernel.search.strategies).
STRATEGY_FLAGS = {"population_size": "population", "offspring_per_generation": "offspring",
                  "ideas_per_call": "ideas", "implementations_per_idea": "implementations",
                  "islands": "islands", "migrants": "migrants"}


def overridden_flags(args: argparse.Namespace) -> list[str]:
    """The search flags given on the command line (given_options; where that is unknown, those
    with a value other than their default) that ``args.strategy`` replaces with another value
    (evokernel.search.strategies.FIXED), as "--population 4"; [] without --strategy.
    Raises: ConfigError naming a bad setting."""
    if not hasattr(args, "strategy"):
        return []
    from evokernel.search.strategies import fixed
    search = search_config(args)
    given = given_options(args)
    fixes = dict(fixed(args.strategy, search))
    if fixes.get("islands") == 1:         # one island: --migrants is capped, unused (search_config)
        fixes["migrants"] = search.migrants
    return [f"--{flag} {getattr(args, flag)}" for name, flag in STRATEGY_FLAGS.items()
            if name in fixes and hasattr(args, flag)
            and getattr(args, flag) != getattr(search, name)
            and (flag in given if given is not None
                 else getattr(args, flag) != getattr(SEARCH, name))]


_NOT_GIVEN = object()


def given_options(args: argparse.Namespace) -> set[str] | None:
    """The destinations (``args`` attribute names) of the options given on the command line,
    also those given with their default value; None when ``args`` does not carry its command's
    own tokens (``args.cli_argv``, set by evokernel.cli.main and `advance`) or its parser
    (``args.parser``). Positional arguments are not counted (argparse fills an absent optional
    positional with its default)."""
    argv, parser = getattr(args, "cli_argv", None), getattr(args, "parser", None)
    if argv is None or parser is None:
        return None
    # argparse sets a default only where the namespace has no such attribute yet: a namespace
    # filled with a marker keeps it for every option not on the command line.
    probe, empty = (argparse.Namespace(**{k: _NOT_GIVEN for k in vars(args)}) for _ in "ab")
    try:
        parser.parse_args(argv, namespace=probe)
        parser.parse_args([], namespace=empty)      # what an empty command line fills in
    except SystemExit:               # tokens that parsed once parse again; be safe anyway
        return None
    return {k for k, v in vars(probe).items()
            if v is not _NOT_GIVEN and getattr(empty, k) is _NOT_GIVEN}


def llm_config(args: argparse.Namespace) -> LLMConfig:
    """LLMConfig from the flags of ``add_llm_arguments``. Raises: ConfigError."""
    return LLMConfig(model=args.model, api_base=args.api_base,
                     max_total_tokens=args.max_tokens, max_cost_usd=args.max_cost_usd)


def require_gpu(args: argparse.Namespace | None = None) -> None:
    """Raises: NoGPUError (with NO_GPU_HELP) when PyTorch sees no CUDA GPU, unless ``args``
    name a Dask scheduler (whose workers hold the GPUs)."""
    if args is not None and getattr(args, "dask_scheduler", None):
        return
    factory.require_gpu(NO_GPU_HELP)


def configure_logging(verbose: bool, sink: Any = None) -> None:
    """Log to stderr (or ``sink``, e.g. a live display's) at INFO, or DEBUG when verbose."""
    logger.remove()
    logger.add(sink or sys.stderr, level="DEBUG" if verbose else "INFO",
               colorize=None if sink is None else True,
               format="<green>{time:HH:mm:ss}</green> <level>{level: <7}</level> {message}")
