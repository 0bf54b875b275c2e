"""Many problems, each with its candidates, at the engine's speed (issue 16):

    every candidate of every problem ──> builds, all submitted up front (one Builder)
    per GPU: problem k's worker set up ──> its candidates gated and timed as their builds end
             meanwhile the workers of the GPU's next problems are started (``spawn_ahead``)
             and, while problem k waits for a build, the next ones are set up (``setup_ahead``)

One problem at a time per GPU, as its verdicts need (a problem's reference is timed alone), but
GPUs take problems from one queue, builds never wait for a GPU, a problem's set-up overlaps the
builds of its candidates, and the next problems' worker processes (interpreter, torch and the
set-up's modules loaded; no CUDA context: ~8 s on the H200) are started before their turn. A
set-up (fp64 truths, reference timing) runs only while its GPU times nothing: timing a
reference beside another problem's candidates would measure both wrong. That is at its turn,
or earlier, while the problem before it waits for a build (on the H200 the GPU waited ~40 s for
the first builds of a 24-problem set, results/h200-2026-12-03-s18/chain/bench_suite.md). A
worker set up ahead then waits, idle, with its CUDA context and truths in GPU memory, until its
turn, and only while half the GPU's memory is still free (MIN_FREE_FOR_AHEAD); one that fails
or is let go is set up at its turn, alone.

Isolation is the local engine's: each problem has its own contained worker process
(evokernel.engine.handle), so a hang, crash or CUDA fault costs one candidate and the worker is
respawned; no candidate runs in a process that set up another problem.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from evokernel.config import EvalConfig
from evokernel.engine.evaluator import setup_message, static_check
from evokernel.engine.gpu_share import NvmlProcesses, SharedGpuGuard, free_memory_fraction
from evokernel.engine.problem_jobs import OnProblemResult, ProblemJob, ProblemOutcome
from evokernel.errors import EvokernelError, NoGPUError
from evokernel.problem import Problem
from evokernel.records import Candidate, EvalResult, Reason


#: A problem is kept set up ahead only if, once it is, at least this fraction of the GPU's memory
#: is still free (NVML), so that the workers waiting with their truths leave the candidate being
#: timed (or a respawned worker) at least half the GPU.
MIN_FREE_FOR_AHEAD = 0.5

#: Seconds a set-up ahead may take (the current problem's verdicts wait for it) before its worker
#: is killed and the problem set up at its turn, alone, with the whole set-up timeout. The longest
#: in the H200 suite bench took 23 s (results/h200-2026-12-03-s19/chain/bench_suite.md).
AHEAD_SETUP_TIMEOUT_S = 120.0

#: Verdicts after which the problem's worker was killed: its process may linger on the GPU for a
#: moment (evokernel.engine.gpu_share), so no later problem is set up ahead beside it.
_KILLED = frozenset({Reason.TIMEOUT, Reason.WORKER_CRASH, Reason.CUDA_FAULT})


@dataclasses.dataclass
class _Slot:
    """A problem a GPU took from the queue: its worker (spawned), its info once set up."""

    index: int
    handle: Any
    info: dict[str, Any] | None = None
    steps: dict[str, float] = dataclasses.field(default_factory=dict)
    retry: bool = False          # not kept set up ahead: set up at its turn, alone
    killed: bool = False         # one of its candidates got its worker killed


class ProblemSetRun:
    """One run of ``evaluate_problem_set`` (see there); ``run()`` returns the outcomes."""

    def __init__(self, jobs: Sequence[ProblemJob], config: EvalConfig, *, devices: Sequence[Any],
                 arch: str, builder: Any, make_handle: Callable[[Problem, Any], Any],
                 guard_for: Callable[[dict[str, Any]], Any],
                 on_result: OnProblemResult | None = None, warm_ahead: bool = False,
                 setup_ahead: int = 0, spawn_ahead: int = 1,
                 free_memory: Callable[[dict[str, Any]], float | None] = lambda info: None):
        self.jobs, self.config, self.devices, self.arch = list(jobs), config, list(devices), arch
        self.builder, self.make_handle, self.guard_for = builder, make_handle, guard_for
        self.on_result, self.warm_ahead = on_result, warm_ahead
        self.setup_ahead, self.free_memory = setup_ahead, free_memory
        self.spawn_ahead = max(1, spawn_ahead)
        self.builds: dict[str, Future | EvalResult] = {}
        self.t0, self.built_at = 0.0, {}     # run()'s start; candidate id -> its build's end
        self.outcomes: list[ProblemOutcome | None] = [None] * len(self.jobs)
        self.todo: queue.Queue[int] = queue.Queue()

    def run(self) -> list[ProblemOutcome]:
        self.t0 = time.perf_counter()
        for job in self.jobs:                        # every build, up front, in problem order
            for cand in job.candidates:
                if cand.id not in self.builds:
                    rejected = static_check(cand)
                    self.builds[cand.id] = rejected if rejected is not None \
                        else self.builder.submit(cand)
                    if rejected is None:
                        self.builds[cand.id].add_done_callback(lambda f, c=cand.id: self.built_at
                                                               .setdefault(c, self._since()))
        for i in range(len(self.jobs)):
            self.todo.put(i)
        threads = [threading.Thread(target=self._gpu_loop, args=(d,), daemon=True,
                                    name=f"evokernel-set-gpu{d}") for d in self.devices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [o if o is not None else ProblemOutcome(                # one per job, always
                    j.problem.name, [], {}, None, error="not evaluated: its GPU's loop failed "
                    "(see the log)") for j, o in zip(self.jobs, self.outcomes)]

    def _take(self, line: deque[_Slot], device: Any) -> bool:
        """One more problem from the queue into ``line``, its worker spawned (CPU only: its
        interpreter, torch and set-up modules; no CUDA context). A problem whose worker cannot
        even be made gets its error outcome here and the next one is taken. False when the queue
        is empty. Raises: what spawning raises (OSError); the problem is then in ``line``,
        unspawned (``start`` spawns it at its turn)."""
        while True:
            try:
                k = self.todo.get_nowait()
            except queue.Empty:
                return False
            try:
                handle = self.make_handle(self.jobs[k].problem, device)
            except Exception as e:  # noqa: BLE001 -- this problem's row says why, the rest go on
                logger.exception("problem set: no worker for {}", self.jobs[k].problem.name)
                self.outcomes[k] = ProblemOutcome(
                    self.jobs[k].problem.name, [], {}, device,
                    error=f"its GPU worker could not be made: {type(e).__name__}: {e}")
                continue
            line.append(_Slot(k, handle))
            handle.prepare()
            return True

    @staticmethod
    def _close(handle: Any) -> None:
        """Close a worker; a failure to is logged, never raised (the others must close too)."""
        if handle is None:
            return
        try:
            handle.close()
        except Exception:  # noqa: BLE001
            logger.exception("problem set: closing a GPU worker failed")

    def _gpu_loop(self, device: Any) -> None:
        """Problems from the queue, one at a time on ``device``: the next ones' workers kept
        loading (``_top_up``) from the moment the current one's set-up begins (after it, for
        the GPU's first problem, whose set-up saves the measured peaks the next workers are
        given); while the current one waits for a build (the GPU idle), later ones set up
        (``setup_ahead``)."""
        line: deque[_Slot] = deque()
        slot: _Slot | None = None
        first = True
        try:
            self._spare(line, device)
            while line:
                slot = line.popleft()
                try:
                    if not first:
                        self._top_up(line, device)
                    out = self._one_problem(slot, line, device,
                                            after_start=lambda: self._top_up(line, device))
                except Exception as e:  # noqa: BLE001 -- one problem's bug must not stop the set
                    logger.exception("problem set: {} failed", self.jobs[slot.index].problem.name)
                    out = ProblemOutcome(self.jobs[slot.index].problem.name, [], {}, device,
                                         error=f"{type(e).__name__}: {e}", steps_s=slot.steps)
                self.outcomes[slot.index] = out
                first = False
                t_close, handle, slot = time.perf_counter(), slot.handle, None
                self._close(handle)
                out.steps_s["close"] = time.perf_counter() - t_close
        except Exception:  # noqa: BLE001 -- the problems not done get run()'s error outcome
            logger.exception("problem set: the loop of GPU {} failed", device)
        finally:
            for s in ([slot] if slot is not None else []) + list(line):   # no worker left behind
                self._close(s.handle)

    def _spare(self, line: deque[_Slot], device: Any) -> bool:
        """``_take`` one more, a spawn that fails leaving it to be spawned at its turn.
        Returns whether one was taken and spawned."""
        try:
            return self._take(line, device)
        except Exception as e:  # noqa: BLE001 -- start() spawns it again, or says why not
            logger.warning("problem set: a worker could not be started ahead ({}: {})",
                           type(e).__name__, e)
            return False

    def _top_up(self, line: deque[_Slot], device: Any) -> None:
        """Keep ``spawn_ahead`` workers of ``line`` spawned and not yet set up: one took ~8 s
        to load on the H200 against ~3-4 s a problem once loaded, so one spawned ahead was not
        ready at its turn ("start" 5.6 s a problem against a 2.6 s set-up,
        results/h200-2026-12-03-s19/chain/bench_suite.md). With several GPUs a GPU holds one
        problem ahead at most, as it did before: a problem it took waits for it (behind a slow
        build, say) even while another GPU is idle, and a worker is bound to its GPU."""
        if len(self.devices) > 1:
            if not line:
                self._spare(line, device)
            return
        while sum(s.info is None for s in line) < self.spawn_ahead and self._spare(line, device):
            pass

    def _start(self, slot: _Slot, step: str, timeout_s: float | None = None) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            return slot.handle.start(timeout_s=timeout_s)
        finally:
            slot.steps[step] = time.perf_counter() - t0

    def _one_problem(self, slot: _Slot, line: deque[_Slot], device: Any,
                     after_start: Callable[[], Any]) -> ProblemOutcome:
        job, t0 = self.jobs[slot.index], time.perf_counter()
        name = job.problem.name
        try:
            if slot.handle is None:                   # its worker could not be remade ahead
                slot.handle = self.make_handle(job.problem, device)
            if slot.info is None:
                slot.info = self._start(slot, "start")
        except EvokernelError as e:                   # the problem cannot be set up
            return ProblemOutcome(name, [], {}, device, error=str(e), steps_s=slot.steps)
        finally:
            after_start()                             # whatever the set-up raised
        if self.warm_ahead:                           # its CUDA context: after this set-up
            nxt = next((s for s in line if s.info is None), None)
            if nxt is not None:
                nxt.handle.warm()
        guard = self.guard_for(slot.info)
        slot.steps.update(build_wait=0.0, ahead=0.0, verdicts=0.0)
        results = [self._judge(name, c, slot, guard, line, device) for c in job.candidates]
        built = [self.built_at.get(c.id, self._since()) for c in job.candidates
                 if not isinstance(self.builds[c.id], EvalResult)]
        return ProblemOutcome(name, results, dict(slot.info), device,
                              wall_s=time.perf_counter() - t0, steps_s=slot.steps,
                              timeline_s={"turn": t0 - self.t0, "built": max(built, default=0.0),
                                          "done": self._since()})

    def _since(self) -> float:
        return time.perf_counter() - self.t0

    def _set_up_one_ahead(self, current: _Slot, line: deque[_Slot], device: Any) -> bool:
        """Set up the first problem of ``line`` not yet set up, while ``current`` waits for a
        build and the GPU times nothing: at most ``setup_ahead`` at once, never past a problem
        that is to be set up alone (``retry``), never after one of ``current``'s workers was
        killed, and kept only if MIN_FREE_FOR_AHEAD of the GPU's memory is still free after it.
        With several GPUs only problems this GPU already took are set up (taking more would
        keep them from an idle GPU). A set-up that fails here (or passes AHEAD_SETUP_TIMEOUT_S)
        is done again at its turn. Returns whether one was set up."""
        if current.killed or sum(s.info is not None for s in line) >= self.setup_ahead:
            return False
        slot = next((s for s in line if s.info is None), None)
        if slot is None and len(self.devices) == 1 and len(line) <= self.setup_ahead:
            self._spare(line, device)
            slot = next((s for s in line if s.info is None), None)
        if slot is None or slot.retry:
            return False
        free = self.free_memory(current.info or {})
        if free is None or free < MIN_FREE_FOR_AHEAD:
            return False
        try:
            slot.info = self._start(slot, "start_ahead", timeout_s=AHEAD_SETUP_TIMEOUT_S)
            free = self.free_memory(current.info or {})
            if free is None or free < MIN_FREE_FOR_AHEAD:
                raise MemoryError(f"{free} of the GPU's memory free once set up")
        except Exception as e:  # noqa: BLE001 -- this problem's turn will say what is wrong
            logger.debug("problem set: {} not kept set up ahead ({}: {}); set up at its turn",
                         self.jobs[slot.index].problem.name, type(e).__name__, e)
            slot.info, slot.retry = None, True
            slot.steps.pop("start_ahead", None)
            self._close(slot.handle)
            slot.handle = None                  # made again at its turn if not here
            try:
                slot.handle = self.make_handle(self.jobs[slot.index].problem, device)
                slot.handle.prepare()           # loading again before its turn
            except Exception:  # noqa: BLE001 -- its turn makes or spawns it, or says why not
                pass
            return False
        return True

    def _judge(self, name: str, cand: Candidate, slot: _Slot, guard: Any, line: deque[_Slot],
               device: Any) -> EvalResult:
        """One candidate: its build's failure, or its verdict on this problem's worker. While
        its build runs, later problems are set up (``_set_up_one_ahead``). Adds to the slot's
        steps: "ahead" (setting up later problems), "build_wait" (the rest of the wait for the
        build), "verdicts" (gating and timing)."""
        build, steps, handle = self.builds[cand.id], slot.steps, slot.handle
        if isinstance(build, EvalResult):
            r = dataclasses.replace(build)
        else:
            t0 = time.perf_counter()
            while self.setup_ahead > 0 and not build.done() \
                    and self._set_up_one_ahead(slot, line, device):
                pass
            t_ahead = time.perf_counter()
            steps["ahead"] += t_ahead - t0
            try:
                b = build.result()
            except Exception as e:  # noqa: BLE001 -- a builder bug must not lose the candidate
                b = None
                r = EvalResult.failure(cand.id, Reason.BUILD_ERROR, f"builder error: {e}")
            t1 = time.perf_counter()
            steps["build_wait"] += t1 - t_ahead
            if b is not None and not b.ok:
                r = EvalResult.failure(cand.id, b.reason or Reason.BUILD_ERROR, "build failed"
                                       if b.reason is not Reason.BUILD_TIMEOUT else
                                       f"build exceeded {self.config.build_timeout_s:.0f} s",
                                       build_s=b.build_s, log=b.log, flags=tuple(b.flags))
            elif b is not None:
                v = guard.run(lambda: handle.evaluate(cand, self.config.eval_timeout_s))
                r = dataclasses.replace(v, build_s=b.build_s, flags=tuple(b.flags) + v.flags,
                                        resources=v.resources or b.resources)
                steps["verdicts"] += time.perf_counter() - t1
                slot.killed = slot.killed or r.reason in _KILLED
        if self.on_result is not None:
            self.on_result(name, r)
        return r


def evaluate_problem_set(jobs: Sequence[ProblemJob], config: EvalConfig, *,
                         devices: Sequence[int] | None = None, log_dir: Path | None = None,
                         on_result: OnProblemResult | None = None,
                         entry: str = "evokernel.engine.worker", warm_ahead: bool = False,
                         setup_ahead: int = 8, spawn_ahead: int = 3) -> list[ProblemOutcome]:
    """Build every candidate of every problem up front, then gate and time each problem's
    candidates on this host's GPUs, one problem per GPU at a time (see the module docstring).

    Args:
        jobs: the problems, each with its candidates.
        config: the evaluation config (one for all problems).
        devices: GPU indices (default: every visible GPU).
        log_dir: where worker logs go (default <cache>/logs).
        on_result: called with (problem name, EvalResult) as each verdict is ready.
        entry: the GPU worker module (tests substitute a fake one).
        warm_ahead: the next worker makes its CUDA context while the current problem's
            candidates are timed (WorkerHandle.warm); off until the bench's suite phase (mode
            together_warm) shows that harmless.
        setup_ahead: at most this many later problems set up while the current one waits for
            a build (the GPU idle), each then waiting in its worker until its turn, while half
            the GPU's memory is free (MIN_FREE_FOR_AHEAD); 0: none (8: docs/scaling.md, 7.).
        spawn_ahead: workers of later problems kept spawned (loading torch and the set-up's
            modules; no CUDA context) per GPU; at least 1 (see ``_top_up``).
    Returns: one ProblemOutcome per job, in the jobs' order; a problem that cannot be set up
        has ``error`` set and no results. Never raises for a bad candidate or problem.
    Raises: NoGPUError when no CUDA GPU is visible; SandboxError as the local engine.
    """
    import torch

    from evokernel.build.builder import Builder, device_arch, worker_env
    from evokernel.engine.handle import WorkerHandle
    from evokernel.sandbox.support import containment_for
    from evokernel.sandbox.workers import GpuWorkerJail
    if not torch.cuda.is_available():
        raise NoGPUError("evaluating a problem set needs a CUDA GPU and PyTorch sees none")
    arch, containment = device_arch(), containment_for(config)
    jailed = containment is not None and containment.mode != "none"
    devices = list(devices) if devices is not None else list(range(torch.cuda.device_count()))
    logs = log_dir or config.cache_path / "logs"

    def make_handle(problem: Problem, device: Any) -> Any:
        return WorkerHandle(setup_message(problem, config, arch), env=worker_env(),
                            device_index=device, entry=entry,
                            log_path=logs / f"worker-{problem.name}-gpu{device}.log",
                            setup_timeout_s=max(900.0, config.eval_timeout_s),
                            sandbox=GpuWorkerJail(containment, config.cache_path)
                            if jailed else None)

    def guard_for(info: dict[str, Any]) -> SharedGpuGuard:
        return SharedGpuGuard(NvmlProcesses(info.get("uuid", "")), info.get("reference_ms"),
                              policy=config.gpu_sharing, wait_s=config.gpu_wait_s)

    with Builder(config.cache_path, arch=arch, timeout_s=config.build_timeout_s,
                 workers=config.build_workers, trim_headers=config.trim_headers,
                 sandbox=containment) as builder:
        return ProblemSetRun(jobs, config, devices=devices, arch=arch, builder=builder,
                             make_handle=make_handle, guard_for=guard_for, on_result=on_result,
                             warm_ahead=warm_ahead, setup_ahead=setup_ahead,
                             spawn_ahead=spawn_ahead, free_memory=lambda
                             info: free_memory_fraction(info.get("uuid", ""))).run()
