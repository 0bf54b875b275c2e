"""Run every gate fixture on the GPU and check each gets the verdict and the named reason it must.

    python experiments/gate_report.py [--out DIR] [--only NAME ...] [--seeds 0,1]
                                      [--distributions all|default] [--no-prebuild] [--list]

Fixtures are the kernel files in tests/kernels/cheats/, tests/kernels/legit/ and
tests/kernels/matmul_fp16.py, and their NVRTC twins in tests/kernels/nvrtc/cheats/ and
tests/kernels/nvrtc/legit/ (the same cheat or variant in the NVRTC candidate form, evokernel.nvrtc;
named "nvrtc/<name>"; the report checks that each gets its load_inline twin's verdict). Each
one's docstring carries two machine-readable lines:

    EXPECTED: reject cached_output        (or "accept ok"; the reason is an evokernel Reason value)
    PROBLEM: tests/kernels/problems/softmax_small.py   (a path from the repository root)

All fixture sources are built in parallel into the build cache while one worker per problem sets
up (the float64 truths, the timing sets, the reference's profile); then each problem's fixtures go
through its CudaEvaluator, one problem at a time, with nothing else running on the machine. The gate checks every known distribution with
two seeds by default (stricter than a run's default, which checks "problem" and "offset").

Prints a table (fixture, expected verdict and reason, actual verdict and reason, norm-wise and
element-wise error ratios, where it was decided), then the measurements that decide
GateConfig.tolerance_factor: every legitimate variant's ratios per distribution (the largest, L)
and the lower-precision cheats' ratios (the smallest, P); a factor needs 2L <= factor <= P/2.
Writes gate_report.json and gate_report.md (and worker logs) under --out (default
results/gate-report-<date>/). Exit status 1 when any fixture got the wrong verdict or reason.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import datetime
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_DIRS = ("tests/kernels/cheats", "tests/kernels/legit", "tests/kernels/nvrtc/cheats",
                "tests/kernels/nvrtc/legit")
#: Where the NVRTC twins live; a twin's name is "nvrtc/<file stem>", its twin's the stem.
NVRTC_DIR = "tests/kernels/nvrtc"
EXTRA_FIXTURES = ("tests/kernels/matmul_fp16.py",)
_EXPECTED = re.compile(r"^EXPECTED:\s*(accept|reject)\s+(\w+)\s*$", re.MULTILINE)
_PROBLEM = re.compile(r"^PROBLEM:\s*(\S+)\s*$", re.MULTILINE)
_CHECK = re.compile(r"^(?:Cheat (\d+),|CHECK:\s*(\d+)\s*$)", re.MULTILINE)
#: The anti-cheat checks of issue 3, by number (a fixture's docstring starts "Cheat N, ...").
ISSUE_CHECKS = {1: "result reuse", 2: "input mutation", 3: "side stream", 4: "threads",
                5: "lazy output", 6: "timer tampering", 7: "caching across calls",
                8: "lower precision", 9: "near-zero outputs", 10: "unstable algorithm",
                11: "partial output", 12: "reference fallback", 13: "silent failure",
                14: "impossible speed"}


@dataclass(frozen=True)
class Fixture:
    """One fixture kernel file and what it must get."""

    name: str
    path: Path
    kind: str                 # "cheat" or "legit"
    verdict: str              # "accept" or "reject"
    reason: str               # an evokernel.records.Reason value
    problem: Path
    check: int | None = None  # the issue-3 check it exercises (ISSUE_CHECKS), if any
    form: str = "load_inline"  # the candidate form (evokernel.build.forms): or "nvrtc"

    @property
    def twin(self) -> str | None:
        """The name of the load_inline fixture an NVRTC fixture is the twin of (the same file
        name in the load_inline folder of its kind), else None (also for an NVRTC fixture with
        no such file: a check the form expresses differently)."""
        if self.form != "nvrtc":
            return None
        other = self.path.parents[2] / self.path.parent.name / self.path.name
        return self.path.stem if other.is_file() else None


def parse_fixture(path: Path, root: Path = ROOT) -> Fixture:
    """The Fixture of ``path`` from its module docstring's EXPECTED and PROBLEM lines.
    Raises: ValueError when a line is missing or names an unknown reason, a verdict that does
    not fit the reason, or a problem file that does not exist."""
    from evokernel.records import Reason
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    exp, prob = _EXPECTED.search(doc), _PROBLEM.search(doc)
    if not exp or not prob:
        raise ValueError(f"{path}: the docstring needs 'EXPECTED: accept|reject <reason>' and "
                         "'PROBLEM: <path>' lines")
    verdict, reason = exp.group(1), exp.group(2)
    try:
        Reason(reason)
    except ValueError:
        raise ValueError(f"{path}: unknown reason {reason!r}") from None
    if (verdict == "accept") != (reason == "ok"):
        raise ValueError(f"{path}: verdict {verdict} does not fit reason {reason}")
    problem = root / prob.group(1)
    if not problem.is_file():
        raise ValueError(f"{path}: no problem file {problem}")
    kind = "legit" if path.parent.name == "legit" else "cheat"
    m = _CHECK.search(doc)
    check = int(m.group(1) or m.group(2)) if m else None
    nvrtc = path.parent.parent.name == Path(NVRTC_DIR).name
    return Fixture(f"nvrtc/{path.stem}" if nvrtc else path.stem, path, kind, verdict, reason,
                   problem, check, "nvrtc" if nvrtc else "load_inline")


def discover(root: Path = ROOT, only: tuple[str, ...] = ()) -> list[Fixture]:
    """Every fixture (cheats first, then legitimate variants), optionally only those whose name
    contains one of ``only``."""
    paths = [p for d in FIXTURE_DIRS for p in sorted((root / d).glob("*.py"))]
    paths += [root / p for p in EXTRA_FIXTURES]
    fixtures = [parse_fixture(p, root) for p in paths]
    fixtures.sort(key=lambda f: (f.kind != "cheat", f.name))
    return [f for f in fixtures if not only or any(o in f.name for o in only)]


def report_config(seeds: tuple[int, ...] = (0, 1), distributions: str = "all",
                  hide_host_ms: float | None = None) -> Any:
    """The evaluation config of the report: every known distribution (or the default ones) with
    ``seeds``; short timing (verdicts, not precise times, are the point), with
    ``TimingConfig.hide_host_ms`` (None: its default); no torch.compile."""
    from evokernel.config import KNOWN_DISTRIBUTIONS, EvalConfig, GateConfig, TimingConfig
    gate = GateConfig(distributions=KNOWN_DISTRIBUTIONS if distributions == "all"
                      else GateConfig().distributions, seeds=seeds)
    timing = TimingConfig(warmup_ms=10.0, min_trials=10, max_trials=60, target_rel_ci=0.02,
                          max_time_s=4.0, **({} if hide_host_ms is None
                                             else {"hide_host_ms": hide_host_ms}))
    return EvalConfig(gate=gate, timing=timing, measure_compile=False, eval_timeout_s=240.0)


def _ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.3g}"


def row_of(f: Fixture, r: Any) -> dict[str, Any]:
    """One report row: what the fixture expected and what the EvalResult ``r`` says."""
    ok = r.verdict.value == f.verdict and r.reason.value == f.reason
    return {
        "fixture": f.name, "kind": f.kind, "check": f.check, "form": f.form, "twin": f.twin,
        "problem": str(f.problem.relative_to(ROOT)),
        "expected": f"{f.verdict} {f.reason}", "verdict": r.verdict.value,
        "reason": r.reason.value, "ok": ok,
        "norm_ratio": r.norm_error_ratio, "max_ratio": r.max_error_ratio,
        "where": f"{r.distribution} seed {r.seed}" if r.distribution else "-",
        "candidate_ms": r.candidate_ms, "reference_ms": r.reference_ms, "floor_ms": r.floor_ms,
        "flags": list(r.flags), "detail": r.detail,
        "checks": [{"distribution": c.distribution, "seed": c.seed, "norm_ratio": c.norm_ratio,
                    "max_ratio": c.max_ratio, "passed": c.passed} for c in r.checks],
    }


def passes(f: Fixture, n: int) -> list[Any]:
    """``n`` candidates of fixture ``f``: its source, with a comment naming the pass from the
    second on, so each pass is a candidate of its own (its own id, evaluated again) while its
    extension comes from the build cache (the CUDA text is unchanged)."""
    from evokernel.records import Candidate
    src = f.path.read_text()
    return [Candidate(source=src if k == 0 else f"{src}\n# gate report pass {k + 1}\n",
                      idea=f.name) for k in range(n)]


def evaluate(fixtures: list[Fixture], config: Any, out: Path, prebuild: bool = True,
             repeat: int = 1, dask: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build all fixtures and set up one worker per problem at the same time (the device's peak
    rates are measured first, alone, so concurrent set-ups cannot skew the floor); then evaluate
    the problems' fixtures one problem after another: ``repeat`` passes over each problem's
    fixtures in turn, every pass a new candidate of each (``passes``).
    Returns (rows, info per problem); each row carries its pass (1, 2, ...). A problem whose
    worker cannot be set up fails its fixtures (reason "setup_error"). ``dask``: evaluate on
    Dask (make_evaluator's ``dask``: a scheduler address; scripts/dask_vs_local.py)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from evokernel.build.builder import Builder, device_arch
    from evokernel.engine.factory import make_evaluator
    from evokernel.timing.floor import measure_peaks
    from evokernel.problem import load_problem
    from evokernel.records import Candidate

    cands = {f.name: Candidate(source=f.path.read_text(), idea=f.name) for f in fixtures}
    repeats = {f.name: passes(f, repeat) for f in fixtures}
    groups: dict[Path, list[Fixture]] = {}
    for f in fixtures:
        groups.setdefault(f.problem, []).append(f)
    measure_peaks(torch.device("cuda", 0), config.cache_path)

    def build_all() -> None:
        t0 = time.perf_counter()
        with Builder(config.cache_path, arch=device_arch(), timeout_s=config.build_timeout_s,
                     workers=config.build_workers, trim_headers=config.trim_headers) as builder:
            builds = builder.build_many(list(cands.values()))
        print(f"built {len(builds)} fixtures in {time.perf_counter() - t0:.1f} s "
              f"({sum(not b.cache_hit for b in builds)} compiled)", flush=True)
        for name, b in zip(cands, builds):
            if not b.ok:
                print(f"  build of {name} failed:\n{b.log[-1500:]}", flush=True)

    def set_up(problem_path: Path) -> tuple[Any, float]:
        t0 = time.perf_counter()
        ev = make_evaluator(load_problem(problem_path), config, log_dir=out / "logs",
                            dask=dask)
        return ev, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(groups) + 1) as pool:
        built = pool.submit(build_all) if prebuild else None
        setups = {p: pool.submit(set_up, p) for p in groups}
        if built is not None:
            built.result()
        for fut in setups.values():
            fut.exception()                       # wait for every set-up
    print(f"builds and set-ups: {time.perf_counter() - t0:.1f} s", flush=True)
    rows, infos = [], {}
    for problem_path, group in groups.items():
        name = str(problem_path.relative_to(ROOT))
        print(f"\n== {name}: {len(group)} fixtures", flush=True)
        t0 = time.perf_counter()
        try:
            evaluator, setup_s = setups[problem_path].result()
        except Exception as e:  # noqa: BLE001 -- a problem that cannot be set up fails its rows
            print(f"   set-up failed: {type(e).__name__}: {e}"[:2000], flush=True)
            for f in group:
                rows.append({"fixture": f.name, "kind": f.kind, "check": f.check, "problem": name,
                             "expected": f"{f.verdict} {f.reason}", "verdict": "error",
                             "reason": "setup_error", "ok": False, "norm_ratio": None,
                             "max_ratio": None, "where": "-", "candidate_ms": None,
                             "reference_ms": None, "floor_ms": None, "flags": [],
                             "detail": f"{type(e).__name__}: {e}"[:2000], "checks": []})
            continue
        try:
            infos[name] = dict(evaluator.info, setup_s=round(setup_s, 1))
            order = [(k, f) for k in range(repeat) for f in group]
            results = evaluator.evaluate([repeats[f.name][k] for k, f in order])
        finally:
            evaluator.close()
        for (k, f), r in zip(order, results):
            row = dict(row_of(f, r), **{"pass": k + 1})
            rows.append(row)
            print(f"   {'ok ' if row['ok'] else 'BAD'} {f.name:34s} {row['verdict']:6s} "
                  f"{row['reason']:22s} norm {_ratio(row['norm_ratio']):>8s} max "
                  f"{_ratio(row['max_ratio']):>8s}  {row['detail'][:160]}", flush=True)
        print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
    return rows, infos


def factor_evidence(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The measurements behind GateConfig.tolerance_factor: every check of every legitimate
    variant, accepted or not (L = the largest of its norm and max ratios: a rejected variant's
    ratios are the most telling), and the deciding ratios of the lower-precision rejections
    (P = the smallest of the larger of the two)."""
    legit = [(r["fixture"], c) for r in rows if r["kind"] == "legit" for c in r["checks"]]
    lp = [r for r in rows if r["reason"] == "lower_precision" and r["norm_ratio"] is not None]
    worst = max(legit, key=lambda fc: max(fc[1]["norm_ratio"], fc[1]["max_ratio"]),
                default=None)
    least = min(lp, key=lambda r: max(r["norm_ratio"], r["max_ratio"]), default=None)
    big_l = max(worst[1]["norm_ratio"], worst[1]["max_ratio"]) if worst else None
    small_p = max(least["norm_ratio"], least["max_ratio"]) if least else None
    return {
        "largest_legit_ratio": big_l,
        "largest_legit_at": (f"{worst[0]} on {worst[1]['distribution']} seed "
                             f"{worst[1]['seed']}") if worst else None,
        "smallest_lower_precision_ratio": small_p,
        "smallest_lower_precision_at": (f"{least['fixture']} on {least['where']}"
                                        if least else None),
        "factor_range": ([2 * big_l, small_p / 2] if big_l is not None and small_p is not None
                         else None),
        "legit_checks": [{"fixture": f, **c} for f, c in legit],
        "lower_precision": [{"fixture": r["fixture"], "where": r["where"],
                             "norm_ratio": r["norm_ratio"], "max_ratio": r["max_ratio"],
                             "checks": r["checks"]} for r in lp],
    }


