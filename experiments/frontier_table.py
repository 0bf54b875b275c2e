"""Issue 21's headline table: each frontier run's best kernel beside its target and beside
Stanford CRFM's published figures, read from the run stores (no GPU needed).

    python experiments/frontier_table.py RUN_DIR [RUN_DIR ...] [--out DIR]

Each RUN_DIR is one problem's run (its store says which problem). Per run the table gives the
best accepted kernel's speedup over eager and over torch.compile, its time as a % of the memory
floor (100 = at the floor), both error ratios (candidate error / PyTorch's FP32 error, the
gate's measure), the LLM tokens the run spent, the target issue 21 sets and whether it is met,
and, when ``RUN_DIR/do_bench.json`` exists (experiments/do_bench_best.py ``--json``), the
independent ``triton.testing.do_bench`` speedups. A target is "met" when both the run's figure
and do_bench's reach it, "met by the run's timing only" without a do_bench timing, "missed" when
one falls short, "not measured" when the figure it needs is missing (no torch.compile baseline),
"no kernel" when nothing was accepted. A do_bench JSON must name the run's best kernel
(``candidate_id``, written by do_bench_best.py) or, in older files without it, the run folder.
A run whose replies a stand-in wrote, or that the fake evaluator judged, is marked in its row.
When the SASS audit (evokernel.build.sass) found instructions below FP32 in a best kernel, the
table names them and the best accepted kernel without any (the audit flags, the gate judges the
outputs: docs/architecture.md, The evaluation, as stages).

Beside them: CRFM's published figures on an L40S (their blog post "Surprisingly Fast AI-Generated
Kernels We Didn't Mean to Publish (Yet)", Stanford CRFM, 2025-05-28; % of PyTorch eager, other
GPU, other precision rules) and CRFM's own kernels measured on the H200 under this project's
gate, as issue 21 reports them (they are not re-measured here).

Writes DIR/frontier_table.md and DIR/frontier_table.json (DIR: --out, default the current
folder) and prints the table. Exit status 2 on bad input (a folder that is not a readable run, a
run named twice, a do_bench file that is not a JSON object of numbers or times another kernel,
a --do-bench for a run not listed, an --out that cannot be written), with one line naming it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: problem -> (baseline, factor): issue 21's targets on the H200 under the strict gate.
TARGETS = {"layernorm": ("compile", 1.8), "softmax": ("compile", 1.4),
           "conv2d": ("eager", 2.0), "conv2d_relu_maxpool": ("compile", 2.0),
           "matmul": ("eager", 1.0)}
#: problem -> CRFM's published speedup on an L40S, % of PyTorch eager (issue 21's figures).
CRFM_L40S_PCT = {"matmul": 101.3, "conv2d": 179.9, "softmax": 111.8, "layernorm": 484.4,
                 "conv2d_relu_maxpool": 290.1}
#: problem -> CRFM's own kernel on the H200 under this gate, as issue 21 reports it.
CRFM_ON_H200 = {
    "softmax": "0.92x eager, accepted",
    "layernorm": "Welford: 7.5x eager, 0.39x torch.compile, accepted; one-pass: rejected "
                 "(NaN at mean 1000)",
    "matmul": "0.73x eager, accepted (12.6x PyTorch's error)",
    "conv2d": "rejected: FP16 (850x PyTorch's error)",
    "conv2d_relu_maxpool": "rejected: FP16 (600x PyTorch's error)",
}


def row(run_dir: Path, bench_file: Path | None = None) -> dict[str, Any]:
    """One problem's row, from its run store and its do_bench JSON (``bench_file``, else
    ``run_dir/do_bench.json`` if it exists).

    Raises: ValueError: ``run_dir`` holds no run store (run.sqlite) or an unreadable one, or
        its do_bench file is refused (``read_bench``)."""
    if not (run_dir / "run.sqlite").is_file():
        raise ValueError(f"{run_dir}: not a run folder (no run.sqlite)")
    try:
        out, view = _read_store(run_dir)
    except Exception as e:     # a corrupt or foreign store: sqlite3, ConfigError, KeyError ...
        raise ValueError(f"{run_dir / 'run.sqlite'}: not a readable run store "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                         ) from None
    problem, best = out["problem"], view.best
    if best is not None:
        from evokernel.runs.view import compile_speedup
        cand, res = best.candidate, best.result
        vs_compile = compile_speedup(view, best)    # as `show` prints it (its fallback too)
        out["best"] = {"id": cand.id, "generation": cand.generation, "operator": cand.operator,
                       "idea": best.idea_line[:240] if cand.idea.strip() else "",
                       "eager_ms": res.reference_ms,
                       "compile_ms": res.compile_ms or view.compile_ms() or None,
                       "kernel_ms": res.candidate_ms, "vs_eager": res.speedup,
                       "vs_compile": vs_compile,
                       "pct_of_floor": res.pct_of_floor,
                       "norm_ratio": res.norm_error_ratio, "max_ratio": res.max_error_ratio,
                       "below_fp32": [f"{f.opcode} x{f.count} ({f.kernel.split('(')[0]})"
                                      for f in res.precision_audit]}
        out["best_without_below_fp32"] = _best_without_below_fp32(view, best)
    bench = bench_file or run_dir / "do_bench.json"
    out["do_bench"] = (read_bench(bench, run_dir, out["best"]["id"] if out["best"] else None)
                       if bench.is_file() else None)
    out["target"], out["met"] = judge(problem, out["best"], out["do_bench"])
    out["crfm_l40s_pct"] = CRFM_L40S_PCT.get(problem)
    out["crfm_on_h200"] = CRFM_ON_H200.get(problem)
    return out


def _best_without_below_fp32(view: Any, best: Any) -> dict[str, Any] | None:
    """When the SASS audit found instructions below FP32 in the best kernel (e.g. error-
    compensated 3xTF32 tensor-core products, whose outputs meet the FP32 bound), the best
    accepted kernel in which it found none: {id, vs_eager, vs_compile}; else None."""
    from evokernel.runs.view import compile_speedup
    if not best.result.precision_audit:
        return None
    plain = [e for e in view.entries
             if e.result is not None and e.result.accepted and not e.result.precision_audit]
    if not plain:
        return None
    e = max(plain, key=lambda e: e.speedup)
    return {"id": e.id, "vs_eager": e.speedup, "vs_compile": compile_speedup(view, e)}


def _read_store(run_dir: Path) -> tuple[dict[str, Any], Any]:
    """(the row without its do_bench and target, the run's RunView), read through
    evokernel.runs.view.load_run, the view `show` and `report` print."""
    from evokernel.report.labels import answered_by_line, scripted_note
    from evokernel.runs.view import load_run
    view = load_run(run_dir)
    usage, device = view.llm_usage, view.device.get("device")
    out: dict[str, Any] = {
        "problem": view.config.problem if view.config else view.problem,
        "run_dir": str(run_dir),
        "generations": view.completed_generations[-1] if view.completed_generations else 0,
        "candidates": len(view.entries),
        "accepted": sum(e.status == "accepted" for e in view.entries),
        "tokens": int(usage["prompt_tokens"] + usage["completion_tokens"]),
        "llm_calls": int(usage["calls"]), "device": device,
        "answered_by": answered_by_line(usage), "best": None,
        "best_without_below_fp32": None, "marks": [],
        "warnings": [w for w in (scripted_note(usage),) if w]}
    if usage.get("scripted"):
        out["marks"].append("SCRIPTED")
    if "fake" in str(device).lower():
        out["marks"].append("FAKE EVALUATOR")
        out["warnings"].append(f"FAKE EVALUATOR ({device}): its times are not measurements")
    if usage.get("batch_waiting"):
        out["marks"].append("UNFINISHED")
        out["warnings"].append(f"unfinished: {usage['batch_waiting']} LLM requests wait for "
                               "replies")
    return out, view


#: The do_bench JSON's speedups the table reads.
BENCH_KEYS = ("speedup_vs_eager", "speedup_vs_compile")


def read_bench(path: Path, run_dir: Path, best_id: str | None) -> dict[str, Any]:
    """``path``'s do_bench timing (experiments/do_bench_best.py --json), checked.

    Raises: ValueError (naming ``path``): not JSON, not an object, a speedup that is not a number
        (null is allowed: torch.compile skipped), or a timing of another kernel or run."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a do_bench JSON file ({e})") from None
    if not isinstance(data, dict) or "speedup_vs_eager" not in data:
        raise ValueError(f"{path}: not a do_bench result (a JSON object with speedup_vs_eager, "
                         "as experiments/do_bench_best.py --json writes)")
    for k in BENCH_KEYS:
        v = data.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"{path}: {k} is {v!r}, not a number")
    timed = data.get("candidate_id")
    if timed is not None and timed != best_id:
        raise ValueError(f"{path}: times kernel {timed}, but the best kernel of {run_dir} is "
                         f"{best_id}; run experiments/do_bench_best.py on it again")
    if timed is None and Path(str(data.get("run_dir", ""))).resolve() != run_dir.resolve():
        raise ValueError(f"{path}: names no kernel and another run ({data.get('run_dir')!r}), "
                         f"not {run_dir}")
    return data


