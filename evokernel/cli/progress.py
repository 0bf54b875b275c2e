"""Live progress of ``evokernel run``: one bar per generation (proposals, builds, gated, timed),
the best speedup so far with valid/total counts, and LLM tokens and cost against the budget.

On a terminal it draws with rich; when stdout is not a terminal (CI, nohup, a pipe) it prints
plain lines instead: one when a generation's candidates go to the evaluator and one when the
generation ends. It is fed by the CLI, with no change to the search:

    progress = SearchProgress(generations=G, usage=lambda: evo.llm.usage if evo.llm else None)
    evo = Evolution(problem, config, evaluator=ProgressEvaluator(make_evaluator, progress),
                    on_generation=progress.generation_done)
    with progress:
        evo.run()

``ProgressEvaluator`` wraps the real evaluator: every batch it is given is a generation's
proposals (candidates carry their generation), and it passes ``on_event`` to evaluators that
accept it (evokernel.engine.evaluator.CudaEvaluator: build started/finished, gating, gated, timed).
Evaluators without events (test fakes) still report through their results.
"""
from __future__ import annotations

import inspect
import sys
import threading
from typing import Any, Callable, Mapping, Sequence, TextIO

from loguru import logger
from rich.console import Console, Group
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn,
                           TimeElapsedColumn)
from rich.text import Text

from evokernel.records import Candidate, EvalResult, Reason

#: A candidate's stages, in order; each event or result only moves a candidate forward.
STAGES = ("proposed", "building", "built", "gating", "gated", "timed")
_EVENT_STAGE = {"build_started": "building", "built": "built", "build_failed": "built",
                "gating": "gating", "gated": "gated", "timed": "timed"}
_BEFORE_GPU = {Reason.NO_CODE, Reason.BUILD_ERROR, Reason.BUILD_TIMEOUT}


