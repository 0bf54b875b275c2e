"""Fidelity: each seed kernel re-measured in separate evaluators (the speedup's spread), and
against ``triton.testing.do_bench`` in a separate process
(``python -m evokernel.bench _do_bench``)."""
from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from loguru import logger

from evokernel.bench.deps import (BenchDeps, close_all, bench_eval_config, open_evaluators,
                                  try_evaluate)
from evokernel.bench.plan import (MAX_DO_BENCH_DISAGREEMENT, MAX_SPEEDUP_SPREAD, BenchPlan,
                                  fidelity_groups)
from evokernel.bench.report import write_report_files, fidelity_markdown
from evokernel.bench.throughput import trials_in_detail
from evokernel.config import TimingConfig
from evokernel.errors import ConfigError
from evokernel.records import Candidate


def spread(values: Sequence[float]) -> float:
    """max / min - 1 of positive values (0.02 = 2%). Raises ValueError if empty or not > 0."""
    if not values or min(values) <= 0:
        raise ValueError(f"spread needs positive values, got {list(values)}")
    return max(values) / min(values) - 1.0


def rel_diff(a: float, b: float) -> float:
    """a / b - 1 (signed; 0.03 = a is 3% above b). Raises ValueError if b <= 0."""
    if not b > 0:
        raise ValueError(f"rel_diff: b must be > 0, got {b}")
    return a / b - 1.0


@dataclass(frozen=True)
class FidelityRow:
    """One problem's fidelity: its seed kernel in every run, and do_bench's view of it.

    runs: per run {run, verdict, reason, reference_ms, candidate_ms, speedup, error}.
    speedup_spread, candidate_ms_spread, reference_ms_spread: max / min - 1 over accepted runs.
    speedup_median: median speedup of the accepted runs.
    do_bench: {reference_ms, candidate_ms, speedup, inproc_reference_ms, inproc_candidate_ms,
        inproc_speedup, error} from the separate process.
    agreement: speedup_median / do_bench speedup - 1; candidate_ms_agreement: median candidate
        ms / do_bench candidate ms - 1; inproc_agreement: evokernel's method in the do_bench
        process against do_bench there (a method difference, not a process one).
    spread_ok, agreement_ok: within MAX_SPEEDUP_SPREAD / MAX_DO_BENCH_DISAGREEMENT (None:
        not measurable).
    """

    problem: str
    runs: tuple[dict[str, Any], ...]
    speedup_median: float | None
    speedup_spread: float | None
    candidate_ms_spread: float | None
    reference_ms_spread: float | None
    do_bench: dict[str, Any]
    agreement: float | None
    candidate_ms_agreement: float | None
    inproc_agreement: float | None
    spread_ok: bool | None
    agreement_ok: bool | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["runs"] = list(self.runs)
        return d


def fidelity_row(problem: str, runs: Sequence[Mapping[str, Any]],
                 do_bench: Mapping[str, Any] | None) -> FidelityRow:
    """Combine one problem's runs (dicts as in FidelityRow.runs) with its do_bench dict."""
    ok = [r for r in runs if r.get("verdict") == "accept" and r.get("speedup")]
    notes = []
    if len(ok) < len(runs):
        notes.append(f"{len(runs) - len(ok)} of {len(runs)} runs not accepted")

    def sp(key: str) -> float | None:
        vals = [float(r[key]) for r in ok if r.get(key)]
        return spread(vals) if len(vals) >= 2 else None

    med = statistics.median(float(r["speedup"]) for r in ok) if ok else None
    cand_med = statistics.median(float(r["candidate_ms"]) for r in ok) if ok else None
    db = dict(do_bench or {})
    agree = cand_agree = inproc = None
    if db.get("speedup") and med:
        agree = rel_diff(med, float(db["speedup"]))
    if db.get("candidate_ms") and cand_med:
        cand_agree = rel_diff(cand_med, float(db["candidate_ms"]))
    if db.get("inproc_speedup") and db.get("speedup"):
        inproc = rel_diff(float(db["inproc_speedup"]), float(db["speedup"]))
    if db.get("error"):
        notes.append(f"do_bench: {str(db['error']).splitlines()[-1][:200]}")
    elif not db:
        notes.append("do_bench not run")
    s = sp("speedup")
    spread_ok = None if s is None or len(ok) < len(runs) else s <= MAX_SPEEDUP_SPREAD
    if len(ok) < len(runs) and runs:
        spread_ok = False
    return FidelityRow(
        problem=problem, runs=tuple(dict(r) for r in runs), speedup_median=med,
        speedup_spread=s, candidate_ms_spread=sp("candidate_ms"),
        reference_ms_spread=sp("reference_ms"), do_bench=db, agreement=agree,
        candidate_ms_agreement=cand_agree, inproc_agreement=inproc, spread_ok=spread_ok,
        agreement_ok=None if agree is None else abs(agree) <= MAX_DO_BENCH_DISAGREEMENT,
        note="; ".join(notes))


