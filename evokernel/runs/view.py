"""A read-only view of one run directory: what ``evokernel show``, ``report`` and ``export`` print.

Everything here is computed from the run store (evokernel.runs.store) opened read-only, so it works
on a finished run, on a copied one, and on one still being written (candidates without a verdict
yet are "pending"; a run with no completed generation yet has an empty generation table).
Speedups are reference_ms / candidate_ms (eager, TF32 off) as in evokernel.records; the vs
torch.compile speedup is compile_ms / candidate_ms where compile_ms was measured.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evokernel.config import RunConfig
from evokernel.records import Candidate, EvalResult, Reason
from evokernel.errors import ConfigError
from evokernel.runs.store import RunStore

#: The kind of each rejection reason (evokernel.records.Reason values, grouped as there); a
#: reason not listed here shows as "other".
REASON_KIND: dict[str, str] = {
    **dict.fromkeys(["no_code"], "proposal"),
    **dict.fromkeys(["build_error", "build_timeout", "load_error"], "build"),
    **dict.fromkeys(["runtime_error", "timeout", "cuda_fault", "worker_crash", "out_of_memory",
                     "silent_failure"], "run"),
    **dict.fromkeys(["shape_mismatch", "dtype_mismatch", "lazy_output", "non_finite",
                     "constant_output", "partial_output"], "output form"),
    **dict.fromkeys(["lower_precision", "accumulation_error", "unstable_distribution",
                     "wrong_function", "nondeterministic"], "precision"),
    **dict.fromkeys(["input_mutation", "result_reuse", "cached_output", "side_stream",
                     "threads", "timer_tampering", "reference_fallback", "no_kernel_launched",
                     "impossible_speed"], "anti-cheat"),
}


@dataclass(frozen=True)
class Entry:
    """One candidate with its verdict (None while it is still being evaluated)."""

    candidate: Candidate
    result: EvalResult | None

    @property
    def id(self) -> str:
        return self.candidate.id

    @property
    def status(self) -> str:
        """"accepted", "pending", or the rejection reason's value (e.g. "build_error")."""
        if self.result is None:
            return "pending"
        return "accepted" if self.result.accepted else self.result.reason.value

    @property
    def speedup(self) -> float:
        """Speedup over eager PyTorch (x); 0.0 for a rejected or pending candidate."""
        return self.result.speedup if self.result is not None else 0.0

    @property
    def idea_line(self) -> str:
        """The idea's first line ("-" when it has none)."""
        lines = self.candidate.idea.strip().splitlines()
        return lines[0].strip() if lines else "-"


@dataclass(frozen=True)
class GenerationRow:
    """One generation's offspring (generation 0: the seed kernel).

    ``best_so_far`` is the best accepted speedup of this and all earlier generations (x);
    ``best``/``median`` are over this generation's accepted candidates only (None if none).
    ``complete`` says whether the search recorded the generation as finished.
    """

    generation: int
    proposed: int
    evaluated: int
    accepted: int
    best: float | None
    median: float | None
    best_so_far: float | None
    complete: bool


