"""The reports: ``bench_<name>.json`` and ``bench_<name>.md`` per benchmark, and the short
Markdown table printed last."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from evokernel.bench.plan import (FAULTS_EVIDENCE, FAULTS_TEST, MAX_DO_BENCH_DISAGREEMENT,
                                  MAX_SPEEDUP_SPREAD, THROUGHPUT_PHASES, TRIAL_OVERHEAD_MS)
from evokernel.jsonfile import write_json_atomic


def _f(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}%"


def _ok(flag: bool | None) -> str:
    return {True: "PASS", False: "FAIL", None: "n/a"}[flag]


def _target_row(label: str, t: Mapping[str, Any], extra: str = "") -> str:
    """A table row of a target dict (Target.to_dict): label, measured, bound, result."""
    return (f"| {label} | {_f(t['value'], '.2f')}{extra} | "
            f"{'>=' if t['at_least'] else '<='} {t['bound']:g}{t['unit']} | "
            f"{_ok(t['passed'])} |")


def throughput_markdown(report: Mapping[str, Any]) -> str:
    """bench_throughput.md from the throughput report dict (see run_bench)."""
    lines = ["# Engine throughput", "",
             f"Device: {report.get('device', {}).get('device', '?')}; "
             f"{report.get('cores', '?')} cores; build workers "
             f"{report.get('build_workers', '?')}; {len(report.get('candidates', []))} "
             "distinct tune variants of the seed kernels.", "",
             "Rates are candidates per minute over the wall time of the `evaluate()` calls; "
             "evaluator set-up (worker start, fp64 truths, floor) is a separate column, paid "
             "once per search. Build/eval/gate/time are sums over candidates (builds overlap). ",
             "", "| phase | candidates | accepted | evaluate s | set-up s | per min | "
             "per min incl. set-up | build s | gate s | time s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in THROUGHPUT_PHASES:
        s = report.get("phases", {}).get(name)
        if not s:
            continue
        count = (f"{s['candidates']} of {s['of_total']}" if s["of_total"] != s["candidates"]
                 else str(s["candidates"]))
        lines.append(f"| {name} | {count} | {s['accepted']} | {s['evaluate_s']:.1f} | "
                     f"{s['setup_s']:.1f} | {s['per_min']:.2f} | {s['per_min_with_setup']:.2f} "
                     f"| {s['build_s']:.1f} | {s['gate_s']:.1f} | {s['time_s']:.1f} |")
    notes = [f"- {n}: {s['note']}" for n, s in report.get("phases", {}).items() if s.get("note")]
    if any(not s.get("split_measured") for s in report.get("phases", {}).values()):
        notes.append("- gate vs time: the worker records only `eval_s` (gate + time); the time "
                     "part is estimated from each result's trial count, warm-up budget and "
                     f"medians (+{TRIAL_OVERHEAD_MS} ms per trial and function for the L2 flush "
                     "and synchronizes), the rest is the gate (module load included).")
    notes += [f"- {s}" for s in report.get("skipped", [])]
    lines += ["", "| target | measured | bound | result |", "|---|---|---|---|"]
    lines += [_target_row(t["name"], t) for t in report.get("targets", [])]
    if notes:
        lines += ["", "Notes:", *notes]
    cands = report.get("candidates", [])
    if cands:
        lines += ["", "| problem | form | candidate | tune | cold build s | cold eval s | "
                  "verdict | candidate ms | speedup |", "|---|---|---|---|---|---|---|---|---|"]
        for c in cands:
            r = (c.get("cold") or c.get("warm") or c.get("nvrtc_cold") or c.get("nvrtc_warm")
                 or {})
            lines.append(f"| {c['problem']} | {c.get('form', 'load_inline')} | {c['id']} | "
                         f"{c['label']} | "
                         f"{_f(r.get('build_s'))} | {_f(r.get('eval_s'), '.2f')} | "
                         f"{r.get('reason', '-')} | {_f(r.get('candidate_ms'), '.4f')} | "
                         f"{_f(r.get('speedup'), '.3f')} |")
    return "\n".join(lines) + "\n"


def fidelity_markdown(report: Mapping[str, Any]) -> str:
    """bench_fidelity.md from the fidelity report dict (see run_bench)."""
    runs = report.get("runs", "?")
    lines = ["# Timing fidelity", "",
             f"Each seed kernel re-measured in {runs} separate evaluators (separate worker "
             "processes). Spread = max/min - 1 of the speedup over the runs (target <= "
             f"{MAX_SPEEDUP_SPREAD:.0%}); evokernel's timing with hide_host_ms = "
             f"{report.get('hide_host_ms', 0)} ms. do_bench: `triton.testing.do_bench` in a "
             "separate process on the same kernel module (warm cache) and reference, "
             f"warm-up {report.get('do_bench_warmup_ms', '?')} ms, rep "
             f"{report.get('do_bench_rep_ms', '?')} ms, {report.get('do_bench_rounds', '?')} "
             "interleaved rounds, median; agreement = median speedup of the runs / do_bench "
             f"speedup - 1 (target within {MAX_DO_BENCH_DISAGREEMENT:.0%}). \"evokernel method "
             "there\" is evokernel's timing loop in the do_bench process against do_bench there; "
             "\"host time visible there\" is the same loop with hide_host_ms = 0, so each "
             "call's host time (Python, dispatch, launches) is counted.",
             "", "| problem | speedups (runs) | spread | do_bench speedup | agreement | "
             "candidate ms vs do_bench | evokernel method there | spread | agreement |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("problems", []):
        sps = ", ".join(_f(x.get("speedup"), ".4f") for x in r["runs"])
        lines.append(f"| {r['problem']} | {sps} | {_pct(r['speedup_spread'])} | "
                     f"{_f(r['do_bench'].get('speedup'), '.4f')} | {_pct(r['agreement'])} | "
                     f"{_pct(r['candidate_ms_agreement'])} | {_pct(r['inproc_agreement'])} | "
                     f"{_ok(r['spread_ok'])} | {_ok(r['agreement_ok'])} |")
    lines += ["", "| problem | run | verdict | reference ms | candidate ms | speedup |",
              "|---|---|---|---|---|---|"]
    for r in report.get("problems", []):
        for x in r["runs"]:
            lines.append(f"| {r['problem']} | {x.get('run')} | {x.get('reason') or '-'} | "
                         f"{_f(x.get('reference_ms'), '.4f')} | {_f(x.get('candidate_ms'), '.4f')}"
                         f" | {_f(x.get('speedup'), '.4f')} |")
        db = r["do_bench"]
        if db and not db.get("error"):
            lines.append(f"| {r['problem']} | do_bench | - | {_f(db.get('reference_ms'), '.4f')} "
                         f"| {_f(db.get('candidate_ms'), '.4f')} "
                         f"| {_f(db.get('speedup'), '.4f')} |")
            for label, k in (("evokernel timing there", "inproc"),
                             ("host time visible there", "visible")):
                if db.get(f"{k}_speedup"):
                    lines.append(f"| {r['problem']} | {label} | - "
                                 f"| {_f(db.get(f'{k}_reference_ms'), '.4f')} "
                                 f"| {_f(db.get(f'{k}_candidate_ms'), '.4f')} "
                                 f"| {_f(db.get(f'{k}_speedup'), '.4f')} |")
    notes = [f"- {r['problem']}: {r['note']}" for r in report.get("problems", []) if r["note"]]
    notes += [f"- {s}" for s in report.get("skipped", [])]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines) + "\n"


def faults_markdown(report: Mapping[str, Any]) -> str:
    """bench_faults.md: where the fault benchmark lives, and its outcome when it was run."""
    lines = ["# Faults", "",
             f"Covered by `{FAULTS_TEST}` (marked `gpu`): one batch mixes a hanging kernel, an "
             "out-of-bounds write, a host segfault, a GPU out-of-memory and a compile error with "
             "two good kernels; every good kernel must be accepted with its time, every bad one "
             "get its reason (timeout, cuda_fault, worker_crash, out_of_memory, build_error), and "
             "the engine must end with no worker alive. Its latest H200 run passed "
             f"(`{FAULTS_EVIDENCE}`, with the other gpu-marked tests).", "",
             f"Run it: `python -m pytest -q -m gpu {FAULTS_TEST}` (or `evokernel bench --phases "
             "faults`)."]
    if report.get("skipped"):
        lines += ["", str(report["skipped"])]
    if report.get("ran"):
        outcome = "passed" if report.get("passed") else "FAILED"
        lines += ["", f"This run: exit status {report.get('returncode')} in "
                  f"{report.get('wall_s', 0):.0f} s ({outcome}); output in "
                  f"`{report.get('log')}`.", "", "```",
                  str(report.get("tail", "")).strip(), "```"]
    return "\n".join(lines) + "\n"


def summary_table(throughput: Mapping[str, Any] | None, fidelity: Mapping[str, Any] | None,
                  faults: Mapping[str, Any] | None) -> str:
    """The short Markdown table printed last."""
    lines = ["| benchmark | measured | target | result |", "|---|---|---|---|"]
    if throughput:
        ph = throughput.get("phases", {})
        for t in throughput.get("targets", []):
            extra = ""
            key = {"cold candidates/min": "cold", "warm candidates/min": "warm",
                   "nvrtc cold candidates/min": "nvrtc_cold",
                   "nvrtc warm candidates/min": "nvrtc_warm"}.get(t["name"])
            if key and key in ph:
                s = ph[key]
                extra = (f" ({s['candidates']} in {s['evaluate_s']:.0f} s + set-up "
                         f"{s['setup_s']:.0f} s; {s['accepted']} accepted)")
            elif t["name"].startswith("cold /") and "sequential" in ph:
                s = ph["sequential"]
                extra = (f" (sequential {s['per_min']:.2f}/min from {s['candidates']} of "
                         f"{s['of_total']}, scaled)")
            lines.append(_target_row(f"throughput: {t['name']}", t, extra))
    if fidelity:
        for r in fidelity.get("problems", []):
            lines.append(f"| fidelity: {r['problem']} | spread {_pct(r['speedup_spread'])}, vs "
                         f"do_bench {_pct(r['agreement'])} | <= {MAX_SPEEDUP_SPREAD:.0%} / "
                         f"<= {MAX_DO_BENCH_DISAGREEMENT:.0%} | {_ok(r['spread_ok'])} / "
                         f"{_ok(r['agreement_ok'])} |")
    if faults is not None:
        result = ("PASS" if faults.get("passed") else "FAIL") if faults.get("ran") \
            else "not run in this call (bench_faults.md)"
        lines.append(f"| faults | {FAULTS_TEST} | every reason named | {result} |")
    return "\n".join(lines)


def load_report(results_dir: Path, name: str) -> dict[str, Any] | None:
    """bench_<name>.json from an earlier run in ``results_dir``, or None."""
    try:
        return json.loads((Path(results_dir) / f"bench_{name}.json").read_text())
    except (OSError, ValueError):
        return None


def write_report_files(results_dir: Path, name: str, data: Mapping[str, Any], markdown: str) -> None:
    write_json_atomic(results_dir / f"bench_{name}.json", data)
    (results_dir / f"bench_{name}.md").write_text(markdown)
