"""On a GPU machine: the Dask evaluator through a one-GPU-worker local cluster against the local
engine, in the same run (issue 16's "must show" on the one-GPU H200):

1. ``gate``: every gate fixture (experiments/gate_report.py: tests/kernels/cheats, legit, the
   FP16 matmul) through both engines; each fixture must get the same verdict and reason.
2. ``cold``: the bench's cold throughput phase (32 tune variants of the seed kernels, empty
   build cache each) through both; Dask's candidates/min must be within 10% of the local one's.

    python scripts/dask_vs_local.py [--phases gate,cold] [--out DIR] [--build-workers 8]
        [--local-gate GATE_REPORT.json] [--local-bench BENCH_THROUGHPUT.json]
        [--rounds 2] [--throughput layernorm=8,matmul=8]

``--rounds`` repeats the cold comparison with the order alternating (session 18's one run, local
first, found the Dask half's builds 30% slower with the same CPU profile: an order effect could
not be told apart from an engine one).

``--local-gate`` and ``--local-bench`` take the local engine's half from a gate report
(experiments/gate_report.py's JSON; every pass's verdicts) or a bench run (evokernel.bench's
bench_throughput.json, its ``cold`` phase over the same tune variants) made earlier in the same
GPU call, so that only the Dask half runs again: each half costs minutes of GPU time.

Writes DIR/dask_vs_local.json and .md (default results/dask-vs-local-<date>), keeping the other
phase's result from an earlier call into DIR; exit status 0 when the checks that ran passed. Needs the 'dask' extra and a CUDA GPU.
"""
import argparse
import dataclasses
import datetime
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gate_report():
    spec = importlib.util.spec_from_file_location("gate_report",
                                                  ROOT / "experiments" / "gate_report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def read_json(path: Path, what: str, shape: type) -> object:
    """The JSON in ``path``, which must be ``what`` (a ``shape``: dict or list). Raises
    SystemExit with one line naming the file for a missing file, a folder, bytes that are not
    UTF-8 JSON, or another shape."""
    path = Path(path)
    if path.is_dir():
        raise SystemExit(f"{path}: a folder, not {what}")
    if not path.is_file():
        raise SystemExit(f"{path}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SystemExit(f"{path}: not valid JSON ({e}); expected {what}") from None
    if not isinstance(data, shape):
        raise SystemExit(f"{path}: holds a JSON {type(data).__name__}, not {what}")
    return data


def report_verdicts(path: Path, fixtures=None) -> dict:
    """fixture -> (verdict, reason) from a gate report's JSON (experiments/gate_report.py), over
    every pass it holds.

    fixtures: the gate fixtures this run would evaluate (gate_report.discover); when given, the
        report must hold every one of them.
    Raises SystemExit naming the file when it is not a gate report, holds no rows, lacks one of
    ``fixtures``, or when one fixture got different verdicts in different passes (the local
    engine disagreed with itself: no reference)."""
    what = "a gate report (experiments/gate_report.py's JSON)"
    data = read_json(path, what, dict)
    rows = data.get("rows")
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: no 'rows' list; expected {what}")
    seen: dict = {}
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str)
                                              for k in ("fixture", "verdict", "reason")):
            raise SystemExit(f"{path}: row {i} lacks fixture, verdict or reason")
        seen.setdefault(r["fixture"], set()).add((r["verdict"], r["reason"]))
    if not seen:
        raise SystemExit(f"{path}: no gate report rows")
    split = sorted(k for k, v in seen.items() if len(v) > 1)
    if split:
        raise SystemExit(f"{path}: verdicts differ between passes for {', '.join(split)}")
    missing = sorted(f.name for f in fixtures or () if f.name not in seen)
    if missing:
        raise SystemExit(f"{path}: lacks {len(missing)} of today's {len(fixtures)} gate "
                         f"fixtures ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''});"
                         " a report of this commit's fixtures is needed")
    return {k: next(iter(v)) for k, v in seen.items()}


def gate_phase(out: Path, address: str, local: dict | None = None,
               local_from: str = "this run") -> dict:
    """local: the local engine's verdicts read by check_given (None: evaluate them here)."""
    report = gate_report()
    fixtures = report.discover(ROOT)
    config = report.report_config()
    verdicts = {"local": local} if local is not None else {}
    for engine, dask in (("local", None), ("dask", address)):
        if engine in verdicts:
            continue
        rows, _ = report.evaluate(fixtures, config, out / f"gate-{engine}", dask=dask)
        verdicts[engine] = {r["fixture"]: (r["verdict"], r["reason"]) for r in rows}
    differ = sorted(f"{k}: local {verdicts['local'].get(k)} vs dask {verdicts['dask'].get(k)}"
                    for k in verdicts["local"] if verdicts["local"][k] != verdicts["dask"].get(k))
    expected = {f.name: (f.verdict, f.reason) for f in fixtures}
    right = {e: sum(v.get(k) == expected[k] for k in expected) for e, v in verdicts.items()}
    return {"fixtures": len(fixtures), "right": right, "differ": differ,
            "local_from": local_from,
            "passed": not differ and len(verdicts["dask"]) == len(fixtures)
            and len(verdicts["local"]) == len(fixtures)}