@dataclass
class RunView:
    """Everything shown about a run. Build it with ``load_run``."""

    run_dir: Path
    problem: str
    device: dict[str, Any]
    config: RunConfig | None
    entries: list[Entry]
    generations: list[GenerationRow]
    completed_generations: list[int]
    llm_usage: dict[str, float]
    last_write_s: float | None
    logbook: list[dict[str, Any]] = field(default_factory=list)   # DEAP Logbook records
    replay_of: dict[str, Any] | None = None   # evokernel.search.replay: the recorded run

    # -- lookups ----------------------------------------------------------------------------
    def entry(self, cid: str) -> Entry | None:
        return next((e for e in self.entries if e.id == cid), None)

    @property
    def best(self) -> Entry | None:
        """The accepted candidate with the highest speedup (the earliest on a tie), or None."""
        accepted = [e for e in self.entries if e.result is not None and e.result.accepted]
        return max(accepted, key=lambda e: e.speedup) if accepted else None

    @property
    def seed(self) -> Entry | None:
        return next((e for e in self.entries if e.candidate.operator == "seed"), None)

    @property
    def planned_generations(self) -> int | None:
        return self.config.search.generations if self.config else None

    @property
    def state(self) -> str:
        """"finished" when every planned generation is recorded, else a plain description."""
        done = len(self.completed_generations)
        planned = self.planned_generations
        if planned is not None and done >= planned + 1:
            return "finished"
        pending = sum(e.result is None for e in self.entries)
        what = f"{max(done - 1, 0)} of {planned if planned is not None else '?'} generations done"
        if not self.entries:
            return "no candidates yet (" + what + ")"
        return (f"{what}, {pending} candidates pending (still running, stopped by its "
                "budget, or killed)")

    # -- numbers ----------------------------------------------------------------------------
    def eager_ms(self) -> tuple[float, float, float, int] | None:
        """PyTorch eager time (ms) over every timed candidate: (median, min, max, count).
        Each candidate's reference time is measured interleaved with it, so they spread."""
        ms = [e.result.reference_ms for e in self.entries
              if e.result is not None and e.result.reference_ms]
        return (statistics.median(ms), min(ms), max(ms), len(ms)) if ms else None

    def compile_ms(self) -> float | None:
        """torch.compile time (ms), or None when the run did not measure it."""
        if self.device.get("compile_ms"):
            return float(self.device["compile_ms"])
        ms = [e.result.compile_ms for e in self.entries
              if e.result is not None and e.result.compile_ms]
        return statistics.median(ms) if ms else None

    def failures(self) -> Counter[Reason]:
        """How many candidates were rejected for each reason."""
        return Counter(e.result.reason for e in self.entries
                       if e.result is not None and not e.result.accepted)

    def failures_by_kind(self) -> list[tuple[str, Reason, int]]:
        """(kind, reason, count) rows, most frequent first; kind from REASON_KIND."""
        rows = [(REASON_KIND.get(r.value, "other"), r, n) for r, n in self.failures().items()]
        return sorted(rows, key=lambda row: (-row[2], row[0], row[1].value))

    def operators(self) -> Counter[str]:
        return Counter(e.candidate.operator for e in self.entries)

    # -- lineage ----------------------------------------------------------------------------
    def lineage(self, cid: str | None = None) -> list[Entry]:
        """The chain of ancestors of ``cid`` (default: the best) from the oldest to it,
        following each candidate's first parent (a crossover's second parent is listed in
        ``ancestry``). Empty when there is no such candidate."""
        cid = cid or (self.best.id if self.best else None)
        chain: list[Entry] = []
        seen: set[str] = set()
        while cid and cid not in seen and (e := self.entry(cid)) is not None:
            chain.append(e)
            seen.add(cid)
            cid = e.candidate.parent_ids[0] if e.candidate.parent_ids else None
        return chain[::-1]

    def lineage_tree(self, cid: str | None = None) -> tuple[list[Entry], list[Entry]]:
        """The lineage of ``cid`` (default: the best; see ``lineage``) and the other parents
        of its crossovers ("partners", whose own ancestry is not followed), each oldest first.
        """
        chain = self.lineage(cid)
        on_chain = {e.id for e in chain}
        partners: dict[str, Entry] = {}
        for e in chain:
            for pid in e.candidate.parent_ids[1:]:
                p = self.entry(pid)
                if p is not None and pid not in on_chain:
                    partners.setdefault(pid, p)
        return chain, sorted(partners.values(), key=lambda e: e.candidate.generation)


def load_run(run_dir: str | Path) -> RunView:
    """Read a run directory (read-only) into a RunView.

    Raises:
        ConfigError: ``run_dir`` holds no run store.
    """
    store = RunStore(run_dir, read_only=True)
    try:
        meta = store.meta()
        try:
            config = store.config()
        except (ConfigError, OSError, ValueError, KeyError, TypeError):  # missing or foreign
            config = None
        cands, results = store.candidates(), store.results()
        completed = [g["generation"] for g in store.generations()]
        usage = store.llm_usage()
        last = store.last_write_s()
        logbook = store.logbook()
    finally:
        store.close()
    entries = [Entry(c, results.get(cid)) for cid, c in cands.items()]
    problem = meta.get("problem", {})
    return RunView(run_dir=Path(run_dir), problem=problem.get("name", "?") if isinstance(
                       problem, dict) else str(problem),
                   device=meta.get("device") or {}, config=config, entries=entries,
                   replay_of=meta.get("replay_of"),
                   generations=_generation_rows(entries, set(completed)),
                   completed_generations=completed, llm_usage=usage, last_write_s=last,
                   logbook=logbook)


