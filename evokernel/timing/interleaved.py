"""Timing of the reference and the candidate: interleaved trials, L2 flush, median with a CI.

Method (docs/architecture.md, stage 7 of "The evaluation, as stages"):

* every trial flushes L2 (writes a buffer of 2x its size), then synchronizes the whole device,
  queues the spin described below, records a start event, calls the function, records an end
  event and synchronizes the whole device again before reading the elapsed time;
* a whole-device time of the same trial is kept too: work moved to a side stream escapes the
  events but not the device-wide synchronize, see :func:`side_stream_suspect`;
* warm-up is a time budget (as in ``triton.testing.do_bench``), trials are interleaved A B A B ...
  so drift (clocks, temperature) hits every function alike, and rounds of trials are added until
  the 95% CI of every median is within ``TimingConfig.target_rel_ci`` of it.

By default (``TimingConfig.hide_host_ms = 1``) a trial queues a spin that fills every SM for
1 ms (:class:`evokernel.timing.spin.DeviceSpin`) before the start event, so the host's Python,
dispatch and launches overlap the spin and the event time holds the GPU's work, as in
``triton.testing.do_bench``. The trial's second time is then the GPU clock's, from the start event
to an event recorded after the device-wide synchronize, less that path's calibrated latency, plus
the spin's deviation from its length (see :func:`side_stream_suspect`). With ``hide_host_ms = 0``
the device is idle when the start event is recorded, so an event time also includes the call's
host time (an empty call reads ~0.006 ms on an H200, the layernorm seed +26 us, cuDNN's conv2d
+55 us). That host time varies from process to process; it is why evokernel's speedups differed
from do_bench's by up to 6.6% on an H200 (results/h200-2026-11-30-s3), and why the spin is the
default.

The clocks (CUDA events with the whole-device time, the host clock, the L2 flush) are in
evokernel.timing.clocks, which binds the timer functions at import.
"""
from __future__ import annotations

import gc
import math
import statistics
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import torch
from loguru import logger

from evokernel.config import TimingConfig
from evokernel.timing.clocks import Clock, L2Flusher, default_clock


#: side_stream_suspect's rule: host median > FACTOR x event median + SLACK_MS.
SIDE_STREAM_FACTOR = 1.2
SIDE_STREAM_SLACK_MS = 0.05


@dataclass(frozen=True)
class TimingStats:
    """Trials of one function.

    times_ms: raw CUDA-event times of each trial, milliseconds, unrounded, in trial order.
    host_times_ms: the whole device's time of the same trials, milliseconds: the host's wall
        time from a device synchronize before the start event to one after the end event, or,
        with ``TimingConfig.hide_host_ms > 0``, the GPU clock's from the start event to an event
        recorded after that synchronize, less its calibrated latency, plus the spin's
        deviation (:meth:`evokernel.timing.spin.DeviceSpin.whole_device_ms`).
    median_ms: median of ``times_ms``.
    ci_low_ms, ci_high_ms: distribution-free 95% confidence interval of that median
        (:func:`median_ci`); -inf / inf when there are too few trials to bound it (n <= 5).
    trials: number of trials (``len(times_ms)``).
    """

    times_ms: tuple[float, ...]
    host_times_ms: tuple[float, ...]
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    trials: int

    @classmethod
    def from_times(cls, times_ms: Sequence[float], host_times_ms: Sequence[float],
                   confidence: float = 0.95) -> "TimingStats":
        """Stats of raw times (ms). Raises ValueError if empty or the lengths differ."""
        if len(times_ms) != len(host_times_ms):
            raise ValueError(f"{len(times_ms)} event times but {len(host_times_ms)} host times")
        low, high = median_ci(times_ms, confidence)
        return cls(times_ms=tuple(float(t) for t in times_ms),
                   host_times_ms=tuple(float(t) for t in host_times_ms),
                   median_ms=float(statistics.median(times_ms)), ci_low_ms=low, ci_high_ms=high,
                   trials=len(times_ms))

    @property
    def host_median_ms(self) -> float:
        """Median of ``host_times_ms``."""
        return float(statistics.median(self.host_times_ms))

    @property
    def excess_ms(self) -> tuple[float, ...]:
        """Each trial's whole-device time less its event time (ms), in trial order."""
        return tuple(h - e for h, e in zip(self.host_times_ms, self.times_ms))

    @property
    def rel_ci(self) -> float:
        """Relative half-width of the CI: max(median - low, high - median) / median (inf if
        unbounded or the median is 0)."""
        half = max(self.median_ms - self.ci_low_ms, self.ci_high_ms - self.median_ms)
        return half / self.median_ms if self.median_ms > 0 and math.isfinite(half) else math.inf


