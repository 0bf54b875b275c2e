"""Running the bench: the phases in order within the budget (:func:`run_bench`), and the GPU
machine's dependencies (:func:`cuda_deps`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from loguru import logger

from evokernel.bench.deps import BenchDeps, checked_cache_dir, WallClock, fresh_dir
from evokernel.bench.fidelity import fidelity_phase, run_do_bench_process
from evokernel.bench.plan import (FAULTS_EVIDENCE, FAULTS_TEST, NVRTC_PHASES, BenchPlan,
                                  Variant, engine_build_workers, estimate_wall_s,
                                  throughput_variants)
from evokernel.bench.report import (load_report, write_report_files, faults_markdown, fidelity_markdown,
                                    summary_table, throughput_markdown)
from evokernel.bench.throughput import (PhaseStats, earlier_phases, sequential_phase,
                                        throughput_phase, throughput_targets)
from evokernel.config import EvalConfig
from evokernel.errors import ConfigError, NoGPUError
from evokernel.records import Candidate

NO_GPU_MESSAGE = (
    "evokernel bench: measuring the evaluation engine needs a CUDA GPU, and PyTorch sees none "
    "here.\n  It builds, gates and times kernels on the GPU (an H200 with 16 cores is what its "
    "time estimate assumes).\n  Without a GPU: `evokernel bench --dry-run` prints the plan and "
    "its time estimate;\n  `make test` runs the CPU tests (tests/bench/test_bench.py covers the "
    "bench's logic with fakes).")


def run_bench(plan: BenchPlan, deps: BenchDeps) -> dict[str, Any]:
    """Run the plan's phases in order (cold, warm, nvrtc_cold, nvrtc_warm, fidelity, sequential,
    faults), adapting the later ones to the budget, and write bench_*.json/.md under
    plan.results_dir after each. The NVRTC phases measure the NVRTC twins of the same tune
    variants (evokernel.nvrtc; ``seeds/nvrtc/``) in a cache of their own (``WORK_DIR/nvrtc``).

    Budget: estimates (CostModel) are scaled by how much slower than estimated the cold phase
    was (``slowdown``, 0.5-3). warm, fidelity and faults are skipped when what is left is below
    their estimate (x0.8 for fidelity and faults); the sequential phase measures candidates one
    by one while the next one (its measured cost so far) still fits before the time reserved
    for faults, at least one when ~80% of one candidate's estimate is left.
    Returns: {"throughput", "fidelity", "faults": report dicts (None when none of a benchmark's
        phases ran), "estimate": seconds per phase, "elapsed_s", "table": the summary table}.
    Raises: ConfigError for a work folder it may not delete or a problem without a seed kernel;
        ProblemError for an unknown problem. Candidates never raise (they get a verdict).
    """
    run = _BenchRun(plan, deps)
    run.throughput_phases()
    if "fidelity" in plan.phases:
        run.fidelity()
    if "sequential" in plan.phases:
        run.sequential()
    run.faults()
    return run.finish()


class _BenchRun:
    """One run of ``run_bench``: its clock and estimates, the throughput report written after
    every phase (``tp``, with each phase's PhaseStats in ``stats``), and what it returns
    (``out``). ``slowdown`` scales the later phases' estimates once the cold phase is measured."""

    def __init__(self, plan: BenchPlan, deps: BenchDeps):
        self.plan, self.deps = plan, deps
        self.clock = WallClock(deps.now, plan.budget_s)
        self.est = estimate_wall_s(plan, deps.cost, cores=deps.cores)
        self.results_dir = Path(plan.results_dir)
        self.cold_dir = Path(plan.work_dir) / "cold"
        self.out: dict[str, Any] = {"throughput": None, "fidelity": None, "faults": None,
                                    "estimate": self.est}
        self.variants: list[Variant] = []
        self.nvrtc: list[Variant] = []
        if plan.measures_throughput:
            self.variants = throughput_variants(plan.throughput, _seeds(plan, deps, "load_inline"))
        if plan.measures_nvrtc:
            self.nvrtc = throughput_variants(plan.throughput, _seeds(plan, deps, "nvrtc"), "nvrtc")
        self.tp: dict[str, Any] = {
            "plan": plan.to_dict(), "estimate_s": self.est, "cores": deps.cores,
            "build_workers": engine_build_workers(plan, deps.cores),
            "candidates": [{"problem": v.problem, "id": v.candidate.id, "label": v.label,
                            "assignment": dict(v.assignment), "form": v.form}
                           for v in self.variants + self.nvrtc],
            "phases": {}, "targets": [], "skipped": []}
        self.stats: dict[str, PhaseStats] = {}
        self.slowdown = 1.0
        for name, prev in earlier_phases(self.results_dir, self.variants + self.nvrtc,
                                         plan.phases).items():
            self.stats[name] = prev
            self.tp["skipped"].append(f"{name}: not measured in this run; taken from the earlier "
                                      f"bench_throughput.json in {self.results_dir} "
                                      "(same candidates)")

    def save_throughput(self) -> None:
        tp = self.tp
        tp["phases"] = {k: s.to_dict() for k, s in self.stats.items()}
        tp["targets"] = [t.to_dict() for t in throughput_targets(self.stats)]
        tp["elapsed_s"] = self.clock.elapsed()
        write_report_files(self.results_dir, "throughput", tp, throughput_markdown(tp))
        self.out["throughput"] = tp

    def skip_note(self, phase: str, need_s: float) -> str:
        msg = (f"{phase}: skipped, ~{need_s:.0f} s needed and {self.clock.left():.0f} s of the "
               f"{self.plan.budget_s:.0f} s budget left; run it alone with --phases {phase}")
        logger.warning(msg)
        return msg

    def throughput_phases(self) -> None:
        """cold (which sets ``slowdown``), warm, then the NVRTC phases, each if it fits."""
        plan, deps, est, tp = self.plan, self.deps, self.est, self.tp
        if "cold" in plan.phases:
            deps.prepare_cache(fresh_dir(self.cold_dir))
            self.stats["cold"] = throughput_phase("cold", plan, self.variants, self.cold_dir,
                                                  deps, tp)
            self.slowdown = min(3.0, max(0.5, self.clock.elapsed()
                                         / max(1.0, est["start"] + est["cold"])))
            self.save_throughput()
        else:
            checked_cache_dir(self.cold_dir)
        if "warm" in plan.phases:
            if self.clock.left() >= est["warm"] * self.slowdown:
                self.stats["warm"] = throughput_phase("warm", plan, self.variants,
                                                      self.cold_dir, deps, tp)
            else:
                tp["skipped"].append(self.skip_note("warm", est["warm"] * self.slowdown))
            self.save_throughput()
        nvrtc_dir = Path(plan.work_dir) / "nvrtc"
        for name in (p for p in NVRTC_PHASES if p in plan.phases):
            if self.clock.left() < est[name] * self.slowdown:
                tp["skipped"].append(self.skip_note(name, est[name] * self.slowdown))
                continue
            deps.prepare_cache(fresh_dir(nvrtc_dir) if name == "nvrtc_cold"
                               else checked_cache_dir(nvrtc_dir))
            self.stats[name] = throughput_phase(name, plan, self.nvrtc, nvrtc_dir, deps, tp)
            self.save_throughput()

    def fidelity(self) -> None:
        need = self.est["fidelity"] * self.slowdown
        if self.clock.left() >= 0.8 * need:
            self.deps.prepare_cache(self.cold_dir)
            fid = fidelity_phase(self.plan, self.cold_dir, self.deps, self.tp)
            fid["skipped"] = []
        else:
            fid = {"runs": self.plan.fidelity_runs, "problems": [],
                   "skipped": [self.skip_note("fidelity", need)]}
        write_report_files(self.results_dir, "fidelity", fid, fidelity_markdown(fid))
        self.out["fidelity"] = fid

    def sequential(self) -> None:
        plan, deps, clock, cost = self.plan, self.deps, self.clock, self.deps.cost
        reserve = self.est.get("faults", 0.0) * self.slowdown
        per = cost.sequential_s(deps.cores) * self.slowdown
        n_fit = int(max(0.0, clock.left() - reserve - cost.setup_s) // max(1.0, per))
        n = min(plan.sequential_n, max(1, n_fit))
        if clock.left() >= 0.8 * (per + cost.setup_s):
            seq_dir = fresh_dir(Path(plan.work_dir) / "sequential")
            deps.prepare_cache(seq_dir)
            logger.info("sequential: up to {} candidates ({:.0f} s left, {:.0f} s reserved "
                        "for later phases)", n, clock.left(), reserve)
            self.stats["sequential"] = sequential_phase(plan, self.variants, n, seq_dir, clock,
                                                        reserve, deps, self.tp)
        else:
            self.tp["skipped"].append(self.skip_note("sequential", per + cost.setup_s))
        self.save_throughput()

    def faults(self) -> None:
        """The fault batch's test (or an earlier call's run of it, kept), reported either way."""
        faults: dict[str, Any] = {"test": FAULTS_TEST, "ran": False,
                                  "evidence": FAULTS_EVIDENCE}
        earlier_faults = load_report(self.results_dir, "faults")
        if "faults" not in self.plan.phases and earlier_faults and earlier_faults.get("ran"):
            faults = earlier_faults
        if "faults" in self.plan.phases:
            if self.clock.left() >= 0.8 * self.est["faults"]:
                t0 = self.deps.now()
                log = self.results_dir / "bench_faults.txt"
                self.results_dir.mkdir(parents=True, exist_ok=True)
                got = self.deps.run_faults(log)
                faults.update(ran=True, returncode=got.get("returncode"),
                              passed=got.get("returncode") == 0, tail=got.get("tail", ""),
                              wall_s=self.deps.now() - t0, log=str(log))
            else:
                faults["skipped"] = self.skip_note("faults", self.est["faults"])
        write_report_files(self.results_dir, "faults", faults, faults_markdown(faults))
        self.out["faults"] = faults

    def finish(self) -> dict[str, Any]:
        """The summary table (of every benchmark in the results folder: a bench split over
        calls into one folder shows them all) and run_bench's return value."""
        out, results_dir = self.out, self.results_dir
        out["elapsed_s"] = self.clock.elapsed()
        out["table"] = summary_table(out["throughput"] or load_report(results_dir, "throughput"),
                                     out["fidelity"] or load_report(results_dir, "fidelity"),
                                     out["faults"])
        (results_dir / "bench_summary.md").write_text(
            f"# evokernel bench\n\nelapsed {out['elapsed_s']:.0f} s of a "
            f"{self.plan.budget_s:.0f} s budget (estimate {self.est['total']:.0f} s)\n\n"
            f"{out['table']}\n")
        return out


def _seeds(plan: BenchPlan, deps: BenchDeps, form: str) -> dict[str, str]:
    """The seed kernel of each throughput problem in candidate ``form`` (evokernel.build.forms).
    Raises: ConfigError for a problem without one."""
    from evokernel.build.forms import form_name
    sources = {}
    for name, _ in plan.throughput:
        seed = deps.load_problem(name, form=form).seed_source
        if not seed or form_name(seed) != form:
            raise ConfigError(f"throughput: problem {name} has no {form} seed kernel to vary")
        sources[name] = seed
    return sources


def _ensure_peaks(cache_dir: Path, *sources: Path) -> None:
    """Give ``cache_dir`` this device's measured peaks: copied from ``sources`` (or the default
    cache), else measured here once, so evaluators set up at once never measure them
    concurrently (which would read low)."""
    import torch

    from evokernel.timing import floor
    from evokernel.config import default_cache_dir
    name = torch.cuda.get_device_name(0)
    dst = floor.peaks_path(cache_dir, name, torch.__version__)
    if dst.exists():
        return
    for src_dir in (*sources, default_cache_dir()):
        src = floor.peaks_path(src_dir, name, torch.__version__)
        if src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            return
    floor.measure_peaks(torch.device("cuda", 0), cache_dir)


def suite_deps() -> Any:
    """SuiteDeps (evokernel.bench.suite) for this machine's GPUs: the factory's evaluator,
    evaluate_problem_set, and empty caches with the device's peaks copied in.
    Raises: NoGPUError when no CUDA GPU is visible."""
    import time

    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_MESSAGE)
    from evokernel.bench.suite import SuiteDeps
    from evokernel.engine.factory import make_evaluator
    from evokernel.engine.problem_set import evaluate_problem_set

    def prepare(path: Path) -> Path:
        fresh_dir(path)
        _ensure_peaks(path)
        return path

    def prebuild(cands: Sequence[Candidate], config: EvalConfig) -> None:
        from evokernel.sandbox.support import containment_for
        build_all(cands, config, containment_for(config))     # contained, as evaluators build

    return SuiteDeps(make_evaluator=make_evaluator, evaluate_set=evaluate_problem_set,
                     prepare_cache=prepare, now=time.perf_counter, prebuild=prebuild)


def build_all(cands: Sequence[Candidate], config: EvalConfig, sandbox: Any = None) -> list[Any]:
    """Build ``cands`` into ``config``'s cache for this GPU's arch, ``config.build_workers`` at
    a time (evokernel.build.builder.Builder; ``sandbox``: its containment, None: uncontained).
    Returns: their BuildResults, in order."""
    from evokernel.build.builder import Builder, device_arch
    with Builder(config.cache_path, arch=device_arch(), timeout_s=config.build_timeout_s,
                 workers=config.build_workers, trim_headers=config.trim_headers,
                 sandbox=sandbox) as b:
        return b.build_many(cands)


def cuda_deps(plan: BenchPlan) -> BenchDeps:
    """BenchDeps for this machine's GPUs (CudaEvaluator, Builder, a do_bench subprocess).
    Raises: NoGPUError when no CUDA GPU is visible."""
    import torch
    if not torch.cuda.is_available():
        raise NoGPUError(NO_GPU_MESSAGE)
    from evokernel.build.builder import device_arch
    from evokernel.engine import factory
    results_dir = Path(plan.results_dir)
    cold = Path(plan.work_dir) / "cold"

    def make_evaluator(problem: Any, config: EvalConfig) -> Any:
        return factory.make_evaluator(problem, config, log_dir=Path(config.cache_path) / "logs")

    def do_bench(spec: dict[str, Any]) -> dict[str, Any]:
        return run_do_bench_process(dict(spec, arch=device_arch()), results_dir)

    def run_faults(log: Path) -> dict[str, Any]:
        if not Path(FAULTS_TEST).is_file():
            return {"returncode": None, "tail": f"{FAULTS_TEST} not found from {os.getcwd()}"}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", FAULTS_TEST,
                               "-p", "no:cacheprovider"], capture_output=True, text=True,
                              timeout=600)
        text = proc.stdout + proc.stderr
        log.write_text(text)
        return {"returncode": proc.returncode, "tail": text[-1500:]}

    return BenchDeps(make_evaluator=make_evaluator, prebuild=build_all, do_bench=do_bench,
                     prepare_cache=lambda d: _ensure_peaks(d, cold), run_faults=run_faults)