def _generation_rows(entries: list[Entry], complete: set[int]) -> list[GenerationRow]:
    gens = sorted({e.candidate.generation for e in entries} | complete)
    rows, so_far = [], None
    for g in gens:
        mine = [e for e in entries if e.candidate.generation == g]
        ok = [e.speedup for e in mine if e.result is not None and e.result.accepted]
        if ok:
            so_far = max(ok) if so_far is None else max(so_far, max(ok))
        rows.append(GenerationRow(
            generation=g, proposed=len(mine), evaluated=sum(e.result is not None for e in mine),
            accepted=len(ok), best=max(ok) if ok else None,
            median=statistics.median(ok) if ok else None, best_so_far=so_far,
            complete=g in complete))
    return rows


def kernel_text(view: RunView, e: Entry) -> str:
    """'16.112x vs eager (0.5186 ms), 1.200x vs torch.compile, 369% of floor' for an accepted
    entry; its status for any other. The one text that ``show`` and ``report`` print for a
    kernel (torch.compile: compile_speedup)."""
    r = e.result
    if r is None or not r.accepted:
        return e.status
    text = f"{r.speedup:.3f}x vs eager ({r.candidate_ms:.4f} ms)"
    vs_compile = compile_speedup(view, e)
    if vs_compile:
        text += f", {vs_compile:.3f}x vs torch.compile"
    if r.pct_of_floor:
        text += f", {r.pct_of_floor:.0f}% of the memory floor"
    return text


def compile_speedup(view: RunView, e: Entry) -> float | None:
    """An accepted entry's speedup over the torch.compile baseline it was timed with, else over
    the run's (a run resumed before its first baseline was cached measured one again, see
    ``compile_text``); None when neither was measured or the entry is not accepted."""
    r = e.result
    if r is None or not r.accepted or not r.candidate_ms:
        return None
    run_compile = view.compile_ms()
    return r.compile_speedup or (run_compile / r.candidate_ms if run_compile else None)


def floor_text(view: RunView) -> str:
    """The run's floors: the memory floor (the one bound) and the FP32 compute reference, each
    named, and which one the reference's algorithm is bound by; "-" when not measured."""
    dev = view.device
    if not dev.get("floor_ms"):
        return "-"
    text = (f"memory floor {dev['floor_ms']:.4f} ms ({dev.get('min_bytes', 0):.3g} bytes at "
            f"{dev.get('bandwidth_gbs') or dev.get('copy_gbs') or 0:.0f} GB/s; 100% = at it)")
    if dev.get("compute_floor_ms"):
        text += (f"; FP32 compute reference {dev['compute_floor_ms']:.4f} ms ({dev.get('flops', 0):.3g}"
                 f" FLOP at {dev.get('fp32_tflops', 0):.1f} TFLOP/s, information only)")
    return text + f"; the reference is {dev.get('floor_bound', '?')}-bound"


def sharing_text(view: RunView) -> str | None:
    """What a GPU shared with another process did to the run (evokernel.engine.gpu_share):
    the wait at set-up, candidates that waited, were measured again, or stayed marked; None
    when the GPU was never shared."""
    dev = view.device
    flags = [f for e in view.entries if e.result is not None for f in e.result.flags]
    waited = [float(f.split(":", 1)[1]) for f in flags if f.startswith("gpu_waited_s:")]
    again = sum(f == "gpu_remeasured" for f in flags)
    marked = [f.split(":", 1)[1] for f in flags if f.startswith("gpu_contended:")]
    setup = dev.get("gpu_shared_at_setup")
    setup_wait = dev.get("gpu_wait_at_setup_s") or 0.0
    if not (waited or again or marked or setup or setup_wait >= 0.5):
        return None
    parts = []
    if setup_wait >= 0.5:
        parts.append(f"waited {setup_wait:.0f} s at set-up for another process to leave the GPU"
                     + (f" (pid {', '.join(map(str, dev.get('gpu_other_pids_at_setup', [])))})"
                        if dev.get("gpu_other_pids_at_setup") else ""))
    if setup:
        parts.append(f"baselines measured while other processes used the GPU: {setup}")
    if waited:
        parts.append(f"{len(waited)} candidates waited {sum(waited):.0f} s in all")
    if again:
        parts.append(f"{again} measured again after the GPU was free")
    if marked:
        parts.append(f"{len(marked)} marked as measured on a shared GPU ({marked[0]})")
    return "; ".join(parts)