def render(rows: list[dict[str, Any]], evidence: dict[str, Any], factor: float) -> str:
    """The Markdown report: the verdict table, then the factor evidence."""
    n_passes = max((r.get("pass", 1) for r in rows), default=1)
    many = n_passes > 1                        # a pass column only when there are passes
    lines = ["| fixture | " + ("pass | " if many else "") + "kind | expected | verdict | reason "
             "| ok | norm ratio | max ratio | decided on | candidate ms | floor ms |",
             "|---|" + ("---|" if many else "") + "---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        lines.append(f"| {r['fixture']} | " + (f"{r.get('pass', 1)} | " if many else "") +
                     f"{r['kind']} | {r['expected']} | "
                     f"{r['verdict']} | {r['reason']} | {'yes' if r['ok'] else '**NO**'} | "
                     f"{_ratio(r['norm_ratio'])} | {_ratio(r['max_ratio'])} | {r['where']} | "
                     f"{ms(r['candidate_ms'])} | {ms(r['floor_ms'])} |")
    # A fixture counts as right only when every one of its passes is.
    every: dict[str, dict[str, Any]] = {}
    for r in rows:
        first = every.setdefault(r["fixture"], dict(r))
        first["ok"] = first["ok"] and r["ok"]
    cheats = [r for r in every.values() if r["kind"] == "cheat"]
    legit = [r for r in every.values() if r["kind"] == "legit"]
    by_check: dict[int, list[dict[str, Any]]] = {}
    for r in cheats:
        if r.get("check"):
            by_check.setdefault(r["check"], []).append(r)
    passed = [n for n in ISSUE_CHECKS if by_check.get(n) and all(r["ok"] for r in by_check[n])]
    lines += ["", f"issue 3's anti-cheat checks rejected for the right reason (every fixture of "
              f"the check): {len(passed)} of {len(ISSUE_CHECKS)}"]
    for n, what in ISSUE_CHECKS.items():
        fx = by_check.get(n, [])
        mark = "ok" if n in passed else ("NO FIXTURE" if not fx else "**WRONG**")
        lines.append(f"- {n}. {what}: {mark} ({', '.join(r['fixture'] for r in fx) or '-'})")
    lines += twin_lines(every)
    lines += ["", f"cheat fixtures rejected for the right reason: {sum(r['ok'] for r in cheats)} "
              f"of {len(cheats)}; legitimate variants accepted: {sum(r['ok'] for r in legit)} of "
              f"{len(legit)}" + (f" (in every one of {n_passes} passes)" if n_passes > 1 else ""),
              "", "## Tolerance factor evidence", "",
              f"current factor: {factor:g}", "",
              f"- largest legitimate ratio L = {_ratio(evidence['largest_legit_ratio'])} "
              f"({evidence['largest_legit_at']})",
              f"- smallest lower-precision ratio P = "
              f"{_ratio(evidence['smallest_lower_precision_ratio'])} "
              f"({evidence['smallest_lower_precision_at']})"]
    if evidence["factor_range"]:
        lo, hi = evidence["factor_range"]
        lines.append(f"- a factor with a margin of 2 on both sides lies in [{lo:.3g}, {hi:.3g}]"
                     + ("" if lo <= factor <= hi else f" (the current {factor:g} does NOT)"))
    lines += ["", "### Legitimate variants, per check", "",
              "| fixture | distribution | seed | norm ratio | max ratio |", "|---|---|---|---|---|"]
    for c in evidence["legit_checks"]:
        lines.append(f"| {c['fixture']} | {c['distribution']} | {c['seed']} | "
                     f"{_ratio(c['norm_ratio'])} | {_ratio(c['max_ratio'])} |")
    lines += ["", "### Lower-precision rejections, per check", "",
              "| fixture | distribution | seed | norm ratio | max ratio |", "|---|---|---|---|---|"]
    for r in evidence["lower_precision"]:
        for c in r["checks"]:
            lines.append(f"| {r['fixture']} | {c['distribution']} | {c['seed']} | "
                         f"{_ratio(c['norm_ratio'])} | {_ratio(c['max_ratio'])} |")
    return "\n".join(lines) + "\n"


