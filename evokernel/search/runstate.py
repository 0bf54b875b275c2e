"""What a search gives back, and what it keeps to resume: the per-generation summary, the run's
result, the RNG state and island populations saved with each generation, the clean-up of a
run that failed before its first verdict, the run's LLM client set up against its store, and a
round of calls in the batch LLM mode."""
from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from deap import tools
from loguru import logger

from evokernel.config import RunConfig
from evokernel.errors import ConfigError, EvaluationDeferred, LLMError, LLMPending
from evokernel.records import Candidate, EvalResult, Reason
from evokernel.runs.store import RunStore
from evokernel.search.toolbox import new_logbook


#: Rejections worth one LLM repair attempt (not hangs, crashes or cheats).
REPAIRABLE = frozenset({
    Reason.BUILD_ERROR, Reason.LOAD_ERROR, Reason.RUNTIME_ERROR, Reason.SHAPE_MISMATCH,
    Reason.DTYPE_MISMATCH, Reason.NON_FINITE, Reason.LOWER_PRECISION,
    Reason.ACCUMULATION_ERROR, Reason.UNSTABLE_DISTRIBUTION, Reason.WRONG_FUNCTION,
    Reason.OUT_OF_MEMORY, Reason.CUDA_FAULT, Reason.NONDETERMINISTIC})


@dataclass(frozen=True)
class GenerationStats:
    """What one generation produced. ``best_speedup`` is the best in the population so far.
    ``population`` holds every island's survivors (each id once); ``islands`` each island's."""

    generation: int
    best_id: str | None
    best_speedup: float
    valid: int
    total: int
    population: tuple[str, ...]
    tokens: int = 0
    cost_usd: float = 0.0
    islands: tuple[tuple[str, ...], ...] = ()


@dataclass
class RunResult:
    """A finished (or stopped) search. ``stopped``: "completed", "budget" (the LLM budget is
    spent), "llm_batch" (batch LLM mode: requests written out, resume after importing the
    replies) or "needs_gpu" (batch LLM mode without a GPU: a round is ready to be evaluated,
    resume on the GPU). ``logbook``: the DEAP Logbook, one record per completed generation."""

    run_dir: Path
    generations: list[GenerationStats]
    hall_of_fame: list[tuple[Candidate, EvalResult]]
    stopped: str = "completed"
    best_path: Path | None = None
    logbook: tools.Logbook = field(default_factory=new_logbook)

    @property
    def best(self) -> tuple[Candidate, EvalResult] | None:
        return self.hall_of_fame[0] if self.hall_of_fame else None