def judge(problem: str, best: dict[str, Any] | None, bench: dict[str, Any] | None
          ) -> tuple[str | None, str]:
    """(the target in words, "met" / "met by the run's timing only" / "missed" / "not
    measured" / "no kernel" / "no target"); see the module docstring."""
    if problem not in TARGETS:
        return None, "no target"
    base, factor = TARGETS[problem]
    words = f">= {factor:g}x " + ("torch.compile" if base == "compile" else "eager")
    if best is None:
        return words, "no kernel"
    own = best["vs_compile" if base == "compile" else "vs_eager"]
    if own is None:
        return words, "not measured"
    if bench is None:
        return words, "met by the run's timing only" if own >= factor else "missed"
    other = bench.get("speedup_vs_compile" if base == "compile" else "speedup_vs_eager")
    if own < factor or (other is not None and other < factor):
        return words, "missed"
    return words, "met" if other is not None else "met by the run's timing only"


def _below_fp32_line(found: list[str], plain: dict[str, Any] | None) -> str:
    """The bullet under a best kernel whose SASS holds instructions below FP32 (``found``),
    naming the best accepted kernel without any (``plain``, from _best_without_below_fp32)."""
    if plain is None:
        other = "No accepted kernel is without them."
    else:
        compile_ = (f"{plain['vs_compile']:.3f}x torch.compile" if plain["vs_compile"]
                    else "torch.compile not measured")
        other = (f"Best kernel without any: {plain['id']}, {plain['vs_eager']:.3f}x eager, "
                 f"{compile_}")
    return (f"  - **below-FP32 instructions in its SASS: {', '.join(found)} (the audit flags "
            f"them; the gate judges the outputs, which meet the FP32 bound). {other}**")


