"""A problem's CPU work of its set-up done before the set-up, by a worker started ahead of its
turn (issue 16): the module run, its reference model made, its input sets drawn.

A set-up makes the reference ``Model`` and draws 8 input sets with the problem's own
``get_inputs()`` on the CPU (the gate's, one per distribution and seed, and the six timing
sets), then computes truths and times the reference on the GPU. On the H200 the draws were
1.1 s of a 3.3 s set-up at a problem's turn, and most of a set-up made beside 12 builds (11.8 s;
results/h200-2026-12-04-s21/README.md). A worker spawned ahead (WorkerHandle.prepare) is now
sent its problem at once and does that CPU part in its main thread while it waits
(``predraw``); the set-up then takes the model and each set from ``Predrawn``.

The set-up must see exactly what it would have made itself, whatever the problem's code does
(two reviews, 2026-12-04, found problems for which looser schemes changed the inputs):
- the same thread (torch settings made at import are thread-local);
- the same calls to the module in the same order (``get_init_inputs``, ``Model``, then
  ``get_inputs`` once per set in the set-up's order, none repeated or skipped), so a module with
  state of its own sees the same sequence;
- the model and the gate's sets made in one strict-FP32 block, the timing sets outside it, as
  the set-up's GateReference.build does (precision changed by ``Model`` reaches the gate draws);
- the model's tensors copied at once and each set copied as it is drawn, as the set-up's copies
  to the GPU are (a buffer that ``get_inputs`` refills, also one the model holds);
- torch's generators left, at each hand-over, as that call would have left them.
A source that mentions CUDA is not run ahead, and CUDA's lazy initialisation raises while
problem code runs ahead (a CUDA context beside another problem's timing would disturb it); a
C++ path that skips it, such as ``pin_memory``, is only noticed after, and what was made is
then dropped. Not reproduced: a ``forward`` that reads module state written by ``get_inputs``
(the set-up runs draw, forward, draw, ...; ahead, the draws come first).

Drawing stops before the next set when a message is waiting (the set-up, usually) or when it
would pass ``host_budget()``; what is not drawn ahead is drawn at the set-up, in order, by the
same module.
"""
from __future__ import annotations

import collections
import contextlib
import time
from typing import Any, Callable, Iterator

#: The set-up's timing input sets: TIMING_SETS sets from seed TIMING_FIRST_SEED (timed), and as
#: many from FRESH_FIRST_SEED (never seen by a candidate before the fresh-input check).
TIMING_SETS, TIMING_FIRST_SEED, FRESH_FIRST_SEED = 3, 1000, 2000

#: At most about this many bytes (the model's and the sets' copies) made ahead per worker, and
#: at most an eighth of the host's available memory: the problem set keeps up to 3 workers
#: spawned ahead (evokernel.engine.problem_set); a set-up drops them once on the GPU.
PREDRAW_MAX_BYTES = 4 * 2**30


def draw_plan(config: Any, declared: tuple[str, ...] | None) -> list[tuple[str, int, bool]]:
    """The (distribution, seed, gate) input sets a set-up draws, in its order: the gate's
    (evokernel.gate.reference.gate_distributions x ``config.gate.seeds``; gate True: drawn under
    strict FP32), then the timing and fresh sets ("problem"). ``config``: an EvalConfig."""
    from evokernel.gate.reference import gate_distributions
    gate = [(d, s, True) for d in gate_distributions(config.gate, declared)
            for s in config.gate.seeds]
    timing = [("problem", first + i, False) for first in (TIMING_FIRST_SEED, FRESH_FIRST_SEED)
              for i in range(TIMING_SETS)]
    return gate + timing