def eager_text(view: RunView) -> str:
    """The eager reference time over the run's interleaved measurements, or "-"."""
    eager = view.eager_ms()
    if eager is None:
        return "-"
    median, lo, hi, n = eager
    return f"{median:.4f} (median of {n} interleaved measurements, {lo:.4f}-{hi:.4f}; TF32 off)"


def compile_text(view: RunView) -> str:
    """The run's torch.compile time (ms), and which candidates were timed against another
    measurement of it (a run resumed with no cached baseline measured it again); "not
    measured" when there is none."""
    run_ms = view.compile_ms()
    if not run_ms:
        return "not measured"
    seen = Counter(round(e.result.compile_ms, 6) for e in view.entries
                   if e.result is not None and e.result.compile_ms)
    other = {ms: n for ms, n in seen.items() if abs(ms - run_ms) > 1e-6}
    if not other:
        return fmt_ms(run_ms)
    total = sum(seen.values())
    return (f"{run_ms:.4f} (the last measurement; " + ", ".join(
        f"{n} of {total} candidates timed against {ms:.4f}" for ms, n in sorted(other.items()))
        + ", measured before a resume)")


def fmt_ms(x: float | None) -> str:
    """A time in ms with 4 decimals, or "-"."""
    return "-" if x is None else f"{x:.4f}"


def fmt_ratio(x: float | None) -> str:
    """An error ratio with 3 significant digits, or "-"."""
    return "-" if x is None else f"{x:.3g}"


def fmt_x(x: float | None) -> str:
    """A speedup as "1.234x", or "-"."""
    return "-" if x is None else f"{x:.3f}x"


def lineage_rows(view: RunView) -> list[dict[str, str]]:
    """The best kernel's ancestors (seed first) as text cells: gen, id, operator, idea (one
    line; a crossover's other parents first, as "(with <id>)"), speedup, vs parent (this
    speedup over the previous row's), ms (kernel time), norm ratio and max ratio (worst
    error over PyTorch's own FP32 error)."""
    rows, prev = [], None
    for e in view.lineage():
        r = e.result
        others = [p[:8] for p in e.candidate.parent_ids[1:]]
        rows.append({
            "gen": str(e.candidate.generation), "id": e.id[:8], "operator": e.candidate.operator,
            "idea": (f"(with {', '.join(others)}) " if others else "") + e.idea_line,
            "speedup": fmt_x(e.speedup) if r and r.accepted else e.status,
            "vs parent": "-" if not prev or not e.speedup else f"{e.speedup / prev:.3f}x",
            "ms": fmt_ms(r.candidate_ms if r else None),
            "norm ratio": fmt_ratio(r.norm_error_ratio if r else None),
            "max ratio": fmt_ratio(r.max_error_ratio if r else None)})
        prev = e.speedup
    return rows


def age_text(t_s: float | None, relative: bool = True) -> str:
    """'2026-11-30 08:37:27 UTC (12 s ago)' for a Unix time (s), without the part in
    parentheses when not ``relative``; '-' for None."""
    if t_s is None:
        return "-"
    if not relative:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t_s))
    age = max(0.0, time.time() - t_s)
    ago = (f"{age:.0f} s" if age < 120 else f"{age / 60:.1f} min" if age < 7200
           else f"{age / 3600:.1f} h" if age < 172800 else f"{age / 86400:.0f} days")
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t_s)) + f" ({ago} ago)"


def to_json(view: RunView) -> dict[str, Any]:
    """The view's summary as JSON-ready data (for scripts; the report embeds the same)."""
    best = view.best
    return {"run_dir": str(view.run_dir), "problem": view.problem, "state": view.state,
            "device": view.device, "eager_ms": view.eager_ms(), "compile_ms": view.compile_ms(),
            "best": None if best is None else dict(best.result.to_dict(), idea=best.idea_line,
                                                      speedup=best.speedup),
            "generations": [dataclasses.asdict(g) for g in view.generations],
            "failures": {r.value: n for r, n in view.failures().items()},
            "llm_usage": view.llm_usage}