def _failed_run(run: int, error: str) -> dict[str, Any]:
    """A fidelity run (0-based ``run``) that measured nothing, as in FidelityRow.runs."""
    return {"run": run + 1, "verdict": None, "reason": None, "error": error}


def fidelity_phase(plan: BenchPlan, cache: Path, deps: BenchDeps,
                    report: dict[str, Any]) -> dict[str, Any]:
    """Seed kernels in ``fidelity_runs`` separate evaluators each, then the do_bench process.

    Evaluators are set up a group of whole runs at a time (``setup_concurrency``), used one
    after another (nothing else runs on the GPU meanwhile), and closed before the next group, so
    GPU memory holds at most one group (a softmax worker alone holds ~13 GiB of inputs and
    float64 truths). Seed kernels not yet in the cache build while the first group sets up.
    """
    problems = [deps.load_problem(p) for p in plan.fidelity_problems]
    missing = [p.name for p in problems if not p.seed_source]
    if missing:
        raise ConfigError(f"fidelity: no seed kernel for {', '.join(missing)}")
    seeds = {p.name: Candidate(source=p.seed_source, idea="bench: seed kernel") for p in problems}
    cfg = bench_eval_config(plan, cache)
    prebuilt: list[Any] = []
    prebuild_error: list[str] = []

    def prebuild() -> None:
        try:
            prebuilt.extend(deps.prebuild(list(seeds.values()), cfg))
        except Exception as e:  # noqa: BLE001 - the evaluators then build what is missing
            logger.error("fidelity: prebuilding the seed kernels failed: {}", e)
            prebuild_error.append(f"{type(e).__name__}: {e}")

    t0 = deps.now()
    builder = threading.Thread(target=prebuild, name="bench-prebuild", daemon=True)
    builder.start()        # the seeds build on the CPU while the first group sets up
    runs: dict[str, list[dict[str, Any]]] = {p.name: [] for p in problems}
    setup_s, prep_s = 0.0, None
    for group in fidelity_groups(plan.fidelity_runs, len(problems), plan.setup_concurrency):
        evs, s = open_evaluators([(problems[p], cfg) for _, p in group], deps,
                                  plan.setup_concurrency)
        setup_s += s
        if prep_s is None:
            builder.join()
            prep_s = deps.now() - t0
        try:
            for (run, p), ev in zip(group, evs):
                name = problems[p].name
                runs[name].append(_seed_run(run, name, ev, seeds[name], report))
        finally:
            close_all(evs)
    builder.join()
    head = _fidelity_head(plan, setup_s, prep_s, [
        {"problem": p.name, "ok": getattr(b, "ok", None), "build_s": getattr(b, "build_s", None),
         "cache_hit": getattr(b, "cache_hit", None)} for p, b in zip(problems, prebuilt)],
        prebuild_error[0] if prebuild_error else None)
    partial = dict(head, problems=[fidelity_row(p.name, runs[p.name], None).to_dict()
                                   for p in problems])
    write_report_files(Path(plan.results_dir), "fidelity", partial, fidelity_markdown(partial))
    spec = {"cache_dir": str(cache), "warmup_ms": plan.do_bench_warmup_ms,
            "rep_ms": plan.do_bench_rep_ms, "rounds": plan.do_bench_rounds,
            "hide_host_ms": plan.hide_host_ms,
            "problems": [{"name": p.name, "path": str(p.path), "source": p.source,
                          "seed_source": p.seed_source} for p in problems]}
    t1 = deps.now()
    db = deps.do_bench(spec)
    db_s = deps.now() - t1
    per = db.get("problems", {}) if isinstance(db, dict) else {}
    rows = [fidelity_row(p.name, runs[p.name],
                         per.get(p.name) or ({"error": db["error"]} if db.get("error") else None))
            for p in problems]
    return dict(head, do_bench_s=db_s, do_bench_versions=db.get("versions", {}),
                problems=[r.to_dict() for r in rows])