def bench_cold(path: Path, variants) -> dict:
    """The ``cold`` phase of a bench_throughput.json (evokernel.bench), checked to be over
    ``variants`` (its load_inline candidates; a bench of ``--phases forms`` also lists the NVRTC
    twins) and to hold a rate.

    Raises SystemExit naming the file when it is not such a file, has no cold phase with a
    positive ``per_min``, or measured other candidates."""
    what = "evokernel.bench's bench_throughput.json"
    data = read_json(path, what, dict)
    phases = data.get("phases")
    cold = phases.get("cold") if isinstance(phases, dict) else None
    if not isinstance(cold, dict):
        raise SystemExit(f"{path}: no cold phase; expected {what} of a run with --phases cold")
    rate = cold.get("per_min")
    if not isinstance(rate, (int, float)) or not rate > 0:
        raise SystemExit(f"{path}: its cold phase has no positive per_min (got {rate!r})")
    listed = data.get("candidates") if isinstance(data.get("candidates"), list) else []
    ids = [c.get("id") for c in listed
           if isinstance(c, dict) and c.get("form", "load_inline") == "load_inline"]
    if sorted(ids) != sorted(v.candidate.id for v in variants):
        raise SystemExit(f"{path}: its cold phase measured other candidates than this script's "
                         f"{len(variants)} tune variants (--throughput differs?)")
    return cold


def cold_phase(out: Path, address: str, work: Path, build_workers: int | None,
               local: dict | None = None, local_from: str = "this run", rounds: int = 1,
               throughput: tuple | None = None) -> dict:
    """local: the local engine's cold phase read by check_given (None: measure it here).
    rounds: measure both engines this many times, the order alternating (local first in even
    rounds), each from an empty cache, so that neither gains from going second (a machine that
    warms up or slows down over minutes); the ratio pools the rounds (candidates over evaluate
    seconds per engine)."""
    from evokernel.bench.deps import fresh_dir
    from evokernel.bench.plan import DEFAULT_THROUGHPUT, BenchPlan, throughput_variants
    from evokernel.bench.run import cuda_deps
    from evokernel.bench.throughput import throughput_phase
    from evokernel.engine.factory import make_evaluator
    plan = BenchPlan(results_dir=out, work_dir=work, phases=("cold",),
                     build_workers=build_workers, throughput=throughput or DEFAULT_THROUGHPUT)
    variants = throughput_variants(plan.throughput)
    deps = cuda_deps(plan)
    per_round = []
    for r in range(rounds):
        stats = {"local": local} if local is not None else {}
        for engine, dask in (("local", None), ("dask", address))[::1 if r % 2 == 0 else -1]:
            if engine in stats:
                continue
            cache = fresh_dir(work / f"cold-{engine}-{r}")
            deps.prepare_cache(cache)
            d = dataclasses.replace(deps, make_evaluator=lambda p, c, dask=dask: make_evaluator(
                p, c, log_dir=Path(c.cache_path) / "logs", dask=dask))
            tp = {"candidates": [{"problem": v.problem, "id": v.candidate.id} for v in variants]}
            stats[engine] = throughput_phase("cold", plan, variants, cache, d, tp).to_dict()
        stats["first"] = "local" if r % 2 == 0 else "dask"
        per_round.append(stats)
    pooled = {e: pool([st[e] for st in per_round]) for e in ("local", "dask")}
    ratio = pooled["dask"]["per_min"] / pooled["local"]["per_min"]
    return {"local": pooled["local"], "dask": pooled["dask"], "dask_over_local": round(ratio, 3),
            "local_from": local_from, "passed": ratio >= 0.9,
            "rounds": per_round,
            "throughput": [list(t) for t in plan.throughput]}


def pool(stats: list[dict]) -> dict:
    """One engine's cold phases of several rounds as one: candidates, accepted, evaluate and
    set-up seconds summed; per_min over the summed evaluate seconds, as the bench's."""
    from evokernel.bench.throughput import per_minute
    if len(stats) == 1:
        return stats[0]
    out = {k: sum(s[k] for s in stats) for k in ("candidates", "accepted", "evaluate_s",
                                                 "setup_s")}
    out["per_min"] = per_minute(out["candidates"], out["evaluate_s"])
    return out