def _median_ci_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """1-based ranks (k, n - k + 1) of the order-statistic CI of the median, or None if even
    (1, n) covers less than ``confidence``. Exact binomial arithmetic on integers."""
    tail = Fraction(1 - confidence) / 2          # allowed probability in each tail
    limit = tail * 2 ** n                        # compare sum C(n, i) with tail * 2^n exactly
    cum, term, j = 0, 1, -1                      # term = C(n, j + 1)
    while j + 1 < n and cum + term <= limit:
        cum += term
        j += 1
        term = term * (n - j) // (j + 1)
    # j = largest index with P(B <= j) <= tail, B ~ Binomial(n, 1/2); -1 if none.
    if j < 0:
        return None
    k = j + 1
    return k, n - k + 1


def median_ci(times: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval of the median, from order statistics.

    With x_(1) <= ... <= x_(n) and B ~ Binomial(n, 1/2), the interval [x_(k), x_(n-k+1)] covers
    the population median with probability >= 1 - 2 P(B <= k - 1) for any continuous
    distribution; k is the largest rank with P(B <= k - 1) <= (1 - confidence) / 2, computed with
    exact binomial sums. Source: W. J. Conover, Practical Nonparametric Statistics, 3rd ed.
    (1999), § 3.2, confidence interval for a quantile (e.g. n = 20 gives ranks 6 and 15 at 95%).

    Inputs: times (any units; the result has the same units), confidence in (0, 1).
    Returns: (low, high); (-inf, inf) when n is too small for any order-statistic interval to
        reach ``confidence`` (n <= 5 at 95%).
    Raises: ValueError if ``times`` is empty, holds a NaN, or ``confidence`` is not in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xs = sorted(float(t) for t in times)
    if not xs:
        raise ValueError("median_ci of no times")
    if any(math.isnan(x) for x in xs):
        raise ValueError("median_ci: times contain NaN")
    ranks = _median_ci_ranks(len(xs), confidence)
    if ranks is None:
        return -math.inf, math.inf
    k, k_high = ranks
    return xs[k - 1], xs[k_high - 1]


def side_stream_suspect(stats: TimingStats, *calibrations: TimingStats,
                        factor: float = SIDE_STREAM_FACTOR,
                        slack_ms: float = SIDE_STREAM_SLACK_MS) -> bool:
    """True if the whole-device time is much larger than the event-timed one.

    With ``calibrations`` (the stats of calls timed interleaved with ``stats``, trial for trial:
    an empty call, :func:`time_interleaved`'s ``probes``, and the reference), each trial's excess
    ``host - event`` is compared with theirs, measured beside it: suspect when the lower quartile
    of the candidate's excesses exceeds the largest of their lower quartiles by more than
    ``slack_ms + (factor - 1) * median_ms``. Use it only when :func:`host_quiet` holds. The done-event latency, the host's wake-up and the
    spin's start, which host load stretches (to a p90 of 3.9 ms with 16 busy loops on an H200's
    16 cores, results/h200-2026-12-01-s5), only ever add time, and they do so to both calls: a
    lower quartile moves only once three quarters of the trials are delayed, while work hidden
    on another stream adds to every trial of the candidate. This is the second signal: the first
    is the traced call (evokernel.engine.stages.Kernels), which host load cannot move.

    Without ``idle`` the old rule applies to the medians alone, with nothing calibrated beside it:

    Rule: ``host_median_ms > factor * median_ms + slack_ms`` (defaults 1.2 and 0.05 ms).
    With ``hide_host_ms = 0`` the whole-device time is the host's wall time: the events are
    recorded on the current stream while the host waits for the whole device, so work
    launched on another stream (and not joined back) is counted by the host only. Otherwise the
    two differ by a near-constant: one event-record call and the synchronize's wake-up (~10 us),
    which ``slack_ms`` covers; the call's own host time is inside both, because the device is
    idle when the start event is recorded. Measured on an H200 (torch 2.11): host - event
    medians of 0.012 ms for calls touching <= 128 MB and 0.02-0.06 ms for 1-2 GB streams
    (90th percentiles <= 0.055 ms), so the rule keeps >= 0.05 ms + 20% of headroom.
    A side stream that hides a fraction f of the work makes host / event = 1 / (1 - f), so the
    rule flags f > 1/6 of the work on calls longer than ~0.3 ms (the slack dominates below
    that). Work that shares the GPU with the main stream's kernels (both fill the SMs) delays
    them too and is largely inside the event time already.
    With ``hide_host_ms > 0`` the second time is the GPU clock's, from the start event to an
    event recorded after the device-wide synchronize, less the calibrated latency of that path
    (``DeviceSpin.done_gap_ms``, 0.04-0.06 ms on an H200), plus the spin's deviation from its
    length (evokernel.timing.spin.spin_trial). The call's host time is in neither. Side-stream
    work shows in the second only: either after the start event, or as a delayed spin. Before
    the latency was subtracted, legitimate kernels of 0.04-0.07 ms on an H200 read 0.06 ms more
    and were rejected (session 4, call 1).
    Inputs: stats of one function, optionally the idle probe's; factor (>= 1) and slack_ms (ms).
    Returns: True if the candidate should be rejected as ``Reason.SIDE_STREAM``.
    """
    if not calibrations:
        return stats.host_median_ms > factor * stats.median_ms + slack_ms
    base = max(0.0, *(lower_quartile(c.excess_ms) for c in calibrations))
    return lower_quartile(stats.excess_ms) - base > slack_ms + (factor - 1.0) * stats.median_ms


def lower_quartile(values: Sequence[float]) -> float:
    """The 25th percentile of ``values`` (the order statistic at rank floor((n - 1) / 4) + 1).
    Raises: ValueError if ``values`` is empty."""
    xs = sorted(values)
    if not xs:
        raise ValueError("lower_quartile of no values")
    return xs[(len(xs) - 1) // 4]


def upper_quartile(values: Sequence[float]) -> float:
    """The 75th percentile of ``values`` (the order statistic at rank ceil(3 (n - 1) / 4) + 1).
    Raises: ValueError if ``values`` is empty."""
    xs = sorted(values)
    if not xs:
        raise ValueError("upper_quartile of no values")
    return xs[-1 - (len(xs) - 1) // 4]


#: The host counts as quiet during a measurement when the excesses (whole-device time less event
#: time) of the calls timed beside the candidate stay within this of their lower quartile in
#: three trials of four (ms). On an idle H200 host they spread by ~0.03 ms; with 16 busy loops on
#: its 16 cores, p90 3.9 ms (results/h200-2026-12-01-s5/call1).
QUIET_SPREAD_MS = 0.1


def host_quiet(*calibrations: TimingStats) -> bool:
    """Whether the host was quiet while these stats were measured (:data:`QUIET_SPREAD_MS`): the
    condition under which the whole-device comparison of :func:`side_stream_suspect` may decide
    a verdict. Under load a call's excess grew by milliseconds while an empty call timed beside
    it did not (results/h200-2026-12-01-s5/call2), so no calibration beside the measurement
    makes the comparison safe then; the traced call decides alone."""
    return all(upper_quartile(c.excess_ms) - lower_quartile(c.excess_ms) <= QUIET_SPREAD_MS
               for c in calibrations)


def warm_up(fn: Callable[[int], object], warmup_ms: float, clock: Clock) -> int:
    """Call ``fn(0), fn(1), ...`` (waiting for the device after each) until ``warmup_ms`` of
    wall time has passed, and at least twice. Returns the number of calls."""
    t0 = clock.now_s()
    calls = 0
    while calls < 2 or (clock.now_s() - t0) * 1e3 < warmup_ms:
        clock.run(lambda i=calls: fn(i))
        calls += 1
    return calls


def time_interleaved(fns: Mapping[str, Callable[[int], object]], config: TimingConfig, *,
                     device: torch.device | int | str | None = None,
                     clock: Clock | None = None,
                     flush: L2Flusher | None = None,
                     probes: Mapping[str, Callable[[int], object]] | None = None
                     ) -> dict[str, TimingStats]:
    """Time several functions against each other, interleaved.

    Inputs:
        fns: name -> function of the trial index (0, 1, ...); callers use the index to rotate
            input sets, so an output cached across calls is not reused. Typically
            {"reference": ..., "candidate": ...}.
        config: warmup_ms (warm-up budget per function, at least 2 calls), min_trials,
            max_trials, target_rel_ci, max_time_s, hide_host_ms (default clock only).
        device: the CUDA device for the default clock (None: current device, or the host clock
            when CUDA is unavailable).
        clock: a :class:`Clock`; default :func:`default_clock` (device, flush).
        flush: an L2Flusher to reuse (saves allocating 2x L2 per call); ignored with ``clock``.
        probes: name -> function timed in every round after ``fns``, the same way, but left out
            of the stopping rule (an empty call whose times calibrate the side-stream rule
            beside the measurement, :func:`side_stream_suspect`); not warmed up.
    Procedure: warm up each function in turn; then trial i calls fn_1(i), fn_2(i), ... in the
    mapping's order (A B A B ...). After ``min_trials``, and then after each round (the count
    grows by half, at least 10), stop as soon as every function's median has a 95% CI within
    ``target_rel_ci`` (relative half-width, :attr:`TimingStats.rel_ci`), or at ``max_trials``,
    or once ``max_time_s`` of trial wall time (warm-up excluded) has passed; at least one
    trial per function is always taken. Garbage collection is off during the trials.
    Returns: name -> TimingStats of every function and probe (all have the same number of
        trials).
    Raises: ValueError if ``fns`` is empty or holds a non-callable; whatever a function raises
        (e.g. torch's RuntimeError/AcceleratorError on a kernel fault) propagates unchanged.
    """
    if not fns:
        raise ValueError("time_interleaved: no functions")
    bad = [name for name, fn in fns.items() if not callable(fn)]
    if bad:
        raise ValueError(f"time_interleaved: not callable: {bad}")
    clock = clock if clock is not None else default_clock(device, flush, config.hide_host_ms)
    names = list(fns)
    probes = dict(probes or {})
    clash = sorted(set(probes) & set(fns))
    if clash or any(not callable(p) for p in probes.values()):
        raise ValueError(f"time_interleaved: probes must be callables named apart from fns "
                         f"({clash or 'not callable'})")
    everything = {**fns, **probes}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for name in names:
            calls = warm_up(fns[name], config.warmup_ms, clock)
            logger.debug("warm-up {}: {} calls", name, calls)
        events: dict[str, list[float]] = {n: [] for n in everything}
        hosts: dict[str, list[float]] = {n: [] for n in everything}
        t0 = clock.now_s()
        trial, target, out_of_time = 0, config.min_trials, False
        while True:
            while trial < target and not out_of_time:
                for name, fn in everything.items():
                    ev_ms, host_ms = clock.trial(lambda f=fn, i=trial: f(i))
                    events[name].append(ev_ms)
                    hosts[name].append(host_ms)
                trial += 1
                out_of_time = clock.now_s() - t0 >= config.max_time_s
            stats = {n: TimingStats.from_times(events[n], hosts[n]) for n in everything}
            converged = all(stats[n].rel_ci <= config.target_rel_ci for n in names)
            if converged or out_of_time or trial >= config.max_trials:
                break
            target = min(config.max_trials, max(trial + 10, math.ceil(trial * 1.5)))
    finally:
        if gc_was_enabled:
            gc.enable()
    if not converged:
        why = "max_time_s" if out_of_time else "max_trials"
        logger.warning("timing stopped at {} ({} trials) before the CI target {:.3g}: {}", why,
                       trial, config.target_rel_ci,
                       {n: round(stats[n].rel_ci, 4) for n in names})
    return stats