class SearchProgress:
    """Counts a search's candidates by stage and shows them (see the module docstring).

    Args:
        generations: the last generation the search will run (SearchConfig.generations).
        usage: returns the LLM client's running totals (prompt_tokens, completion_tokens,
            cost_usd) or None when there is no LLM; read each time the display refreshes.
        max_tokens, max_cost_usd: the run's budget (LLMConfig), shown against the totals.
        baseline: "eager" or "compile": which speedup is the fitness (EvalConfig.baseline).
        console: where to draw (default: stdout).
        live: force the rich display on or off (default: on when stdout is a terminal).
        out: where plain lines go when not live (default: stdout).
    All methods are thread-safe (evaluator events come from worker threads).
    """

    def __init__(self, *, generations: int,
                 usage: Callable[[], Mapping[str, Any] | None] | None = None,
                 max_tokens: int | None = None, max_cost_usd: float | None = None,
                 baseline: str = "eager", console: Console | None = None,
                 live: bool | None = None, out: TextIO | None = None):
        self.generations = generations
        self.usage = usage
        self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd
        self.baseline = baseline
        self.console = console or Console()
        self.live = (self.console.is_terminal and not self.console.is_dumb_terminal
                     if live is None else live)
        self.out = out
        self._lock = threading.RLock()
        self._stage: dict[str, str] = {}              # candidate id -> stage
        self._gen_of: dict[str, int] = {}
        self._results: dict[str, EvalResult] = {}
        self._tasks: dict[int, TaskID] = {}
        self._calls: dict[int, list[int]] = {}          # generation -> [done, planned, children]
        self.best: tuple[float, str] | None = None      # (speedup, candidate id)
        self._progress = Progress(
            TextColumn("gen {task.fields[gen]:>3}"), BarColumn(bar_width=30),
            MofNCompleteColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
            console=self.console, auto_refresh=False)
        self._live_display: Any = None

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "SearchProgress":
        if self.live:
            from rich.live import Live
            self._live_display = Live(self, console=self.console,
                                      refresh_per_second=4, redirect_stdout=True,
                                      redirect_stderr=True)
            self._live_display.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:     # a generation that never got candidates (budget stop, error)
            for task in self._progress.tasks:
                if task.total is None:
                    self._progress.update(task.id, total=0, description="not run")
        if self._live_display is not None:
            self._live_display.__exit__(*exc)
            self._live_display = None

    def __rich__(self) -> Group:
        """The bars and the status line under them (what the live display draws)."""
        return Group(self._progress, _Status(self))

    def log_sink(self, message: Any) -> None:
        """A loguru sink that prints above the live display (plain stderr when not live)."""
        if self._live_display is not None:
            self.console.print(Text.from_ansi(str(message).rstrip("\n")))
        else:
            sys.stderr.write(str(message))

    # -- what the search reports -------------------------------------------------------------
    def begin(self, generation: int) -> None:
        """Generation ``generation`` starts: its operators are proposing children."""
        with self._lock:
            self._task(generation)

    def planned(self, generation: int, calls: int) -> None:
        """The search planned ``calls`` operator calls for ``generation`` (a hook for
        evokernel.search.evolution; until it calls this, the bar just says the operators are running)."""
        with self._lock:
            self._calls[generation] = [0, calls, 0]
            self._proposing_text(generation)

    def call_done(self, generation: int, children: int) -> None:
        """One planned operator call of ``generation`` returned ``children`` candidates."""
        with self._lock:
            done = self._calls.setdefault(generation, [0, 0, 0])
            done[0] += 1
            done[2] += children
            self._proposing_text(generation)

    def proposed(self, candidates: Sequence[Candidate]) -> None:
        """A batch of candidates was handed to the evaluator (a generation's offspring, or
        its repairs)."""
        with self._lock:
            gens = set()
            for c in candidates:
                self._gen_of.setdefault(c.id, c.generation)
                self._stage.setdefault(c.id, "proposed")
                gens.add(self._gen_of[c.id])
            for g in sorted(gens):
                self._refresh_task(g)
                if not self.live:
                    self._print(f"gen {g:>3}/{self.generations}: evaluating {len(candidates)} "
                                f"candidates ({self._counts(g)['proposed']} proposed in this "
                                "generation)")

    def event(self, kind: str, candidate_id: str) -> None:
        """An evaluator event (evokernel.engine.evaluator.OnEvent): build_started, built,
        build_failed, gating, gated or timed."""
        stage = _EVENT_STAGE.get(kind)
        if stage is None:
            return
        with self._lock:
            self._advance(candidate_id, stage)

    def result(self, r: EvalResult) -> None:
        """A verdict is in (the search also stores it)."""
        with self._lock:
            self._results[r.candidate_id] = r
            if r.accepted:
                stage = "timed"
            elif r.reason not in _BEFORE_GPU:
                stage = "gated"             # judged on the GPU: load, run, gate, anti-cheat
            else:                           # never built (no code) or the build failed
                stage = "proposed" if r.reason is Reason.NO_CODE else "built"
            self._advance(r.candidate_id, stage)
            speed = self._speedup(r)
            if speed and (self.best is None or speed > self.best[0]):
                self.best = (speed, r.candidate_id)

    def generation_done(self, stats: Any) -> None:
        """``Evolution(on_generation=...)``: a generation ended (evokernel.search.evolution
        GenerationStats); the next one starts proposing."""
        g = stats.generation
        with self._lock:
            if stats.best_speedup and (self.best is None or stats.best_speedup > self.best[0]):
                self.best = (stats.best_speedup, stats.best_id or "?")
            task = self._task(g)
            n = self._counts(g)["proposed"]
            self._progress.update(task, total=n, completed=n,
                                  description=self._stages_text(g) + f" · best so far "
                                  f"{stats.best_speedup:.3f}x")
            if not self.live:
                self._print(f"gen {g:>3}/{self.generations}: done: {self._stages_text(g)}; "
                            f"{self.status_text()}")
            if g < self.generations:
                self._task(g + 1)
            self._progress.refresh()

    # -- text --------------------------------------------------------------------------------
    def status_text(self) -> str:
        """'best 1.234x vs eager (abc12345) · valid 10/13 · tokens 12,000 / 1,000,000 ·
        cost $0.12 / $5.00' (tokens and cost only when an LLM is used)."""
        with self._lock:
            valid = sum(r.accepted for r in self._results.values())
            best = ("best -" if self.best is None else
                    f"best {self.best[0]:.3f}x vs {self.baseline} ({self.best[1][:8]})")
            parts = [best, f"valid {valid}/{len(self._results)}"]
        usage = self.usage() if self.usage is not None else None
        if usage:
            tokens = int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
            cost = float(usage.get("cost_usd", 0.0))
            parts.append(f"tokens {tokens:,}" + (f" / {self.max_tokens:,}"
                                                 if self.max_tokens else " (no budget)"))
            parts.append(f"cost ${cost:.4f}" + (f" / ${self.max_cost_usd:.2f}"
                                                 if self.max_cost_usd else ""))
        return " · ".join(parts)

    def _counts(self, generation: int) -> dict[str, int]:
        """How many of the generation's candidates reached each stage, plus build_failed."""
        ids = [cid for cid, g in self._gen_of.items() if g == generation]
        at = [STAGES.index(self._stage[cid]) for cid in ids]
        counts = {s: sum(i >= k for i in at) for k, s in enumerate(STAGES)}
        counts["done"] = sum(cid in self._results for cid in ids)
        counts["build_failed"] = sum(
            self._results[cid].reason in (Reason.BUILD_ERROR, Reason.BUILD_TIMEOUT)
            for cid in ids if cid in self._results)
        return counts

    def _stages_text(self, generation: int) -> str:
        c = self._counts(generation)
        failed = f" ({c['build_failed']} failed)" if c["build_failed"] else ""
        return (f"proposals {c['proposed']} · built {c['built']}{failed} · gated {c['gated']}"
                f" · timed {c['timed']}")

    # -- internals ---------------------------------------------------------------------------
    def _speedup(self, r: EvalResult) -> float:
        return r.compile_speedup if self.baseline == "compile" else r.speedup

    def _advance(self, cid: str, stage: str) -> None:
        current = self._stage.get(cid, "proposed")
        if STAGES.index(stage) > STAGES.index(current):
            self._stage[cid] = stage
        if cid in self._gen_of:
            self._refresh_task(self._gen_of[cid])

    def _task(self, generation: int) -> TaskID:
        if generation not in self._tasks:
            self._tasks[generation] = self._progress.add_task(
                "proposing (operators running)", total=None, gen=generation)
        return self._tasks[generation]

    def _proposing_text(self, generation: int) -> None:
        done, planned, children = self._calls[generation]
        if self._counts(generation)["proposed"]:      # already evaluating: the bar shows that
            return
        self._progress.update(self._task(generation), description=(
            f"proposing: {done}/{planned} operator calls done, {children} children"))

    def _refresh_task(self, generation: int) -> None:
        c = self._counts(generation)
        self._progress.update(self._task(generation), total=c["proposed"],
                              completed=c["done"], description=self._stages_text(generation))

    def _print(self, line: str) -> None:
        print(line, file=self.out or sys.stdout, flush=True)


