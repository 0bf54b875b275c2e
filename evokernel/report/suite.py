"""Problem-set scores: one row per problem, KernelBench's fast_p, and the geometric-mean speedup.

Pure arithmetic and formatting (no GPU, no torch): ``evokernel suite`` fills the rows from
``check`` verdicts, from searches (evokernel.cli.suite), or from check JSON files already written
(``--from-checks``), and this module scores and writes them.

Definitions:
    speedup      eager_ms / kernel_ms (PyTorch eager with TF32 off over the kernel; both medians
                 in ms of interleaved, L2-flushed trials); vs compile: compile_ms / kernel_ms.
    fast_p       KernelBench's metric (Ouyang et al., "KernelBench", 2025, section 3):
                 fast_p = (1/N) * #{problems i : correct_i and speedup_i > p}, over ALL N
                 problems, so a problem with no candidate or a rejected one counts against it.
                 fast_0 is the share of problems solved correctly.
    geomean      exp(mean(log speedup_i)) over the correct kernels only.
    % of floor   kernel_ms / floor_ms * 100 (100 = at the physical floor, evokernel.timing.floor).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

#: The p of fast_p reported by default (KernelBench reports fast_0 and fast_1; the seed study
#: also 1.5 and 2).
FAST_P = (0.0, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class SuiteRow:
    """One problem's outcome. Times in ms (None when not measured); ``reason`` is "ok", a
    rejection reason (evokernel.records.Reason value), or why there is no verdict
    ("no candidate", "no kernel accepted", "error: ...")."""

    problem: str
    kernel: str | None
    correct: bool
    reason: str
    eager_ms: float | None = None
    compile_ms: float | None = None
    kernel_ms: float | None = None
    floor_ms: float | None = None
    norm_error_ratio: float | None = None
    max_error_ratio: float | None = None

    @property
    def speedup(self) -> float | None:
        """eager_ms / kernel_ms for a correct kernel; None otherwise."""
        return _ratio(self.eager_ms, self.kernel_ms) if self.correct else None

    @property
    def compile_speedup(self) -> float | None:
        """compile_ms / kernel_ms for a correct kernel with a compile time; None otherwise."""
        return _ratio(self.compile_ms, self.kernel_ms) if self.correct else None

    @property
    def pct_of_floor(self) -> float | None:
        """kernel_ms / floor_ms * 100 (100 = at the floor); None when either is unknown."""
        r = _ratio(self.kernel_ms, self.floor_ms)
        return None if r is None else 100.0 * r

    def to_dict(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), speedup=self.speedup,
                    compile_speedup=self.compile_speedup, pct_of_floor=self.pct_of_floor)


def _ratio(num: float | None, den: float | None) -> float | None:
    if not num or not den or num <= 0 or den <= 0:
        return None
    r = num / den
    return r if math.isfinite(r) else None


def _speedup(row: SuiteRow, baseline: str) -> float | None:
    if baseline not in ("eager", "compile"):
        raise ValueError(f"baseline must be 'eager' or 'compile', not {baseline!r}")
    return row.speedup if baseline == "eager" else row.compile_speedup


def fast_p(rows: Sequence[SuiteRow], p: float, baseline: str = "eager") -> float:
    """KernelBench's fast_p over ALL ``rows``: the share that are correct with speedup > p.

    Args:
        rows: one per problem (failures and problems without a candidate included).
        p: the speedup threshold (strictly greater than).
        baseline: "eager" or "compile"; a correct kernel without a compile time does not count
            as faster than torch.compile.
    Returns: a fraction in [0, 1].
    Raises:
        ValueError: no rows, or an unknown baseline.
    """
    if not rows:
        raise ValueError("fast_p of an empty problem set is undefined")
    wins = sum(1 for r in rows if r.correct and (s := _speedup(r, baseline)) is not None
               and s > p)
    return wins / len(rows)


def geomean_speedup(rows: Sequence[SuiteRow], baseline: str = "eager") -> float | None:
    """Geometric mean of the speedups of the correct kernels (x); None when there are none."""
    speeds = [s for r in rows if r.correct and (s := _speedup(r, baseline)) is not None]
    if not speeds:
        return None
    return math.exp(sum(math.log(s) for s in speeds) / len(speeds))


def aggregates(rows: Sequence[SuiteRow], ps: Iterable[float] = FAST_P) -> dict[str, Any]:
    """The suite's scores: problems, correct, fast_p for each p (vs eager and vs compile),
    geometric-mean speedups, and how many correct kernels lack a compile time."""
    ps = tuple(ps)
    return {
        "problems": len(rows), "correct": sum(r.correct for r in rows),
        "fast_p": {f"{p:g}": fast_p(rows, p) for p in ps},
        "fast_p_vs_compile": {f"{p:g}": fast_p(rows, p, "compile") for p in ps},
        "geomean_speedup": geomean_speedup(rows),
        "geomean_speedup_vs_compile": geomean_speedup(rows, "compile"),
        "correct_without_compile_ms": sum(r.correct and r.compile_speedup is None for r in rows),
    }


# -- rows from verdicts ------------------------------------------------------------------------
def row_from_result(problem: str, kernel: str | None, result: Any,
                    device: dict[str, Any] | None = None) -> SuiteRow:
    """A row from an EvalResult (or its ``to_dict()``); ``device`` (evaluator info) fills a
    compile or floor time the result lacks."""
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    dev = device or {}
    return SuiteRow(problem=problem, kernel=kernel, correct=d.get("verdict") == "accept",
                    reason=str(d.get("reason", "?")), eager_ms=d.get("reference_ms"),
                    compile_ms=d.get("compile_ms") or dev.get("compile_ms"),
                    kernel_ms=d.get("candidate_ms"),
                    floor_ms=d.get("floor_ms") or dev.get("floor_ms"),
                    norm_error_ratio=d.get("norm_error_ratio"),
                    max_error_ratio=d.get("max_error_ratio"))


def row_from_check(data: dict[str, Any]) -> SuiteRow:
    """The row of a ``evokernel check --json`` file: its FIRST kernel (the one named first on
    the command line; later ones, e.g. adversarial fixtures, are not the problem's candidate).

    Raises:
        ValueError: the data is not a check file (no problem or no kernels).
    """
    if "problem" not in data or not data.get("kernels"):
        raise ValueError("not an `evokernel check --json` file (needs problem and kernels)")
    k = data["kernels"][0]
    return row_from_result(data["problem"], k.get("kernel"), k, data.get("device"))


def rows_from_checks(folder: str | Path, pattern: str = "check_*.json") -> list[SuiteRow]:
    """Rows from every check JSON file in ``folder``, sorted by problem name.

    Raises:
        ValueError: no such file, a file that is not a check file, or two files that check one
            problem (named).
    """
    files = sorted(Path(folder).glob(pattern))
    if not files:
        raise ValueError(f"{folder}: no {pattern} files")
    rows: dict[str, tuple[Path, SuiteRow]] = {}
    for f in files:
        try:
            row = row_from_check(json.loads(f.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{f}: {e}") from e
        if row.problem in rows:   # two rows of one problem would count it twice in fast_p
            raise ValueError(f"{f}: problem {row.problem!r} is also checked in "
                             f"{rows[row.problem][0]}; keep one check file per problem")
        rows[row.problem] = (f, row)
    return [row for _, row in sorted(rows.values(), key=lambda fr: fr[1].problem)]


def missing_row(problem: str, reason: str) -> SuiteRow:
    """A problem with no verdict (no candidate, setup failed): it counts as not correct."""
    return SuiteRow(problem=problem, kernel=None, correct=False, reason=reason)


# -- output -----------------------------------------------------------------------------------
def to_json(rows: Sequence[SuiteRow], title: str = "") -> dict[str, Any]:
    """Rows and aggregates as JSON-ready data."""
    return {"title": title, "rows": [r.to_dict() for r in rows], "aggregates": aggregates(rows)}


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def to_markdown(rows: Sequence[SuiteRow], title: str = "suite") -> str:
    """The table (one row per problem) and the aggregates, as Markdown."""
    agg = aggregates(rows)
    n = agg["problems"]
    lines = [f"# {title}", "",
             "| problem | kernel | correct | reason | eager ms | compile ms | kernel ms | "
             "speedup vs eager | vs compile | % of floor | norm ratio | max ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kernel = Path(r.kernel).name if r.kernel else "-"
        lines.append(
            f"| {r.problem} | {kernel} | {'yes' if r.correct else 'no'} | {r.reason} | "
            f"{_f(r.eager_ms, '.4f')} | {_f(r.compile_ms, '.4f')} | {_f(r.kernel_ms, '.4f')} | "
            f"{_f(r.speedup, '.3f')} | {_f(r.compile_speedup, '.3f')} | "
            f"{_f(r.pct_of_floor, '.0f')} | {_f(r.norm_error_ratio, '.3g')} | "
            f"{_f(r.max_error_ratio, '.3g')} |")
    lines += ["", f"{n} problems, {agg['correct']} correct.", "",
              "| score | vs eager | vs torch.compile |", "|---|---|---|"]
    for p, share in agg["fast_p"].items():
        share_c = agg["fast_p_vs_compile"][p]
        lines.append(f"| fast_{p} | {share:.2f} ({round(share * n)}/{n}) | "
                     f"{share_c:.2f} ({round(share_c * n)}/{n}) |")
    lines.append(f"| geometric-mean speedup of correct kernels | "
                 f"{_f(agg['geomean_speedup'], '.3f')} | "
                 f"{_f(agg['geomean_speedup_vs_compile'], '.3f')} |")
    lines += ["", "fast_p is KernelBench's: the share of all problems whose kernel is correct "
              "and more than p times faster (a missing or rejected kernel counts as not "
              "faster). % of floor is kernel time over the physical floor time (100 = at the "
              "floor)."]
    if agg["correct_without_compile_ms"]:
        lines.append("")
        lines.append(f"{agg['correct_without_compile_ms']} correct kernel(s) have no "
                     "torch.compile time; they count as not faster than torch.compile and are "
                     "left out of its geometric mean.")
    return "\n".join(lines) + "\n"


def write(rows: Sequence[SuiteRow], out: str | Path, title: str = "suite") -> tuple[Path, Path]:
    """Write ``<out>.md`` and ``<out>.json`` (a suffix .md or .json on ``out`` is dropped).

    Returns: (markdown path, json path).
    Raises: OSError, as output_paths.
    """
    md, js = output_paths(out)
    md.write_text(to_markdown(rows, title))
    js.write_text(json.dumps(to_json(rows, title), indent=2) + "\n")
    return md, js


def output_paths(out: str | Path) -> tuple[Path, Path]:
    """``<out>.md`` and ``<out>.json`` (a suffix .md or .json on ``out`` dropped), their folder
    made: called before a suite runs, so that a path it cannot write fails at once, not after
    every verdict is in.

    Raises:
        OSError: the folder cannot be made or written (the path named).
    """
    base = Path(out)
    if base.suffix in (".md", ".json"):
        base = base.with_suffix("")
    if not base.name or base.name in (".", ".."):
        raise OSError(f"{out!r}: not a file name (OUT makes OUT.md and OUT.json)")
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(f"{out}: cannot make its folder {base.parent}: "
                      f"{e.strerror or e} ({e.filename or base.parent})") from e
    if not os.access(base.parent, os.W_OK):
        raise OSError(f"{out}: its folder {base.parent} is not writable")
    paths = base.with_name(base.name + ".md"), base.with_name(base.name + ".json")
    for p in paths:
        if p.is_dir():
            raise OSError(f"{out}: {p} is a folder")
    return paths