def host_budget() -> int:
    """Bytes a worker may make ahead: PREDRAW_MAX_BYTES, or an eighth of MemAvailable
    (/proc/meminfo) when that is less; PREDRAW_MAX_BYTES where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return min(PREDRAW_MAX_BYTES, int(line.split()[1]) * 1024 // 8)
    except (OSError, ValueError, IndexError):
        pass
    return PREDRAW_MAX_BYTES


def _rng() -> tuple[int, Any]:
    import torch
    return torch.initial_seed(), torch.get_rng_state()


def _set_rng(state: tuple[int, Any]) -> None:
    """torch's generators as a call that left ``state`` (``_rng()``) would have: every device
    seeded with the last seed set, the CPU one where that call left it."""
    import torch
    torch.manual_seed(state[0])
    torch.set_rng_state(state[1])


def _copy(inputs: list) -> tuple[list, int]:
    """Each tensor of ``inputs`` copied (requires_grad kept); (the copy, its bytes)."""
    import torch
    from evokernel.gate import maths as gm
    size = 0

    def one(t: torch.Tensor) -> torch.Tensor:
        nonlocal size
        with torch.no_grad():
            c = t.detach().clone()
        size += c.numel() * c.element_size()
        return c.requires_grad_() if t.requires_grad else c
    return gm.map_tensors(list(inputs), one), size


class Predrawn:
    """One problem's module (run once, ahead), its reference model and the input sets made
    ahead, each handed out once (``make``, ``draw``); anything else is made then."""

    def __init__(self, problem: dict[str, Any], module: Any):
        self.name, self.source, self.module = problem["name"], problem["source"], module
        self.model: tuple[list, Any, tuple[int, Any]] | None = None
        self.sets: dict[tuple[str, int], collections.deque] = collections.defaultdict(
            collections.deque)                # (distribution, seed) -> (inputs, rng) in order
        self.used, self.nbytes, self.last, self.seconds = 0, 0, 0, 0.0

    def matches(self, problem: dict[str, Any]) -> bool:
        """Whether these are ``problem``'s (same name and source)."""
        return problem.get("name") == self.name and problem.get("source") == self.source

    def make(self, module: Any) -> tuple[list, Any]:
        """evokernel.gate.reference.make_model(module): the model made ahead, once, torch's
        generators then as making it left them; otherwise made now.
        Returns: (init_inputs, the model on the CPU)."""
        if module is not self.module or self.model is None:
            from evokernel.gate.reference import make_model
            return make_model(module)
        init_inputs, model, rng = self.model
        self.model = None
        _set_rng(rng)
        return init_inputs, model

    def draw(self, module: Any, distribution: str, seed: int) -> list:
        """draw_inputs(module, distribution, seed): the next set drawn ahead for that pair, once,
        torch's generators then as its draw left them; otherwise drawn now.
        Returns: the inputs (a list, as get_inputs returned them)."""
        from evokernel.gate.distributions import draw_inputs
        queue = self.sets.get((distribution, seed)) if module is self.module else None
        if not queue:
            return draw_inputs(module, distribution, seed)
        inputs, rng = queue.popleft()
        _set_rng(rng)
        self.used += 1
        return inputs

    def clear(self) -> None:
        """Forget what was not handed out (the set-up is done)."""
        self.model = None
        self.sets.clear()


def predraw(problem: dict[str, Any], config: Any, waiting: Callable[[], bool] = lambda: False,
            max_bytes: int | None = None) -> Predrawn | None:
    """The problem's module run, its model made and its set-up's input sets drawn on the CPU
    (``draw_plan``), in the set-up's order, before it: stops before a set when ``waiting()``
    (a message came) or when the next set (sized as the last one; the first is always drawn)
    would pass ``max_bytes`` (default ``host_budget()``). The model and the gate's sets are made
    in one strict-FP32 block, as the set-up's GateReference.build makes them, and the model's
    tensors are copied at once, as its move to the GPU copies them.
    Returns None where nothing is made ahead: a source that mentions CUDA, a process that has a
    CUDA context already, or problem code that reached for CUDA (it is stopped: CUDA's lazy
    initialisation raises while this runs).
    Raises: what running the problem's code raises (the set-up then runs a fresh module and
    reports it)."""
    import torch
    if "cuda" in problem["source"].lower() or torch.cuda.is_initialized():
        return None
    from evokernel.gate.judge import strict_fp32
    from evokernel.gate.reference import make_model
    from evokernel.problem import exec_module
    t0 = time.perf_counter()
    declared = tuple(problem["distributions"]) if problem.get("distributions") else None
    plan = draw_plan(config, declared)
    cap = host_budget() if max_bytes is None else max_bytes
    with _cuda_refused():
        module = exec_module(problem["source"], f"evokernel_problem_{problem['name']}",
                             problem["path"])
        out = Predrawn(problem, module)
        with strict_fp32():
            init_inputs, model = make_model(module)
            model._apply(lambda t: t.clone())      # what .to(device) does to each tensor
            out.model = (init_inputs, model, _rng())
            out.nbytes = sum(t.numel() * t.element_size()
                             for t in (*model.parameters(), *model.buffers()))
            stopped = _draw_sets(out, [p for p in plan if p[2]], waiting, cap)
        if not stopped:
            _draw_sets(out, [p for p in plan if not p[2]], waiting, cap)
    out.seconds = time.perf_counter() - t0
    return None if torch.cuda.is_initialized() else out


def _draw_sets(out: Predrawn, part: list[tuple[str, int, bool]], waiting: Callable[[], bool],
               cap: int) -> bool:
    """Draw ``part`` of the plan into ``out``; True when it stopped before the end."""
    from evokernel.gate.distributions import draw_inputs
    for distribution, seed, _ in part:
        if waiting() or (out.sets and out.nbytes + out.last > cap):
            return True
        inputs, out.last = _copy(draw_inputs(out.module, distribution, seed))
        out.sets[(distribution, seed)].append((inputs, _rng()))
        out.nbytes += out.last
    return False


@contextlib.contextmanager
def _cuda_refused() -> Iterator[None]:
    """CUDA's lazy initialisation raises inside (torch.cuda._lazy_init, which the Python and
    C++ paths that make a context call first), so problem code run ahead cannot make a CUDA
    context beside another problem's timing."""
    import torch

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("evokernel predraw: CUDA is not used before the set-up")
    saved = getattr(torch.cuda, "_lazy_init", None)
    if saved is not None:
        torch.cuda._lazy_init = refuse
    try:
        yield
    finally:
        if saved is not None:
            torch.cuda._lazy_init = saved
