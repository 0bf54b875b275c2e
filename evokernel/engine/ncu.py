"""Nsight Compute (``ncu``) metrics of one accepted candidate, for the prompts:
``CudaEvaluator.profile`` fills ``EvalResult.profile``, which the prompt's profile table shows.
No command calls it yet (there is no ``--profile`` flag); tests/engine/test_prompt_data_gpu.py
does, on the GPU.

``profile_candidate`` runs ``ncu`` on a subprocess (evokernel.engine.ncu_target) that loads the
problem and the candidate (from the build cache), calls the candidate once to warm up, and once
more between ``cudaProfilerStart`` and ``cudaProfilerStop``; ``ncu --profile-from-start off``
profiles only the kernels of that second call. ``--clock-control none`` leaves the GPU clocks
as they are during timing (ncu locks them to base clocks otherwise), ``--csv`` with
``--print-units base`` gives one row per (kernel launch, metric) that ``parse_ncu_csv`` reads:

    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",
    "Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"

(the details page of ncu's command-line report; columns are found by name, so ncu versions that
add or drop other columns parse the same). Values may carry thousands separators ("5,632").
Profiling needs access to the GPU's performance counters: root, or the driver option
``NVreg_RestrictProfilingToAdminUsers=0``; without it ncu reports ``ERR_NVGPUCTRPERM`` and
``profile_candidate`` raises ProfileUnavailable saying so. A profile costs seconds (ncu replays
each kernel once per metric pass), so it is taken of few candidates, never during timing.
"""
from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Mapping

from evokernel.errors import EvokernelError
from evokernel.records import KernelProfile

#: ncu metric name -> KernelProfile field. Percent metrics are "% of peak" as ncu defines it.
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
}
#: Time units ncu prints, in microseconds.
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}
_THOUSANDS = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


class ProfileUnavailable(EvokernelError):
    """ncu is missing, may not read the performance counters, or profiled nothing; the message
    says which, with ncu's own words."""


