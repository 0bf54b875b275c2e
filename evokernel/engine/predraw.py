"""A problem's input sets drawn on the CPU before its set-up, in a worker started ahead of its
turn (issue 16).

A set-up draws 8 input sets with the problem's own ``get_inputs()`` on the CPU (the gate's, one
per distribution and seed, and the six timing sets), then computes truths and times the
reference on the GPU. On the H200 the draws were 1.1 s of a 3.3 s set-up at a problem's turn,
and most of a set-up made beside 12 builds (11.8 s; results/h200-2026-12-04-s21/README.md).
A worker spawned ahead (WorkerHandle.prepare) now gets its problem at once and draws them in a
thread while it waits (``PredrawThread``); the set-up takes each from ``Predrawn.draw``, which
hands out the very tensors ``draw_inputs`` would have made (same seeds, same order of values)
and leaves torch's generators as that draw would have, so nothing downstream can tell.

Only CPU tensors are kept (a ``get_inputs`` that makes CUDA tensors is drawn at the set-up, as
before), and at most ``host_budget()`` bytes a worker; what is not drawn ahead is drawn at the
set-up. Drawing opens no CUDA context.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from loguru import logger

#: The set-up's timing input sets: TIMING_SETS sets from seed TIMING_FIRST_SEED (timed), and as
#: many from FRESH_FIRST_SEED (never seen by a candidate before the fresh-input check).
TIMING_SETS, TIMING_FIRST_SEED, FRESH_FIRST_SEED = 3, 1000, 2000

#: At most this many bytes of input sets drawn ahead per worker (and at most an eighth of the
#: host's available memory): the problem set keeps up to 3 workers spawned ahead
#: (evokernel.engine.problem_set), and a set-up frees its worker's copies once they are on the GPU.
PREDRAW_MAX_BYTES = 4 * 2**30


def draw_plan(config: Any, declared: tuple[str, ...] | None) -> list[tuple[str, int]]:
    """The (distribution, seed) pairs a set-up draws, in its order: the gate's
    (evokernel.gate.reference.gate_distributions x ``config.gate.seeds``), then the timing and
    fresh sets ("problem"). ``config``: an EvalConfig."""
    from evokernel.gate.reference import gate_distributions
    gate = [(d, s) for d in gate_distributions(config.gate, declared) for s in config.gate.seeds]
    timing = [("problem", first + i) for first in (TIMING_FIRST_SEED, FRESH_FIRST_SEED)
              for i in range(TIMING_SETS)]
    return gate + timing


def host_budget() -> int:
    """Bytes a worker may draw ahead: PREDRAW_MAX_BYTES, or an eighth of MemAvailable
    (/proc/meminfo) when that is less; PREDRAW_MAX_BYTES where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return min(PREDRAW_MAX_BYTES, int(line.split()[1]) * 1024 // 8)
    except (OSError, ValueError, IndexError):
        pass
    return PREDRAW_MAX_BYTES


class Predrawn:
    """One problem's module (run once, here) and the input sets drawn for it ahead."""

    def __init__(self, problem: dict[str, Any], module: Any):
        self.name, self.source, self.module = problem["name"], problem["source"], module
        self.sets: dict[tuple[str, int], tuple[list, Any]] = {}   # -> (inputs, CPU rng state)
        self.used = 0
        self.nbytes = 0

    def matches(self, problem: dict[str, Any]) -> bool:
        """Whether these are ``problem``'s (same name and source)."""
        return problem.get("name") == self.name and problem.get("source") == self.source

    def draw(self, module: Any, distribution: str, seed: int) -> list:
        """draw_inputs(module, distribution, seed): the set drawn ahead when there is one for
        this module (handed out once, then forgotten), with torch's generators then seeded and
        set as that call would have left them; otherwise drawn now."""
        import torch
        from evokernel.gate.distributions import draw_inputs
        got = self.sets.pop((distribution, seed), None) if module is self.module else None
        if got is None:
            return draw_inputs(module, distribution, seed)
        inputs, state = got
        torch.manual_seed(seed)              # every device, as draw_inputs seeds before drawing
        torch.set_rng_state(state)           # the CPU generator after the draw
        self.used += 1
        return inputs

    def clear(self) -> None:
        """Forget the sets not handed out (the set-up is done)."""
        self.sets.clear()


def predraw(problem: dict[str, Any], config: Any, stop: threading.Event | None = None,
            max_bytes: int | None = None) -> Predrawn:
    """Run the problem's module and draw its set-up's input sets (``draw_plan``) on the CPU, in
    order, until ``stop`` is set, ``max_bytes`` (default ``host_budget()``) would be passed, or
    a set holds a tensor off the CPU (that one and the rest are drawn at the set-up).
    Raises: what running the module or its ``get_inputs`` raises (the set-up then meets it
    again and reports it)."""
    import torch
    from evokernel.gate import maths as gm
    from evokernel.gate.distributions import draw_inputs
    from evokernel.problem import exec_module
    module = exec_module(problem["source"], f"evokernel_problem_{problem['name']}",
                         problem["path"])
    out = Predrawn(problem, module)
    cap = host_budget() if max_bytes is None else max_bytes
    declared = tuple(problem["distributions"]) if problem.get("distributions") else None
    for distribution, seed in draw_plan(config, declared):
        if stop is not None and stop.is_set():
            break
        inputs = draw_inputs(module, distribution, seed)
        state = torch.get_rng_state()
        tensors: list[torch.Tensor] = []
        gm.map_tensors(inputs, tensors.append)
        size = sum(t.numel() * t.element_size() for t in tensors)
        if any(t.device.type != "cpu" for t in tensors) or out.nbytes + size > cap:
            break
        out.sets[(distribution, seed)] = (inputs, state)
        out.nbytes += size
    return out


class PredrawThread(threading.Thread):
    """``predraw`` in a thread of the worker while it waits for its set-up; ``finish`` stops it
    after the set it is drawing and returns what it drew."""

    def __init__(self, problem: dict[str, Any], config: Any):
        super().__init__(name="evokernel-predraw", daemon=True)
        self.problem, self.config = problem, config
        self.stop = threading.Event()
        self.result: Predrawn | None = None

    def run(self) -> None:
        try:
            self.result = predraw(self.problem, self.config, self.stop)
        except Exception as e:  # noqa: BLE001 -- the set-up meets it again and reports it
            logger.info("drawing {}'s inputs ahead failed ({}: {}); drawn at its set-up",
                        self.problem.get("name"), type(e).__name__, e)

    def finish(self, problem: dict[str, Any]) -> tuple[Predrawn | None, float]:
        """Stop, wait for the set being drawn, and return (what was drawn for ``problem``, or
        None; the seconds waited)."""
        t0 = time.perf_counter()
        self.stop.set()
        self.join()
        drawn = self.result if self.result is not None and self.result.matches(problem) else None
        return drawn, time.perf_counter() - t0
