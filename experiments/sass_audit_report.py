"""The SASS precision audit on the fixture kernels: each is built (the CPU does it; no GPU is
needed) and its below-FP32 instructions listed (evokernel.build.sass). The lower-precision
cheats (tests/kernels/cheats/lower_precision_*.py) and the FP16 WMMA matmul
(tests/kernels/matmul_fp16.py) must show some; the legitimate FP32 variants
(tests/kernels/legit/) none.

    python experiments/sass_audit_report.py [--only SUBSTR] [--list] [--json OUT] [--arch 9.0]

Prints one line per fixture (what it must show, what the audit found, OK or WRONG). Exit status
0 when every fixture met its expectation, 1 otherwise, 2 when nothing could be audited (no
cuobjdump, no nvcc).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: fixture -> what the audit must find: "below FP32" or "none".
BELOW, NONE = "below FP32", "none"


def fixtures(root: Path = ROOT, only: str | None = None) -> list[tuple[Path, str]]:
    """(fixture file, expectation), cheats first; ``only``: names containing it."""
    cheats = sorted((root / "tests/kernels/cheats").glob("lower_precision_*.py"))
    found = [(p, BELOW) for p in cheats]
    found.append((root / "tests/kernels/matmul_fp16.py", BELOW))
    found += [(p, NONE) for p in sorted((root / "tests/kernels/legit").glob("*.py"))]
    return [(p, e) for p, e in found if only is None or only in p.name]


def verdict(expect: str, findings: tuple, flags: tuple[str, ...]) -> str:
    """"OK", "WRONG" or "NOT AUDITED" (the audit did not run: its flag says why)."""
    if not findings and not any(f.startswith("sass_audit:") for f in flags):
        return "NOT AUDITED"
    return "OK" if bool(findings) == (expect == BELOW) else "WRONG"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="only fixtures whose file name contains this")
    ap.add_argument("--list", action="store_true", help="list the fixtures and stop")
    ap.add_argument("--json", help="also write the findings to this file")
    ap.add_argument("--arch", default="9.0", help="GPU arch to build for (default: 9.0)")
    args = ap.parse_args(argv)
    todo = fixtures(only=args.only)
    if args.list:
        for path, expect in todo:
            print(f"{path.relative_to(ROOT)}: must show {expect}")
        return 0
    from evokernel.build.sass import summarize
    from evokernel.cli.build_only import build_kernels
    reports = build_kernels([(p, p.read_text()) for p, _ in todo], args.arch)
    rows, states = [], []
    for (path, expect), r in zip(todo, reports):
        state = verdict(expect, r.precision_audit, r.flags) if r.ok else "NOT BUILT"
        states.append(state)
        found = summarize(r.precision_audit) or next(
            (f for f in r.flags if f.startswith("sass_audit")), "-")
        print(f"{state:<11} {path.relative_to(ROOT)} (must show {expect}): {found}")
        rows.append({"fixture": str(path.relative_to(ROOT)), "expect": expect, "state": state,
                     "findings": [f.__dict__ for f in r.precision_audit], "flags": list(r.flags)})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if all(s in ("NOT AUDITED", "NOT BUILT") for s in states):
        return 2
    return 0 if all(s == "OK" for s in states) else 1


if __name__ == "__main__":
    sys.exit(main())
