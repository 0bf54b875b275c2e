"""Print the short Markdown table of a gpu_check.sh results folder (it ends the device log).

    python scripts/summarize.py RESULTS_DIR
"""
import json
import sys
from collections import Counter
from pathlib import Path

from evokernel.runs.store import RunStore


def fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


def main(root: Path) -> None:
    env = (root / "env.txt").read_text().strip().splitlines() if (root / "env.txt").exists() else []
    print(f"# evokernel GPU check: {root}\n")
    for line in env:
        print(f"    {line}")
    checks = sorted(root.glob("check_*.json"))
    if checks:
        print("\n| problem | kernel | verdict | reason | norm ratio | max ratio | eager ms | "
              "compile ms | kernel ms | speedup | vs compile | % of floor |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for f in checks:
            data = json.loads(f.read_text())
            for k in data["kernels"]:
                print(f"| {data['problem']} | {Path(k['kernel']).name} | {k['verdict']} | "
                      f"{k['reason']} | {fmt(k['norm_error_ratio'], '.3g')} | "
                      f"{fmt(k['max_error_ratio'], '.3g')} | {fmt(k['reference_ms'])} | "
                      f"{fmt(k['compile_ms'])} | {fmt(k['candidate_ms'])} | "
                      f"{k['speedup']:.3f} | {k['compile_speedup']:.3f} | "
                      f"{fmt(k['pct_of_floor'], '.0f')} |")
    for run in sorted(p for p in root.glob("run_*") if (p / "run.sqlite").exists()):
        store = RunStore(run, read_only=True)   # leaves committed runs untouched
        results, cands = store.results(), store.candidates()
        gens = store.generations()
        print(f"\n## {run.name}: {len(cands)} candidates, "
              f"{sum(r.accepted for r in results.values())} accepted")
        print("\n| generation | best speedup | valid/total |\n|---|---|---|")
        for g in gens:
            print(f"| {g['generation']} | {g['best_speedup']:.3f} | {g['valid']}/{g['total']} |")
        ops = Counter(c.operator for c in cands.values())
        reasons = Counter(r.reason.value for r in results.values())
        print(f"\noperators: {dict(ops)}; verdict reasons: {dict(reasons)}")
        usage = store.llm_usage()
        if usage["calls"]:
            print(f"LLM calls: {usage['calls']} ({usage['cached']} from cache), "
                  f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens")
        best = store.best()
        if best:
            c, r = best
            print(f"best: {c.id} gen {c.generation} {c.operator} '{c.idea[:70]}': "
                  f"{r.speedup:.3f}x ({r.reference_ms:.4f} -> {r.candidate_ms:.4f} ms)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