def twin_lines(every: dict[str, dict[str, Any]]) -> list[str]:
    """The NVRTC twins against their load_inline twins (the same verdict and reason), for the
    report; [] when no NVRTC fixture ran."""
    twins = [r for r in every.values() if r.get("twin")]
    if not twins:
        return []
    lines = ["", "NVRTC twins with their load_inline twin's verdict and reason:"]
    same = 0
    for r in twins:
        other = every.get(r["twin"])
        if other is None:
            lines.append(f"- {r['fixture']}: {r['verdict']} {r['reason']} (its twin did not run)")
            continue
        ok = (r["verdict"], r["reason"]) == (other["verdict"], other["reason"])
        same += ok
        lines.append(f"- {r['fixture']}: {r['verdict']} {r['reason']}; {r['twin']}: "
                     f"{other['verdict']} {other['reason']}: {'same' if ok else '**DIFFERENT**'}")
    lines.insert(1, f"twins with the same verdict: {same} of {len(twins)}")
    return lines


def _seeds(text: str) -> tuple[int, ...]:
    """--seeds: comma-separated integers >= 0."""
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds wants integers like 0,1, got {text!r}")
    if any(s < 0 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds must be >= 0, got {text!r}")
    return seeds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", nargs="*", default=(), help="fixtures whose name contains one of these")
    ap.add_argument("--seeds", type=_seeds, default=(0, 1),
                    help="gate seeds, comma-separated (default 0,1)")
    ap.add_argument("--distributions", choices=("all", "default"), default="all")
    ap.add_argument("--no-prebuild", action="store_true", help="let each evaluator build")
    ap.add_argument("--hide-host-ms", type=float, default=None,
                    help="timing.hide_host_ms: hide up to this much host time per call behind a "
                         "GPU spin (default: TimingConfig's, 1 ms; 0: off)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="evaluate every fixture this many times, each pass a new candidate "
                         "(default 1); the report counts a fixture right only when every pass is")
    ap.add_argument("--list", action="store_true",
                    help="only list the fixtures and what each must get (no GPU needed)")
    args = ap.parse_args(argv)
    from evokernel.errors import ConfigError
    try:                                  # bad settings are refused before anything is made
        config = report_config(args.seeds, args.distributions, args.hide_host_ms)
    except ConfigError as e:
        ap.error(str(e))
    if args.list:
        for f in discover(ROOT, tuple(args.only)):
            print(f"{f.kind:6s} {f.name:34s} {f.verdict:6s} {f.reason:22s} "
                  f"{f.problem.relative_to(ROOT)}")
        return 0
    import torch
    if not torch.cuda.is_available():
        print("gate_report: needs a CUDA GPU (run it with scripts/gpu_check.sh gate-report on the "
              "H200); --list works without one", file=sys.stderr)
        return 2
    from loguru import logger
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    out = args.out or ROOT / "results" / f"gate-report-{datetime.date.today().isoformat()}"
    out.mkdir(parents=True, exist_ok=True)
    fixtures = discover(ROOT, tuple(args.only))
    print(f"{len(fixtures)} fixtures on {len({f.problem for f in fixtures})} problems; gate: "
          f"{config.gate.distributions} x seeds {config.gate.seeds}, factor "
          f"{config.gate.tolerance_factor:g}; timing hide_host_ms "
          f"{config.timing.hide_host_ms:g}", flush=True)
    t0 = time.perf_counter()
    if args.repeat < 1:
        ap.error(f"--repeat must be >= 1, got {args.repeat}")
    rows, infos = evaluate(fixtures, config, out, prebuild=not args.no_prebuild,
                           repeat=args.repeat)
    evidence = factor_evidence(rows)
    md = render(rows, evidence, config.gate.tolerance_factor)
    (out / "gate_report.md").write_text(md)
    (out / "gate_report.json").write_text(json.dumps(
        {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "wall_s": round(time.perf_counter() - t0, 1), "config": dataclasses.asdict(config),
         "problems": infos, "rows": rows, "factor_evidence": evidence},
        indent=1, default=str))
    print("\n" + md, flush=True)
    bad = sorted({f"{r['fixture']} (pass {r.get('pass', 1)})" for r in rows if not r["ok"]})
    print(f"wrote {out}/gate_report.md and .json; "
          + (f"WRONG: {', '.join(bad)}" if bad else "every fixture got its expected verdict"))
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:              # e.g. `--list | head`
        sys.exit(141)
