"""`evokernel check --sanitize`: a kernel under compute-sanitizer's memcheck and racecheck, and a
determinism check. Reports for what is published; the gate's verdict is not changed by them.

    find_sanitizer()                     the compute-sanitizer to use, or None
    sanitizer_command(tool, which, cmd)  the command line that runs ``cmd`` under one tool
    parse_sanitizer(text, which)         its output as a SanitizerReport
    compare_runs(outputs)                the determinism check of repeated outputs
    SANITIZER_ENV                        the environment the checked process runs with

What runs: ``python -m evokernel.gate.target PROBLEM KERNEL --mode once`` (one call of the
kernel on the problem's inputs) under ``compute-sanitizer --tool memcheck`` and ``--tool
racecheck``, and ``--mode repeat`` without it. PyTorch's caching allocator hands out pieces of
larger blocks, inside which an out-of-bounds access is invisible to memcheck; the checked process
runs with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` so that each tensor is an allocation of its own.
racecheck checks shared memory only (NVIDIA, Compute Sanitizer User Manual, "Racecheck Tool").

The output format parsed is the one the Compute Sanitizer User Manual documents (every line
prefixed ``========= ``; a report starts unindented after the prefix, its details are indented;
``ERROR SUMMARY: N errors``, and for racecheck ``RACECHECK SUMMARY: N hazards displayed (E
errors, W warnings)``).
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

#: The compute-sanitizer tools `--sanitize` runs.
TOOLS = ("memcheck", "racecheck")
#: At most this many reports are printed per tool (the first; later ones tend to repeat).
PRINT_LIMIT = 20
#: Set in the checked process: no caching allocator, so an out-of-bounds access leaves its
#: allocation (see the module docstring).
SANITIZER_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}

_PREFIX = re.compile(r"^={9} ?(?P<body>.*)$")
_ERRORS = re.compile(r"ERROR SUMMARY:\s*(?P<n>\d+) errors?")
_HAZARDS = re.compile(r"RACECHECK SUMMARY:\s*(?P<n>\d+) hazards? displayed\s*\((?P<e>\d+) "
                      r"errors?,\s*(?P<w>\d+) warnings?\)")
_KERNEL = (re.compile(r"\bat (?:0x[0-9a-f]+ in )?\S+:\d+:(?P<k>[A-Za-z_][\w:<>, *&]*\(.*?\))"),
           re.compile(r"\bat (?P<k>[A-Za-z_][\w:<>, *&]*\(.*?\))\+0x[0-9a-f]+"))
_SKIP = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
         "Target application returned", "Saved host backtrace", "No hazards")


@dataclass(frozen=True)
class SanitizerFinding:
    """One report of a tool: its first line (``message``: "Invalid __global__ write of size 4
    bytes", "Error: Race reported between ..."), the kernel it names (None when it names none)
    and its indented detail lines (thread, block, address; backtraces left out)."""

    message: str
    kernel: str | None = None
    details: tuple[str, ...] = ()

    @property
    def is_warning(self) -> bool:
        return self.message.startswith("Warning")


@dataclass(frozen=True)
class SanitizerReport:
    """One tool's run: ``errors`` from its summary line (None when it printed none: it did not
    finish), ``warnings`` (racecheck's), the reports, and ``status`` (the run's exit status;
    None when it was not run or timed out) with ``note`` saying why when it did not run;
    ``seconds``: the run's wall time (None when not run); ``tail``: the last lines of a run
    that printed no summary (how far it got)."""

    tool: str
    errors: int | None
    warnings: int = 0
    findings: tuple[SanitizerFinding, ...] = ()
    status: int | None = None
    note: str = ""
    seconds: float | None = None
    tail: str = ""

    @property
    def clean(self) -> bool:
        """Ran to its summary and found no error (warnings allowed)."""
        return self.errors == 0 and not any(not f.is_warning for f in self.findings)


def find_sanitizer() -> str | None:
    """``$EVOKERNEL_COMPUTE_SANITIZER``, else ``$CUDA_HOME/bin/compute-sanitizer``, else the
    PATH's; None when there is none."""
    env = os.environ.get("EVOKERNEL_COMPUTE_SANITIZER")
    if env:
        return env
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for p in (Path(cuda) / "bin" / "compute-sanitizer",
              Path(cuda) / "compute-sanitizer" / "compute-sanitizer"):
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which("compute-sanitizer")


def sanitizer_command(tool: str, which: str, target: Sequence[str],
                      print_limit: int = PRINT_LIMIT) -> list[str]:
    """The command that runs ``target`` (a command line) under compute-sanitizer ``tool``'s
    ``which`` ("memcheck" or "racecheck"): its reports limited to ``print_limit``, the
    application's own processes only (not ninja or nvcc), racecheck's hazards reported (not its
    analysis), memcheck with leak checking off (PyTorch keeps its allocations to the end).
    Raises: ValueError for another tool name."""
    if which not in TOOLS:
        raise ValueError(f"sanitizer tool must be one of {', '.join(TOOLS)}, got {which!r}")
    cmd = [tool, "--tool", which, "--print-limit", str(print_limit),
           "--target-processes", "application-only", "--show-backtrace", "device"]
    if which == "racecheck":
        cmd += ["--racecheck-report", "hazard"]
    return cmd + list(target)