def markdown(rows: list[dict[str, Any]]) -> str:
    def x(v: Any, spec: str = ".3f", unit: str = "x") -> str:
        return "-" if v is None else f"{v:{spec}}{unit}"
    lines = ["| problem | best vs eager | vs torch.compile | do_bench vs eager / compile | "
             "% of floor | error ratio norm / max | tokens | target | result | "
             "CRFM L40S | CRFM's kernel on the H200 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, d = r["best"] or {}, r["do_bench"] or {}
        bench = (f"{x(d.get('speedup_vs_eager'))} / {x(d.get('speedup_vs_compile'))}"
                 if d else "not run")
        name = r["problem"] + (f" ({', '.join(r['marks'])})" if r["marks"] else "")
        lines.append(
            f"| {name} | {x(b.get('vs_eager'))} | {x(b.get('vs_compile'))} | {bench} | "
            f"{x(b.get('pct_of_floor'), '.0f', '%')} | {x(b.get('norm_ratio'), '.2f', '')} / "
            f"{x(b.get('max_ratio'), '.2f', '')} | {r['tokens']:,} | {r['target'] or '-'} | "
            f"{r['met']} | {x(r['crfm_l40s_pct'], '.1f', '%')} | {r['crfm_on_h200'] or '-'} |")
    lines += ["", "Best kernels (run, id, generation, operator, first line of its idea):", ""]
    for r in rows:
        b = r["best"]
        lines.append(f"- {r['problem']}: " + (
            f"{r['run_dir']} {b['id']}, generation {b['generation']}, {b['operator']}: "
            f"{b['idea'] or '-'}" if b else f"{r['run_dir']}: no kernel accepted"))
        if b and b.get("below_fp32"):
            lines.append(_below_fp32_line(b["below_fp32"], r.get("best_without_below_fp32")))
        lines += [f"  - **{w}**" for w in r["warnings"]]
        if r["answered_by"]:
            lines.append(f"  - replies answered by: {r['answered_by']}")
    lines += ["", "% of floor: kernel time over the memory floor (the problem's minimum bytes "
              "over the measured copy bandwidth). CRFM L40S: their published figure, % of "
              "PyTorch eager on another GPU. CRFM's kernel on the H200: as issue 21 reports it."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="one run folder per problem")
    ap.add_argument("--out", type=Path, default=Path("."), help="where the table is written")
    ap.add_argument("--do-bench", action="append", default=[], metavar="RUN_DIR=FILE",
                    help="a run's do_bench JSON kept elsewhere than RUN_DIR/do_bench.json")
    args = ap.parse_args(argv)
    try:
        benches = bench_files(args.runs, args.do_bench)
        rows = [row(r, benches.get(r.resolve())) for r in args.runs]
    except ValueError as e:
        print(f"frontier_table: {e}", file=sys.stderr)
        return 2
    table = markdown(rows)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "frontier_table.md").write_text(table)
        (args.out / "frontier_table.json").write_text(json.dumps(rows, indent=2, default=str)
                                                      + "\n")
    except OSError as e:
        print(f"frontier_table: --out {args.out}: cannot write the table there ({e.strerror})",
              file=sys.stderr)
        return 2
    print(table, end="")
    return 0


def bench_files(runs: list[Path], specs: list[str]) -> dict[Path, Path]:
    """run folder (resolved) -> its do_bench file, from ``--do-bench RUN_DIR=FILE`` specs (split
    at the last "=").

    Raises: ValueError: a run listed twice, a spec without "=", a missing FILE, a RUN_DIR not
        among ``runs``, or a run given two files."""
    seen: set[Path] = set()
    for r in runs:
        if r.resolve() in seen:
            raise ValueError(f"{r}: named twice")
        seen.add(r.resolve())
    out: dict[Path, Path] = {}
    for spec in specs:
        run, sep, file = spec.rpartition("=")
        if not sep or not run:
            raise ValueError(f"--do-bench {spec}: expected RUN_DIR=FILE")
        key = Path(run).resolve()
        if not Path(file).is_file():
            raise ValueError(f"--do-bench {spec}: {file}: no such file")
        if key not in seen:
            raise ValueError(f"--do-bench {spec}: {run} is not one of the runs listed")
        if key in out:
            raise ValueError(f"--do-bench {spec}: {run} already has {out[key]}")
        out[key] = Path(file)
    return out


if __name__ == "__main__":
    sys.exit(main())