def _seed_run(run: int, name: str, ev: Any, seed: Candidate,
              report: dict[str, Any]) -> dict[str, Any]:
    """Fidelity run ``run`` (0-based) of problem ``name``'s seed in its own evaluator ``ev`` (or
    the exception that kept it from starting), as in FidelityRow.runs; the first evaluator's
    device info goes into ``report``."""
    if isinstance(ev, BaseException):
        return _failed_run(run, f"evaluator failed to start: {ev}")
    report.setdefault("device", dict(getattr(ev, "info", {}) or {}))
    r, error = try_evaluate(lambda: ev.evaluate([seed])[0], f"fidelity run {run + 1}: {name}")
    if error:
        return _failed_run(run, error)
    logger.info("fidelity run {}: {} {} speedup {:.4f}", run + 1, name, r.reason.value,
                r.speedup)
    return {"run": run + 1, "verdict": r.verdict.value, "reason": r.reason.value,
            "reference_ms": r.reference_ms, "candidate_ms": r.candidate_ms,
            "speedup": r.speedup, "trials": trials_in_detail(r.detail), "eval_s": r.eval_s}


def _fidelity_head(plan: BenchPlan, setup_s: float, prep_s: float | None,
                   prebuild: list[dict[str, Any]], prebuild_error: str | None) -> dict[str, Any]:
    """The fidelity report's fields other than its problems (set-up and build times in s)."""
    return {"runs": plan.fidelity_runs, "hide_host_ms": plan.hide_host_ms,
            "setup_s": setup_s, "prepare_s": prep_s, "prebuild": prebuild,
            "prebuild_error": prebuild_error,
            "do_bench_warmup_ms": plan.do_bench_warmup_ms, "do_bench_rep_ms": plan.do_bench_rep_ms,
            "do_bench_rounds": plan.do_bench_rounds, "skipped": []}


def run_do_bench_process(spec: dict[str, Any], results_dir: Path,
                         timeout_s: float = 300.0) -> dict[str, Any]:
    """Run :func:`do_bench_main` in a fresh Python process (environment without credentials:
    it runs the kernels' module code). Returns its JSON, or {"error": ...}."""
    from evokernel.build.builder import worker_env
    results_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = results_dir / "do_bench_spec.json", results_dir / "do_bench_out.json"
    log_path = results_dir / "do_bench.log"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    env = dict(worker_env(), PYTHONUNBUFFERED="1")
    try:
        with open(log_path, "wb") as log:
            proc = subprocess.run([sys.executable, "-m", "evokernel.bench", "_do_bench",
                                   str(spec_path), str(out_path)], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"the do_bench process ran past {timeout_s:.0f} s (log: {log_path})"}
    finally:
        spec_path.unlink(missing_ok=True)
    if not out_path.is_file():
        tail = log_path.read_text(errors="replace")[-2000:]
        return {"error": f"the do_bench process exited with {proc.returncode} and no result:\n"
                         f"{tail}"}
    return json.loads(out_path.read_text())


