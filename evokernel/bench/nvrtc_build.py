"""Cold NVRTC builds of the seed kernels, on the CPU alone (issue 19: "a cold NVRTC build of a
seed kernel < 1 s on the 2-core development machine", a benchmark, not a timed test).

    python -m evokernel.bench.nvrtc_build [--problems softmax,layernorm,...] [--samples 5]
        [--arch 9.0] [--sandbox auto|none] [--results-dir DIR]

Each sample builds one problem's NVRTC seed kernel (``problems/seeds/nvrtc/<name>.py``) exactly
as the engine builds a new candidate: ``evokernel.build.builder.Builder`` in an empty cache of
its own starts ``python -m evokernel.build.entry WORK CACHE ARCH nvrtc`` (contained as the
engine's build workers are when ``--sandbox auto`` finds namespaces), which compiles each
``compile_kernels`` call to a cubin for ``--arch`` with ``ptxas -v``, writes the build folder,
and the Builder publishes it into the cache. ``build_s`` is the Builder's wall time, subprocess
start-up, imports and publishing included; ``nvrtc_s`` is the compile alone, as the worker
printed it; ``cpu_s`` the CPU seconds of the build's processes, which other processes' load
inflates far less than the wall time (a build is one thread). ``startup_s`` is, beside each sample, a new interpreter that
only imports what the build worker imports before it compiles (evokernel.build.nvrtc_build and
cuda.bindings' nvrtc): the part of a build that is not NVRTC. The Builder's own first-use costs
(importing torch and asking nvcc its version for the candidate's key: evokernel.build.cache.
toolchain) are paid before the first sample, as an evaluator's process has paid them before its
first build. The build worker sees no GPU (``CUDA_VISIBLE_DEVICES=""``) on any machine, so the
number is a CPU number wherever it is measured. Importing this module imports no torch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from evokernel.bench.plan import HEADLINE, seed_source

#: Issue 19's bound on one cold NVRTC build of a seed kernel (seconds, 2-core machine).
TARGET_BUILD_S = 1.0
_COMPILED = re.compile(r"^evokernel: compiled .* with NVRTC in (?P<s>[\d.]+) s", re.MULTILINE)


def build_once(source: str, arch: str, sandbox: Any, root: Path) -> dict[str, Any]:
    """One cold build of ``source`` in a new empty cache under ``root``.

    sandbox: an evokernel.sandbox Containment, or None (plain subprocess).
    Returns: {"build_s": wall seconds, "cpu_s": user + system CPU seconds of the build's
        processes (waited-for children: the worker and what it started), "nvrtc_s": the NVRTC
        compile seconds the worker printed (summed over its calls; None if it printed none),
        "ok", "cache_hit", "error"}.
    """
    from evokernel.build.builder import Builder
    from evokernel.records import Candidate
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=root))
    cache.chmod(0o755)                  # a contained worker runs as another user (nobody)
    with Builder(cache, arch=arch, timeout_s=120, workers=1, sandbox=sandbox) as b:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = b.build(Candidate(source=source, idea="bench: nvrtc seed"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    compiled = [float(m["s"]) for m in _COMPILED.finditer(r.log)]
    return {"build_s": r.build_s, "cpu_s": cpu_s,
            "nvrtc_s": sum(compiled) if compiled else None,
            "ok": r.ok, "cache_hit": r.cache_hit,
            "error": "" if r.ok and not r.cache_hit else (r.log[-600:] or "no log")}


STARTUP = "import evokernel.build.nvrtc_build; from cuda.bindings import nvrtc"


def startup_once(cwd: Path) -> float:
    """Seconds for a new interpreter to import what a build worker imports before compiling
    (STARTUP), with the build worker's environment (no GPU visible), in ``cwd`` (as a worker
    runs in its own folder: ``-c`` puts the current folder first on sys.path).
    Raises: RuntimeError when the imports fail."""
    from evokernel.sandbox import worker_env
    env = dict(worker_env(), CUDA_VISIBLE_DEVICES="")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", STARTUP], env=env, capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{STARTUP!r} failed: {proc.stderr[-600:]}")
    return time.perf_counter() - t0


def _containment(mode: str, root: Path) -> Any:
    """The engine's containment of build workers (``auto``: evokernel.sandbox probes it) or
    None (``none``)."""
    if mode == "none":
        return None
    from evokernel.sandbox.support import probe
    found = probe(cache_dir=str(root / "probe-cache"))
    return found if found.mode != "none" else None


def run(problems: Sequence[str], samples: int, arch: str, sandbox_mode: str) -> dict[str, Any]:
    """Build each problem's NVRTC seed ``samples`` times, round-robin over the problems (so a
    burst of load on a shared machine spreads over all of them).

    Returns: the report (machine, versions, per-problem samples and medians, the overall median
        of all builds, and whether it is under TARGET_BUILD_S).
    Raises: ProblemError for a problem without an NVRTC seed kernel; RuntimeError when a build
        fails or hits a cache (then it was not a cold build).
    """
    from evokernel.build.cache import toolchain
    sources = {p: seed_source(p, "nvrtc") for p in problems}
    toolchain()                         # the Builder's first-use costs, outside the samples
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in problems}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="nvrtc-build-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)               # mkdtemp's 0700 would shut a contained worker out
        sandbox = _containment(sandbox_mode, root)
        for _ in range(samples):
            for p in problems:
                one = build_once(sources[p], arch, sandbox, root)
                if not one["ok"] or one["cache_hit"]:
                    raise RuntimeError(f"{p}: not a cold successful build: {one['error']}")
                rows[p].append(dict(one, startup_s=startup_once(root)))
    every = [r["build_s"] for rs in rows.values() for r in rs]
    median = statistics.median(every)
    return {"when_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "machine": machine(), "versions": versions(), "arch": arch,
            "sandbox": getattr(sandbox, "mode", "none"),
            "load_average": {"before": load_before, "after": os.getloadavg()},
            "problems": {p: {"build_s": [r["build_s"] for r in rs],
                             "cpu_s": [r["cpu_s"] for r in rs],
                             "nvrtc_s": [r["nvrtc_s"] for r in rs],
                             "startup_s": [r["startup_s"] for r in rs],
                             "median_build_s": statistics.median(r["build_s"] for r in rs)}
                         for p, rs in rows.items()},
            "median_build_s": median, "max_build_s": max(every),
            "median_cpu_s": statistics.median(r["cpu_s"] for rs in rows.values() for r in rs),
            "median_nvrtc_s": statistics.median(r["nvrtc_s"] or 0.0 for rs in rows.values()
                                                for r in rs),
            "median_startup_s": statistics.median(r["startup_s"] for rs in rows.values()
                                                  for r in rs),
            "target_s": TARGET_BUILD_S, "passed": median < TARGET_BUILD_S}


def machine() -> dict[str, Any]:
    """CPU count, the cores this process may use, the CPU model and the platform."""
    model = ""
    try:
        model = next((ln.split(":", 1)[1].strip() for ln in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "")
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpus": os.cpu_count(), "usable_cpus": usable, "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version()}


def versions() -> dict[str, str]:
    """The installed torch, cuda-core, cuda-bindings and NVRTC (the library's own version)."""
    from evokernel.nvrtc.compiler import toolchain
    out = {}
    for dist in ("torch", "cuda-core", "cuda-bindings", "nvidia-cuda-nvrtc"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    out["nvrtc_library"] = toolchain()["nvrtc"]
    try:
        out["evokernel_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        out["evokernel_commit"] = "unknown"
    return out


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table: one row per problem, all its samples, then the median."""
    lines = [f"Cold NVRTC builds of the seed kernels, {report['when_utc']} UTC, arch "
             f"{report['arch']}, sandbox {report['sandbox']}",
             "", "| problem | median build s | build s (all samples) | build CPU s | "
             "NVRTC compile s | worker start-up s |", "|---|---|---|---|---|---|"]

    def row(values: Sequence[float | None]) -> str:
        return ", ".join("-" if s is None else f"{s:.3f}" for s in values)
    for p, r in report["problems"].items():
        lines.append(f"| {p} | {r['median_build_s']:.3f} | {row(r['build_s'])} | "
                     f"{row(r['cpu_s'])} | {row(r['nvrtc_s'])} | {row(r['startup_s'])} |")
    verdict = "under" if report["passed"] else "NOT under"
    lines += ["", f"Median of all {sum(len(r['build_s']) for r in report['problems'].values())} "
              f"builds: {report['median_build_s']:.3f} s (max {report['max_build_s']:.3f} s), "
              f"{verdict} the {report['target_s']:g} s target. Median CPU time of a build's "
              f"processes {report['median_cpu_s']:.3f} s. Medians of its parts: NVRTC "
              f"compile {report['median_nvrtc_s']:.3f} s, worker start-up (interpreter and "
              f"imports, measured apart) {report['median_startup_s']:.3f} s."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring). Returns: 0 when the median is under the
    target, 1 when it is not. Raises: as :func:`run`."""
    p = argparse.ArgumentParser(prog="python -m evokernel.bench.nvrtc_build",
                                description="Cold NVRTC builds of the seed kernels, CPU only.")
    p.add_argument("--problems", default=",".join(HEADLINE),
                   help=f"comma-separated (default: {','.join(HEADLINE)})")
    p.add_argument("--samples", type=int, default=5, help="builds of each problem (default 5)")
    p.add_argument("--arch", default="9.0", help="GPU arch to compile for (default 9.0, H200)")
    p.add_argument("--sandbox", choices=("auto", "none"), default="auto",
                   help="contain the build workers as the engine does (auto) or not (none)")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="also write bench_nvrtc_build.json and .md there")
    args = p.parse_args(argv)
    problems = [s.strip() for s in args.problems.split(",") if s.strip()]
    report = run(problems, max(1, args.samples), args.arch, args.sandbox)
    text = markdown(report)
    print(text, end="")
    if args.results_dir is not None:
        args.results_dir.mkdir(parents=True, exist_ok=True)
        (args.results_dir / "bench_nvrtc_build.json").write_text(json.dumps(report, indent=1))
        (args.results_dir / "bench_nvrtc_build.md").write_text(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