def rng_state(state: Any) -> tuple[Any, ...]:
    """random.Random state from its JSON form (lists back to tuples)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def discard_if_empty(store: RunStore, run_dir: Path, created: bool) -> None:
    """Remove a run directory this run created when it failed before any candidate had a
    verdict (no GPU, a problem that cannot be set up), so that the same command can be retried;
    a run with results is kept for --resume."""
    if not created or store.read_only:
        return
    try:
        empty = not store.results()
    except Exception:
        return
    if empty:
        store.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        logger.info("{}: removed (the run failed before evaluating anything)", run_dir)


def saved_state(state: Any, population: list[str]) -> tuple[tuple[Any, ...], list[list[str]]]:
    """The RNG state and the islands' populations (ids) saved with a generation: a plain RNG
    state with one population, or ``{"rng": state, "islands": [[id, ...], ...]}``."""
    if isinstance(state, dict):
        return rng_state(state["rng"]), [list(ids) for ids in state["islands"]]
    return rng_state(state), [list(population)]


def raise_if_every_llm_call_failed(llm: Any, before: dict[str, Any], gen: int) -> None:
    """Stop the run when every LLM call of this generation failed (a wrong key, a dead
    endpoint): going on would quietly turn an LLM search into a tune-only one.

    Raises: LLMError naming the last error; the store keeps everything for --resume.
    """
    if llm is None:
        return
    after = llm.usage
    answered = (after.get("calls", 0) + after.get("cache_hits", 0)
                - before.get("calls", 0) - before.get("cache_hits", 0))
    failed = after.get("errors", 0) - before.get("errors", 0)
    if failed and not answered:
        raise LLMError(f"generation {gen}: all {failed} LLM calls failed; last error: "
                       f"{getattr(llm, 'last_error', None) or 'unknown'}. Fix the model "
                       "or key, then continue with `evokernel run --resume RUN_DIR`")


def check_credentials(cfg: RunConfig) -> None:
    """Fail before any folder is made when the configured model's provider key is missing.

    Raises: ConfigError naming the model and the environment variables litellm reads.
    """
    from evokernel.llm.client import LLMClient
    missing = LLMClient(cfg.llm).missing_credentials()
    if missing:
        raise ConfigError(f"{cfg.llm.model}: set {', '.join(missing)} (litellm reads the "
                          "provider's key from the environment), or pass --api-base for a "
                          "local server")


def check_resumable(store: RunStore, run_dir: Path, *, batch: bool) -> None:
    """Refuse to resume a run whose batch-mode requests still wait for replies without the
    batch mode: resumed live, they would be sent again (or fail without a key) and the
    generation saved without their children, so their replies could never count.

    Raises: ConfigError naming the run folder, how many requests wait, and what to do.
    """
    waiting = store.llm_requests("pending")
    if waiting and not batch:
        raise ConfigError(f"{run_dir}: {len(waiting)} LLM request(s) written out by the batch "
                          "mode still wait for replies (`evokernel llm pending "
                          f"{run_dir}`); import them with `evokernel llm import`, then resume "
                          "with the same --llm-batch DIR")


def check_llm_run(cfg: RunConfig, resumed: RunStore | None, run_dir: Path, batch: Any) -> None:
    """The checks of a run whose LLM client evokernel makes: a resumed one must be resumable
    (check_resumable), and one that sends requests (no batch mode, or ``--llm-batch-submit``)
    needs credentials (check_credentials). Raises: ConfigError."""
    if resumed is not None:
        check_resumable(resumed, run_dir, batch=batch is not None)
    if batch is None or batch.submit:              # the batch export sends nothing
        check_credentials(cfg)


def connect_llm(llm: Any, cfg: RunConfig, store: RunStore, run_dir: Path) -> Any:
    """The run's LLM client: ``llm`` when one was passed in (its calls then recorded in
    ``store`` unless it records them elsewhere), else a new LLMClient for ``cfg.llm.model``
    with the run's reply cache (``run_dir/llm_cache.sqlite``) and the spend so far, else None
    (no model configured)."""
    if llm is None and cfg.llm.model is not None:
        from evokernel.llm.client import LLMClient
        return LLMClient(cfg.llm, cache_path=run_dir / "llm_cache.sqlite",
                         on_usage=store.record_llm_call, spent=store.llm_usage())
    if llm is not None and getattr(llm, "on_usage", False) is None:
        llm.on_usage = store.record_llm_call
    return llm


def generation_begun(gen: int, candidates: Iterable[Any], store: Any) -> bool:
    """Whether generation ``gen`` was paid for, so a resume finishes it even past the budget,
    as a live run finishes a generation it began: its candidates (``.generation``) exist, or,
    in the batch mode, its requests were written out (``store.llm_requests()``; called only
    once the budget is spent, since it reads every request)."""
    return (any(c.generation == gen for c in candidates)
            or any(r["generation"] == gen for r in store.llm_requests()))


def batch_round(calls: Callable[[], Any], gen: int, rng: random.Random, batch: Any,
                store: RunStore, llm: Any) -> Any:
    """``calls()`` (a round of operator calls, then its evaluation) with the batch LLM mode's
    requests handled (``batch``: an evokernel.llm.batch_mode.BatchMode, or None).

    Without the batch mode, or with every reply in the cache: its result. Pending and submitted
    (``--llm-batch-submit``): the round is made again from the cache, with the run's RNG as it
    was, so that it plans the same calls. Pending and written out: "llm_batch", before anything
    of the round was evaluated; its RNG state is not saved, so --resume plans the same calls
    again and finds the replies in the reply cache once `evokernel llm import` has filled it.
    Every reply in the cache but no GPU to evaluate the round (evokernel.engine.deferred):
    "needs_gpu", likewise before anything of the round was evaluated.
    """
    state = rng.getstate()
    while True:
        try:
            return calls()
        except EvaluationDeferred as e:
            logger.warning("generation {}: {}; the run stops here (resume it on a machine with "
                           "the GPU)", gen, e)
            return "needs_gpu"
        except LLMPending as e:
            if batch is None:              # a client of its own wrote the requests out
                logger.warning("generation {}: {}; the run stops here", gen, e)
                return "llm_batch"
            try:
                again = batch.flush(store, gen, llm)
            except LLMPending as written:
                logger.warning("{}; the run stops here (resume it after the batch replies are "
                               "imported)", written)      # the message names the generation
                return "llm_batch"
            if not again:
                logger.warning("generation {}: {} and nothing was written out", gen, e)
                return "llm_batch"
            rng.setstate(state)


def prompt_device(meta: Mapping[str, Any] | None, info: Mapping[str, Any]) -> dict[str, Any]:
    """The device sheet (evokernel.engine.device_sheet) the run's prompts show.

    Args:
        meta: a resumed run's RunStore.meta() (None: a new run); its ``device`` is the sheet
            recorded when the run started.
        info: this evaluator's sheet.
    Returns: the recorded sheet when it names the same GPU as ``info``, so that a resumed run
        asks the same questions (the sheet holds measured bandwidth and FLOP/s, which move a
        little between measurements, and a prompt that differs misses the reply cache, which
        in the batch mode would ask again for every reply just imported); else ``info``.
    """
    recorded = (meta or {}).get("device")
    if isinstance(recorded, Mapping) and recorded.get("device") == info.get("device"):
        return dict(recorded)
    return dict(info)


def generation_stats(gen: int, population: Sequence[Any], islands: Sequence[Sequence[Any]],
                     offspring: Sequence[Any], results: Mapping[str, EvalResult],
                     usage: Mapping[str, Any]) -> GenerationStats:
    """The GenerationStats of generation ``gen``: its best individual (evokernel.search.
    toolbox.Individual, by fitness) in ``population``, how many of ``offspring`` were accepted,
    and the LLM tokens and cost so far (``usage``: the client's totals)."""
    best = max(population, key=lambda i: i.fitness.values[0])
    return GenerationStats(
        generation=gen, best_id=best.candidate.id, best_speedup=best.fitness.values[0],
        valid=sum(results[i.candidate.id].accepted for i in offspring), total=len(offspring),
        population=tuple(i.candidate.id for i in population),
        tokens=int(usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)),
        cost_usd=float(usage.get("cost_usd", 0.0)),
        islands=tuple(tuple(i.candidate.id for i in pop) for pop in islands))