def _kernel(lines: Sequence[str]) -> str | None:
    for line in lines:
        for pattern in _KERNEL:
            m = pattern.search(line)
            if m:
                return m.group("k").strip()
    return None


def parse_sanitizer(text: str, which: str, status: int | None = None) -> SanitizerReport:
    """A compute-sanitizer run's output (stdout and stderr together; the application's own
    lines, without the prefix, are ignored) as a SanitizerReport. Never raises."""
    blocks: list[list[str]] = []
    errors = warnings = None
    for raw in text.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            continue
        body = m.group("body").rstrip()
        if (e := _ERRORS.search(body)) is not None:
            errors = int(e.group("n"))
        if (h := _HAZARDS.search(body)) is not None:
            errors, warnings = int(h.group("e")), int(h.group("w"))
        if not body.strip() or any(body.strip().startswith(s) for s in _SKIP):
            if body.strip().startswith("Saved host backtrace") and blocks:
                blocks[-1].append("\0")            # the backtrace follows: not a detail
            continue
        if body[:1].isspace():
            if blocks and blocks[-1][-1] != "\0":
                blocks[-1].append(body.strip())
        else:
            blocks.append([body.strip()])
    findings = tuple(SanitizerFinding(b[0], _kernel(b), tuple(x for x in b[1:] if x != "\0"))
                     for b in blocks)
    return SanitizerReport(which, errors, warnings or 0, findings, status)


def compare_runs(outputs: Sequence[Any]) -> dict[str, Any]:
    """The determinism check: each output (a tensor) against the first, bit for bit.

    Returns: {"runs": n, "identical": bool, "differing_runs": how many differ from the first,
        "differing_elements": the most elements one run has different, "max_abs_diff": the
        largest |difference| (NaN-aware: a NaN where the first has a number counts as a
        difference, two NaNs do not), "note": what differs in form (shape or dtype), if any}.
    Raises: ValueError when there are no outputs.
    """
    import torch
    if not outputs:
        raise ValueError("compare_runs: no outputs")
    first = outputs[0]
    report: dict[str, Any] = {"runs": len(outputs), "identical": True, "differing_runs": 0,
                              "differing_elements": 0, "max_abs_diff": 0.0, "note": ""}
    for out in outputs[1:]:
        if not (isinstance(out, torch.Tensor) and isinstance(first, torch.Tensor)) or \
                out.shape != first.shape or out.dtype != first.dtype:
            report.update(identical=False, note="the outputs differ in type, shape or dtype")
            report["differing_runs"] += 1
            continue
        a, b = first.detach(), out.detach()
        same = (a == b) | (torch.isnan(a) & torch.isnan(b)) if a.is_floating_point() else a == b
        n = int((~same).sum())
        if n:
            diff = (a.double() - b.double()).abs()
            diff = torch.where(same, torch.zeros_like(diff), diff.nan_to_num(float("inf")))
            report.update(identical=False, max_abs_diff=max(report["max_abs_diff"],
                                                            float(diff.max())))
            report["differing_runs"] += 1
            report["differing_elements"] = max(report["differing_elements"], n)
    return report


@dataclass
class SanitizeResult:
    """All of `--sanitize` for one kernel: a report per tool, the determinism check's dict
    (compare_runs; None when it could not run, ``determinism_note`` saying why)."""

    reports: list[SanitizerReport] = field(default_factory=list)
    determinism: dict[str, Any] | None = None
    determinism_note: str = ""

    @property
    def failed(self) -> bool:
        """A tool reported an error (racecheck's warnings and nondeterminism are reported, not
        failures: atomics make honest kernels differ in rounding)."""
        return any(r.errors is not None and not r.clean for r in self.reports)


def format_sanitize(result: SanitizeResult) -> list[str]:
    """The lines `check --sanitize` prints for one kernel."""
    lines = []
    for r in result.reports:
        if r.note:
            lines.append(f"{r.tool + ':':<16}not run: {r.note}")
            continue
        took = f" in {r.seconds:.1f} s" if r.seconds is not None else ""
        if r.errors is None:
            ended = "timed out" if r.status is None else f"exit status {r.status}"
            lines.append(f"{r.tool + ':':<16}did not finish ({ended}{took}); no summary line")
            if r.tail:
                lines.append(f"  last lines: {r.tail}")
        else:
            lines.append(f"{r.tool + ':':<16}{r.errors} error(s)"
                         + (f", {r.warnings} warning(s)" if r.warnings else "") + took)
        for f in r.findings[:PRINT_LIMIT]:
            where = f" in {f.kernel}" if f.kernel else ""
            lines.append(f"  {f.message}{where}")
            lines += [f"    {d}" for d in f.details[:4]]
    d = result.determinism
    if d is None:
        lines.append(f"determinism:    not run: {result.determinism_note}")
    elif d["identical"]:
        lines.append(f"determinism:    {d['runs']} runs on the same inputs, bit-identical")
    else:
        lines.append(f"determinism:    {d['differing_runs']} of {d['runs'] - 1} repeated runs "
                     f"differ from the first (up to {d['differing_elements']} elements, max "
                     f"|diff| {d['max_abs_diff']:.3g}) {d['note']}".rstrip())
    return lines