class _Status:
    """The line under the bars, recomputed at every refresh (so tokens update live)."""

    def __init__(self, progress: SearchProgress):
        self.progress = progress

    def __rich__(self) -> Text:
        return Text(self.progress.status_text(), style="bold")


class ProgressEvaluator:
    """An evaluator that reports to a SearchProgress and delegates to a real one.

    Args:
        inner: the evaluator, or a callable that makes it on first use (so a CudaEvaluator's
            GPU workers start only once the search has created its run store).
        progress: where to report.
    """

    def __init__(self, inner: Any, progress: SearchProgress):
        self._inner = None if callable(inner) and not hasattr(inner, "evaluate") else inner
        self._make = inner if self._inner is None else None
        self.progress = progress

    @property
    def inner(self) -> Any:
        if self._inner is None:
            self._inner = self._make()     # type: ignore[misc]
        return self._inner

    @property
    def info(self) -> dict[str, Any]:
        return self.inner.info

    def evaluate(self, candidates: Sequence[Candidate],
                 on_result: Callable[[EvalResult], None] | None = None) -> list[EvalResult]:
        """Evaluate through the inner evaluator, reporting proposals, events and results."""
        self.progress.proposed(candidates)

        def each(r: EvalResult) -> None:
            try:
                self.progress.result(r)
            except Exception:  # the display must never cost a result
                logger.exception("progress display failed on {}", r.candidate_id)
            if on_result is not None:
                on_result(r)
        kw: dict[str, Any] = {"on_result": each}
        if "on_event" in inspect.signature(self.inner.evaluate).parameters:
            kw["on_event"] = self.progress.event
        return self.inner.evaluate(candidates, **kw)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