def markdown(rep: dict) -> str:
    lines = [f"# Dask (one GPU worker) vs the local engine, {rep['date']}", ""]
    if "gate" in rep:
        g = rep["gate"]
        lines += [f"gate fixtures: {g['fixtures']}; right: local {g['right']['local']}, dask "
                  f"{g['right']['dask']} (local verdicts from {g.get('local_from', 'this run')}); "
                  f"verdicts that differ: {len(g['differ'])} "
                  f"({'passed' if g['passed'] else 'FAILED'})", ""] + [f"- {d}" for d in
                                                                       g["differ"]] + [""]
    if "cold" in rep:
        c = rep["cold"]
        lines += ["| engine | candidates | accepted | evaluate s | per min | set-up s |",
                  "|---|---|---|---|---|---|"]
        for e in ("local", "dask"):
            s = c[e]
            lines.append(f"| {e} | {s['candidates']} | {s['accepted']} | "
                         f"{s['evaluate_s']:.1f} | {s['per_min']:.2f} | {s['setup_s']:.1f} |")
        if len(c.get("rounds", [])) > 1:
            lines += ["", "rounds (each from an empty cache; per min local, dask): " + "; ".join(
                f"{x['first']} first: {x['local']['per_min']:.2f}, {x['dask']['per_min']:.2f}"
                for x in c["rounds"])]
        lines += ["", f"local from: {c.get('local_from', 'this run')}",
                  f"dask / local: {c['dask_over_local']} (>= 0.9: "
                  f"{'passed' if c['passed'] else 'FAILED'})", ""]
    return "\n".join(lines)


def check_given(args, phases: list[str]) -> dict:
    """Read --local-gate and --local-bench now (SystemExit naming a file that is missing or does
    not hold what it must), so a bad one costs no GPU time. Returns phase -> the local engine's
    half read from its file ("gate": verdicts, "cold": the cold phase's stats)."""
    from evokernel.bench.plan import BenchPlan, throughput_variants
    for flag, path, phase in (("--local-gate", args.local_gate, "gate"),
                              ("--local-bench", args.local_bench, "cold")):
        if path is not None and phase not in phases:
            raise SystemExit(f"dask_vs_local: {flag} goes with --phases {phase}")
    local = {}
    if args.local_gate is not None:
        local["gate"] = report_verdicts(args.local_gate, gate_report().discover(ROOT))
    if args.local_bench is not None:
        plan = BenchPlan(results_dir=Path("."), work_dir=args.work_dir, phases=("cold",))
        local["cold"] = bench_cold(args.local_bench, throughput_variants(plan.throughput))
    return local


def main(argv=None) -> int:
    from evokernel.bench.cli import throughput_arg
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", default="gate,cold")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "evokernel-bench")
    ap.add_argument("--build-workers", type=int, default=8)
    ap.add_argument("--local-gate", type=Path, default=None,
                    help="the local engine's gate report JSON from this call (only Dask runs)")
    ap.add_argument("--local-bench", type=Path, default=None,
                    help="the local engine's bench_throughput.json from this call (its cold "
                         "phase; only Dask runs)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="cold: measure both engines this many times, alternating which goes "
                         "first (default 1: local, then Dask)")
    ap.add_argument("--throughput", type=throughput_arg, default=None, metavar="P=N,...",
                    help="cold: tune variants per problem (default: the bench's, "
                         "layernorm=16,conv2d_relu_maxpool=8,matmul=8)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: at least 1, got {args.rounds}")
    if args.local_bench is not None and (args.rounds > 1 or args.throughput is not None):
        ap.error("--local-bench takes the local half from a file: no --rounds or --throughput")
    phases = [p for p in args.phases.split(",") if p]
    if set(phases) - {"gate", "cold"}:
        ap.error(f"--phases: gate and/or cold, got {args.phases}")
    local = check_given(args, phases)  # a bad file is named before any GPU work
    import torch
    if not torch.cuda.is_available():
        print("dask_vs_local: needs a CUDA GPU", file=sys.stderr)
        return 2
    from evokernel.cluster.connect import local_cluster
    today = datetime.date.today().isoformat()
    out = args.out or ROOT / "results" / f"dask-vs-local-{today}"
    out.mkdir(parents=True, exist_ok=True)
    rep = {"date": today}
    earlier = out / "dask_vs_local.json"
    if earlier.is_file():             # the other half, from an earlier call into the same folder
        rep.update({k: v for k, v in json.loads(earlier.read_text()).items() if k != "date"})
    cluster = local_cluster([0], args.build_workers)
    try:
        if "gate" in phases:
            rep["gate"] = gate_phase(out, cluster.scheduler_address, local.get("gate"),
                                     str(args.local_gate or "this run"))
        if "cold" in phases:
            rep["cold"] = cold_phase(out, cluster.scheduler_address, args.work_dir,
                                     args.build_workers, local.get("cold"),
                                     str(args.local_bench or "this run"), args.rounds,
                                     args.throughput)
    finally:
        cluster.close()
    (out / "dask_vs_local.json").write_text(json.dumps(rep, indent=2))
    (out / "dask_vs_local.md").write_text(markdown(rep))
    print(markdown(rep))
    return 0 if all(rep[p]["passed"] for p in phases) else 1


if __name__ == "__main__":
    sys.exit(main())
