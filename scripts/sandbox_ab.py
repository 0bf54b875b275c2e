#!/usr/bin/env python3
"""On the GPU: what containing the workers (evokernel.sandbox) costs the engine's throughput.

Runs the same tune variants of a seed kernel (evokernel.bench.plan.throughput_variants) through
CudaEvaluator with ``EvalConfig(sandbox=True)`` and ``sandbox=False``, in alternating rounds,
each arm with a fresh cache (cold: build, gate, time) and then again from that cache (warm), and
writes candidates per minute for each arm and the contained/uncontained ratio:

    python3 scripts/sandbox_ab.py --problem layernorm --variants 16 --rounds 2 \
        [--form nvrtc] --out results/<dir>/sandbox_ab.md

``--form nvrtc`` uses the NVRTC twins of the variants (problems/seeds/nvrtc): a build takes about
a second instead of about 30 s, so what containment adds per candidate (a contained build
process, a contained GPU worker) is a larger share of each candidate's time than with load_inline.

Issue 20's bar: the contained arm keeps at least 95% of the uncontained rate, cold and warm
(exit status 1 when it does not). It also checks that every variant got the same verdict in
both arms, and that the contained arm really was contained (exit status 2 otherwise).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path


def _arm(problem, variants, contained: bool, peaks: Path) -> dict:
    from evokernel.config import EvalConfig
    from evokernel.engine.evaluator import CudaEvaluator
    cache = Path(tempfile.mkdtemp(prefix=f"sandbox-ab-{'on' if contained else 'off'}-"))
    cache.chmod(0o755)
    if peaks.is_dir():
        shutil.copytree(peaks, cache / "peaks")
    cfg = EvalConfig(cache_dir=str(cache), sandbox=contained, measure_compile=False)
    out = {"contained": contained}
    try:
        for phase in ("cold", "warm"):
            t0 = time.perf_counter()
            ev = CudaEvaluator(problem, cfg)
            setup_s = time.perf_counter() - t0
            try:
                if contained and not (ev.containment and ev.containment.contained):
                    raise SystemExit(f"the contained arm is not contained: {ev.containment}")
                t1 = time.perf_counter()
                results = ev.evaluate([v.candidate for v in variants])
                out[f"{phase}_s"] = time.perf_counter() - t1
            finally:
                ev.close()
            out[f"{phase}_setup_s"] = setup_s
            out["verdicts"] = [r.reason.value for r in results]
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problem", default="layernorm")
    p.add_argument("--variants", type=int, default=16)
    p.add_argument("--rounds", type=int, default=1, help="contained/uncontained pairs")
    p.add_argument("--form", choices=("load_inline", "nvrtc"), default="load_inline",
                   help="the variants' candidate form (default: load_inline)")
    p.add_argument("--out", type=Path, default=Path("sandbox_ab.md"))
    args = p.parse_args(argv)
    from evokernel.bench.plan import throughput_variants
    from evokernel.config import default_cache_dir
    from evokernel.problem import load_problem
    problem = load_problem(args.problem, form=args.form)
    variants = throughput_variants([(args.problem, args.variants)], form=args.form)
    arms: list[dict] = []
    for i in range(args.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        arms += [_arm(problem, variants, c, default_cache_dir() / "peaks") for c in order]
    rate = {}
    for contained in (True, False):
        mine = [a for a in arms if a["contained"] is contained]
        for phase in ("cold", "warm"):
            total = sum(a[f"{phase}_s"] for a in mine)
            rate[(contained, phase)] = 60.0 * len(variants) * len(mine) / total
    ratio = {ph: rate[(True, ph)] / rate[(False, ph)] for ph in ("cold", "warm")}
    same = len({tuple(a["verdicts"]) for a in arms}) == 1
    lines = [f"# sandbox A/B: {args.problem}, {len(variants)} {args.form} variants, "
             f"{args.rounds} round(s)",
             "", "| arm | cold per min | warm per min |", "|---|---|---|"]
    lines += [f"| {'contained' if c else 'uncontained'} | {rate[(c, 'cold')]:.2f} | "
              f"{rate[(c, 'warm')]:.2f} |" for c in (True, False)]
    lines += ["", f"contained / uncontained: cold {ratio['cold']:.3f}, warm {ratio['warm']:.3f} "
              "(bar: >= 0.95)", f"same verdicts in every arm: {same}", "",
              "```json", json.dumps(arms, indent=1), "```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines[:9]))
    if not same:
        return 2
    return 0 if min(ratio.values()) >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