def measure_do_bench(problem: Mapping[str, str], *, cache_dir: Path, arch: str, device: Any,
                     bench: Callable[..., float], warmup_ms: float, rep_ms: float, rounds: int,
                     timing: TimingConfig = TimingConfig(), flush: Any = None) -> dict[str, Any]:
    """One problem in the do_bench process: load the reference and the seed kernel's module
    (load_candidate: from the warm cache), build both models as the GPU worker does (seed 0,
    the reference's weights), draw the worker's timing inputs (problem distribution, seeds
    1000-1002) and, under strict FP32 and no_grad, time them

    * with ``bench`` (triton.testing.do_bench): ``rounds`` rounds of reference then candidate on
      set 0, each call ``bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")``; the
      median over rounds is kept;
    * with evokernel.timing.interleaved.time_interleaved (the worker's method, rotating the 3 sets), with
      ``timing``;
    * on CUDA, with the same loop and ``hide_host_ms = 0``, the host time of each call counted
      (the "visible" keys), when ``timing`` hides it: the size of what hiding changes.

    problem: {"name", "path", "source", "seed_source"}. device: a torch device (CPU works for
    tests, with a host clock and no flush). Returns: {"reference_ms", "candidate_ms", "speedup",
    "reference_rounds_ms", "candidate_rounds_ms", "inproc_reference_ms", "inproc_candidate_ms",
    "inproc_speedup", "inproc_trials", "inproc_host_reference_ms", "inproc_host_candidate_ms"}
    in milliseconds, and with the host time counted "visible_reference_ms",
    "visible_candidate_ms", "visible_speedup".
    Raises: whatever the modules or the timers raise.
    """
    import torch

    from evokernel.gate.distributions import draw_inputs
    from evokernel.build.cache import load_candidate
    from evokernel.gate.judge import align_parameters, strict_fp32
    from evokernel.problem import exec_module
    from evokernel.timing.interleaved import time_interleaved
    name = problem["name"]
    mod = exec_module(problem["source"], f"bench_problem_{name}", problem["path"])
    cand_mod = load_candidate(problem["seed_source"], f"bench_seed_{name}", Path(cache_dir), arch)
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    torch.manual_seed(0)
    ref = mod.Model(*init).to(device)
    torch.manual_seed(0)
    new = cand_mod.ModelNew(*init).to(device)
    align_parameters(ref, new)
    sets = [[x.to(device) if isinstance(x, torch.Tensor) else x
             for x in draw_inputs(mod, "problem", 1000 + i)] for i in range(3)]
    models = {"reference": ref, "candidate": new}
    per: dict[str, list[float]] = {k: [] for k in models}
    with strict_fp32(), torch.no_grad():
        for _ in range(rounds):
            for key, model in models.items():         # reference, then candidate
                per[key].append(float(bench(lambda: model(*sets[0]), warmup=warmup_ms,
                                            rep=rep_ms, return_mode="median")))
        calls = {k: (lambda i, m=m: m(*sets[i % 3])) for k, m in models.items()}
        stats = time_interleaved(calls, timing, device=device, flush=flush)
        visible = (time_interleaved(calls, dataclasses.replace(timing, hide_host_ms=0.0),
                                    device=device, flush=flush)
                   if device.type == "cuda" and timing.hide_host_ms > 0 else None)
    ref_ms, cand_ms = statistics.median(per["reference"]), statistics.median(per["candidate"])
    ek_ref, ek_cand = stats["reference"].median_ms, stats["candidate"].median_ms
    out = {"reference_ms": ref_ms, "candidate_ms": cand_ms, "speedup": ref_ms / cand_ms,
           "reference_rounds_ms": per["reference"], "candidate_rounds_ms": per["candidate"],
           "inproc_reference_ms": ek_ref, "inproc_candidate_ms": ek_cand,
           "inproc_speedup": ek_ref / ek_cand, "inproc_trials": stats["candidate"].trials,
           "inproc_host_reference_ms": stats["reference"].host_median_ms,
           "inproc_host_candidate_ms": stats["candidate"].host_median_ms}
    if visible:
        v_ref, v_cand = visible["reference"].median_ms, visible["candidate"].median_ms
        out.update(visible_reference_ms=v_ref, visible_candidate_ms=v_cand,
                   visible_speedup=v_ref / v_cand)
    return out


def do_bench_main(spec_path: str, out_path: str) -> int:
    """The do_bench process (``python -m evokernel.bench _do_bench SPEC OUT``): runs
    :func:`measure_do_bench` on GPU 0 for each problem of the spec ({"cache_dir", "arch",
    "warmup_ms", "rep_ms", "rounds", "hide_host_ms", "problems": [...]}) and writes
    {"versions": {...}, "problems": {name: {...} or {"error": ...}}} (or {"error": ...} without
    triton) to OUT.
    Returns 0 whenever OUT was written."""
    import traceback

    import torch

    from evokernel.build.builder import device_arch
    from evokernel.timing.clocks import L2Flusher
    spec = json.loads(Path(spec_path).read_text())
    out: dict[str, Any] = {"versions": {"torch": torch.__version__}, "problems": {}}

    def fail(error: str) -> int:
        out["error"] = error
        Path(out_path).write_text(json.dumps(out))
        return 0

    try:
        import triton
        from triton.testing import do_bench
        out["versions"]["triton"] = triton.__version__
    except ImportError as e:
        return fail(f"triton is not importable here: {e}")
    try:
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
        flusher = L2Flusher(device)
    except Exception as e:  # noqa: BLE001 - no usable GPU here: say so in the result
        return fail(f"no usable CUDA device in the do_bench process: {type(e).__name__}: {e}")
    for p in spec["problems"]:
        try:
            got = measure_do_bench(p, cache_dir=Path(spec["cache_dir"]),
                                   arch=spec.get("arch") or device_arch(), device=device,
                                   bench=do_bench, warmup_ms=spec["warmup_ms"],
                                   rep_ms=spec["rep_ms"], rounds=int(spec["rounds"]),
                                   flush=flusher, timing=TimingConfig(
                                       hide_host_ms=float(spec["hide_host_ms"])))
            out["problems"][p["name"]] = got
            print(f"{p['name']}: do_bench {got['reference_ms']:.4f} / {got['candidate_ms']:.4f} "
                  f"ms, evokernel's timing {got['inproc_reference_ms']:.4f} / "
                  f"{got['inproc_candidate_ms']:.4f} ms", flush=True)
        except Exception as e:  # noqa: BLE001 - one problem's failure is its row's error
            traceback.print_exc()
            out["problems"][p["name"]] = {"error": f"{type(e).__name__}: {e}"[:1000]}
        torch.cuda.empty_cache()
    Path(out_path).write_text(json.dumps(out, indent=1))
    return 0
