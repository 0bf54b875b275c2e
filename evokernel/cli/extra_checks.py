"""`evokernel check --sanitize` and `--robustness`: the reports made after the gate, each in a
process of its own (evokernel.gate.target), for kernels that are to be published.

    require_gpu_for(flags)          NoGPUError saying what needs the GPU, when there is none
    target_command(...)             the command line of one evokernel.gate.target run
    sanitize_kernel(problem, kernel, ...)   memcheck, racecheck, determinism: a SanitizeResult
    robustness(problem, kernel, ...)        the robustness rows, or the reason there are none

Neither changes the verdict. `check` exits 1 when compute-sanitizer reports an error (racecheck
warnings and nondeterminism are reported only: atomics make honest kernels differ in rounding);
the robustness report is information only.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from evokernel.errors import NoGPUError
from evokernel.gate.robust import RobustRow
from evokernel.gate.sanitize import (SANITIZER_ENV, TOOLS, SanitizeResult, SanitizerReport,
                                     find_sanitizer, parse_sanitizer, sanitizer_command)

#: Wall seconds one target run may take (compute-sanitizer slows kernels 10-100x).
TARGET_TIMEOUT_S = 600.0


def require_gpu_for(flags: Sequence[str], gpu_visible: bool | None = None,
                    command: str = "check") -> None:
    """Raises: NoGPUError naming ``command`` and ``flags`` and what they run, when no CUDA GPU
    is visible (``gpu_visible``: the answer to use instead of asking PyTorch)."""
    if gpu_visible is None:
        import torch
        gpu_visible = torch.cuda.is_available()
    if gpu_visible or not flags:
        return
    raise NoGPUError(
        f"evokernel {command} {' '.join(flags)}: runs the kernel on a CUDA GPU (--sanitize: under "
        "compute-sanitizer memcheck and racecheck, then several times for determinism; "
        "--robustness: on other sizes and non-contiguous inputs), and PyTorch sees no GPU on "
        "this machine. Run it on the GPU machine; here `evokernel check --build-only` compiles "
        "the kernel and audits its SASS.")


def target_command(problem: Path, kernel: Path, mode: str, out: Path, cache: Path, arch: str,
                   *, repeat: int = 5, tolerance: float = 16.0, seed: int = 0) -> list[str]:
    """``python -m evokernel.gate.target ...`` for one run (see that module)."""
    return [sys.executable, "-m", "evokernel.gate.target", str(problem), str(kernel),
            "--mode", mode, "--json", str(out), "--cache", str(cache), "--arch", arch,
            "--repeat", str(repeat), "--tolerance", f"{tolerance:g}", "--seed", str(seed)]


def _run(cmd: list[str], out: Path, timeout_s: float, env_extra: dict[str, str] | None = None
         ) -> tuple[int | None, str, dict[str, Any] | None]:
    """(exit status or None on timeout, output text, the target's JSON or None)."""
    env = {**os.environ, **(env_extra or {})}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env,
                              errors="replace")
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                       for x in (e.stdout, e.stderr)) + f"\nevokernel: timed out after {timeout_s:g} s"
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError):
        data = None
    return rc, text, data


def sanitize_kernel(problem: Path, kernel: Path, cache: Path, arch: str, *,
                    repeat: int = 5, timeout_s: float = TARGET_TIMEOUT_S,
                    tool: str | None = None) -> SanitizeResult:
    """memcheck and racecheck around one call of the kernel, then ``repeat`` calls compared
    bit for bit. ``tool``: the compute-sanitizer (None: find_sanitizer()). Never raises for
    the kernel's failures: they are in the result."""
    result = SanitizeResult()
    tool = tool or find_sanitizer()
    with tempfile.TemporaryDirectory(prefix="evokernel-sanitize-") as work:
        for which in TOOLS:
            if tool is None:
                result.reports.append(SanitizerReport(which, None, note="no compute-sanitizer "
                                      "found (set EVOKERNEL_COMPUTE_SANITIZER or CUDA_HOME)"))
                continue
            out = Path(work) / f"{which}.json"
            cmd = sanitizer_command(tool, which, target_command(problem, kernel, "once", out,
                                                                cache, arch))
            t0 = time.perf_counter()
            rc, text, data = _run(cmd, out, timeout_s, SANITIZER_ENV)
            report = parse_sanitizer(text, which, rc)
            if data is not None and not data.get("ok"):
                report = SanitizerReport(which, report.errors, report.warnings,
                                         report.findings, rc,
                                         note="" if report.findings else
                                         f"the kernel did not run: {data.get('error')}")
            # how far a run that did not finish got: its last lines (the target's progress)
            tail = "" if report.errors is not None else " | ".join(text.strip().splitlines()[-3:])
            result.reports.append(dataclasses.replace(report, seconds=time.perf_counter() - t0,
                                                      tail=tail))
        out = Path(work) / "repeat.json"
        rc, text, data = _run(target_command(problem, kernel, "repeat", out, cache, arch,
                                             repeat=repeat), out, timeout_s)
        if data is not None and data.get("ok"):
            result.determinism = data["determinism"]
        else:
            result.determinism_note = (data or {}).get("error") or \
                f"the run ended with status {rc}: {text.strip()[-300:]}"
    return result


def robustness(problem: Path, kernel: Path, cache: Path, arch: str, *, tolerance: float,
               timeout_s: float = TARGET_TIMEOUT_S) -> list[RobustRow] | str:
    """The robustness rows (evokernel.gate.robust), or a line saying why there are none."""
    with tempfile.TemporaryDirectory(prefix="evokernel-robust-") as work:
        out = Path(work) / "robust.json"
        rc, text, data = _run(target_command(problem, kernel, "robust", out, cache, arch,
                                             tolerance=tolerance), out, timeout_s)
    if data is None:
        return f"the robustness run ended with status {rc} and no result: {text.strip()[-300:]}"
    if not data.get("ok"):
        return f"the robustness run failed: {data.get('error')}"
    return [RobustRow(**r) for r in data["rows"]]