def _number(text: str) -> float | None:
    text = text.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> tuple[KernelProfile, ...]:
    """The METRICS of each kernel in ncu's ``--csv`` output (details page, one row per metric).

    Lines before the header (``==PROF==`` notes, the program's own output) and after the table
    are ignored. Launches of the same kernel name are merged: durations summed, percentages
    averaged weighted by duration (plain mean when a duration is missing).
    Returns: one KernelProfile per kernel name, in order of first launch; () when the text holds
        no table. Never raises on malformed text (unknown metrics and unreadable values skipped).
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return ()
    rows = csv.reader(ln for ln in lines[start:] if ln.startswith('"'))
    header = next(rows)
    try:
        at = {k: header.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit",
                                           "Metric Value")}
    except ValueError:
        return ()
    launches: dict[str, dict[str, float]] = {}
    names: dict[str, str] = {}
    for row in rows:
        if len(row) < len(header):
            continue
        field = METRICS.get(row[at["Metric Name"]])
        value = _number(row[at["Metric Value"]])
        if field is None or value is None:
            continue
        if field == "duration_us":
            value *= _TIME_US.get(row[at["Metric Unit"]].strip(), 1e-3)
        names.setdefault(row[at["ID"]], row[at["Kernel Name"]])
        launches.setdefault(row[at["ID"]], {})[field] = value
    return _merge(names, launches)


def _merge(names: Mapping[str, str], launches: Mapping[str, dict[str, float]]
           ) -> tuple[KernelProfile, ...]:
    by_name: dict[str, list[dict[str, float]]] = defaultdict(list)
    for launch_id, metrics in launches.items():
        by_name[names[launch_id]].append(metrics)
    out = []
    for name, runs in by_name.items():
        durations = [r.get("duration_us") for r in runs]
        merged: dict[str, float | None] = {
            "duration_us": sum(d for d in durations if d is not None)
            if any(d is not None for d in durations) else None}
        for field in METRICS.values():
            if field == "duration_us":
                continue
            pairs = [(r[field], r.get("duration_us") or 0.0) for r in runs if field in r]
            weight = sum(w for _, w in pairs)
            merged[field] = (None if not pairs else sum(v * w for v, w in pairs) / weight
                             if weight > 0 else sum(v for v, _ in pairs) / len(pairs))
        out.append(KernelProfile(name=name, launches=len(runs), **merged))
    return tuple(out)


def _text(out: str | bytes | None) -> str:
    """What a timed-out subprocess had written (TimeoutExpired may hold bytes even in text
    mode)."""
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def ncu_command(ncu: str, log_file: Path, target: list[str]) -> list[str]:
    """The ncu command line that profiles ``target`` (a command) and writes its CSV report to
    ``log_file``."""
    return [ncu, "--clock-control", "none", "--csv", "--print-units", "base",
            "--metrics", ",".join(METRICS), "--profile-from-start", "off",
            "--target-processes", "all", "--log-file", str(log_file), *target]


def profile_candidate(problem_source: str, candidate_source: str, work_dir: Path,
                      cache_dir: Path, arch: str, *, ncu: str | None = None,
                      env: Mapping[str, str] | None = None,
                      timeout_s: float = 600.0) -> tuple[KernelProfile, ...]:
    """Profile one call of a candidate with ncu (see the module docstring).

    Args:
        problem_source, candidate_source: the reference problem and the candidate module.
        work_dir: a folder for the two sources, ncu's CSV and the target's output.
        cache_dir: the build cache the candidate was built into (evokernel.build).
        arch: the build arch ("9.0").
        ncu: the ncu executable (default: ``ncu`` on the PATH, else
            ``$CUDA_HOME/bin/ncu``).
        env: the subprocess environment (give it evokernel.sandbox.worker_env() and the
            CUDA_VISIBLE_DEVICES of the GPU to use); default: this process's.
        timeout_s: wall-clock limit in seconds.
    Returns: per-kernel metrics (parse_ncu_csv).
    Raises: ProfileUnavailable when ncu is missing, exits with an error (performance-counter
        permission included), times out, or reports no kernel.
    """
    tool = ncu or shutil.which("ncu") or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
                                             / "bin" / "ncu")
    if not Path(tool).is_file() and shutil.which(tool) is None:
        raise ProfileUnavailable(f"ncu not found ({tool}); install Nsight Compute or pass its "
                                 "path, or run without --profile")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "problem.py").write_text(problem_source, encoding="utf-8")
    (work_dir / "candidate.py").write_text(candidate_source, encoding="utf-8")
    report = work_dir / "ncu.csv"
    report.unlink(missing_ok=True)
    target = [sys.executable, "-m", "evokernel.engine.ncu_target", str(work_dir),
              str(cache_dir), arch]
    run_env = dict(env if env is not None else os.environ, LC_ALL="C")  # no decimal commas
    try:
        proc = subprocess.run(ncu_command(tool, report, target), env=run_env, cwd=work_dir,
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        said = "".join(_text(x) for x in (e.stdout, e.stderr))
        (work_dir / "target_output.log").write_text(said)
        tail = "\n".join(said.strip().splitlines()[-8:]) or "(nothing)"
        raise ProfileUnavailable(f"ncu did not finish in {timeout_s:g} s; its last lines:\n"
                                 f"{tail}") from None
    text = report.read_text(errors="replace") if report.is_file() else ""
    (work_dir / "target_output.log").write_text(proc.stdout + proc.stderr)
    said = text + proc.stdout + proc.stderr
    if "ERR_NVGPUCTRPERM" in said:
        raise ProfileUnavailable("ncu may not read the GPU performance counters "
                                 "(ERR_NVGPUCTRPERM): run as root or load the driver with "
                                 "NVreg_RestrictProfilingToAdminUsers=0")
    kernels = parse_ncu_csv(text)
    if proc.returncode != 0 or not kernels:
        tail = "\n".join(said.strip().splitlines()[-8:])
        raise ProfileUnavailable(f"ncu exited with status {proc.returncode} and "
                                 f"{len(kernels)} profiled kernels; its last lines:\n{tail}")
    return kernels
