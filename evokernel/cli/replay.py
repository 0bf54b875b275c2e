"""`evokernel replay RECORDED_RUN`: build, gate and time every kernel of a recorded search again
on this GPU (evokernel.search.replay), into a new run directory, and print the recorded and the
new verdicts side by side. `make run` does this with the committed frontier-LLM softmax run when
no model is given (README).

    add_parser(sub)     the subcommand
    cmd_replay(args)    exit status 0 when a kernel passed the gate here, 1 when none did
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any



def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `replay` to the subparsers ``sub``; returns its parser."""
    r = sub.add_parser(
        "replay", help="re-measure a recorded search's kernels on this GPU (no LLM is asked)",
        description="Build, gate and time again, on this machine's GPU, every kernel a recorded "
        "run made from its model's replies, generation by generation, into a new run directory "
        "(the recorded populations are kept: a replay re-measures, it does not search). Prints "
        "each kernel's recorded and new verdict.")
    r.add_argument("recorded", metavar="RECORDED_RUN", help="the recorded run directory")
    r.add_argument("--run-dir", help="the replay's run directory (none: "
                   "runs/replay-<recorded name>-<time>)")
    r.set_defaults(func=cmd_replay)
    return r


def _check_run_dir(run_dir: Path, recorded: Path) -> None:
    """Raises: EvokernelError when ``run_dir`` is a file, holds anything, or lies inside the
    recorded run (the replay must not write into what it reads)."""
    from evokernel.errors import EvokernelError
    if run_dir.exists() and not run_dir.is_dir():
        raise EvokernelError(f"{run_dir}: a file, not a folder for the replay's run")
    if run_dir.is_dir() and any(run_dir.iterdir()):
        raise EvokernelError(f"{run_dir}: not empty; choose a new --run-dir for the replay")
    if run_dir.resolve().is_relative_to(recorded.resolve()):
        raise EvokernelError(f"{run_dir}: inside the recorded run {recorded}; choose a "
                             "--run-dir outside it")


def cmd_replay(args: argparse.Namespace) -> int:
    from evokernel.engine.factory import require_gpu
    from evokernel.runs.store import RunStore
    from evokernel.search.replay import NO_GPU, replay
    recorded = Path(args.recorded)
    store = RunStore(recorded, read_only=True)      # a clear error for a folder that is no run
    try:
        usage = store.llm_usage()
    finally:
        store.close()
    run_dir = Path(args.run_dir or f"runs/replay-{recorded.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    _check_run_dir(run_dir, recorded)
    who = ", ".join(usage.get("answered_by") or usage.get("scripted_by") or ["(no LLM)"])
    scripted = " (SCRIPTED stand-in replies, not a model's)" if usage.get("scripted") else ""
    require_gpu(f"evokernel replay: {NO_GPU}")
    print(f"evokernel: replaying {recorded}: its kernels, written from the replies of {who}"
          f"{scripted}, are built, gated and timed again on this GPU; no LLM is asked anything")

    def each(gen: int, rows: list[Any]) -> None:
        ok = sum(r.replayed.accepted for r in rows)
        print(f"generation {gen}: {ok} of {len(rows)} accepted here", flush=True)
    result = replay(recorded, run_dir, on_generation=each)
    print(result.table())
    print(f"run directory: {result.run_dir}  (replay of {recorded})")
    best = result.best
    if best is None:
        print("no kernel passed the gate here")
        return 1
    r = best.replayed
    print(f"best kernel here {best.candidate.id} (generation {best.candidate.generation}): "
          f"{r.speedup:.3f}x over eager ({r.reference_ms:.4f} ms -> {r.candidate_ms:.4f} ms)"
          + (f", {r.compile_speedup:.3f}x over torch.compile" if r.compile_ms else ""))
    return 0
