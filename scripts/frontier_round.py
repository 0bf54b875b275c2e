"""The CPU side of a batch-mode search between two GPU steps (`scripts/gpu_check.sh frontier`):
for each run, import the reply files written so far, resume the run on this machine without a
GPU (it makes the rounds that need only replies, evokernel.engine.deferred, and stops where it
needs new replies or the GPU), and list the request files that still wait for a reply, one path
per line, for whoever answers them (each in a fresh context, from that file alone).

    python scripts/frontier_round.py RUN_DIR=BATCH_DIR [...] [--manifest answered_by.json]
    python scripts/frontier_round.py --root ROOT --problems "layernorm matmul" [--manifest F]

``--root``/``--problems`` name the layout of gpu_check's frontier stage: ROOT/<problem> with its
requests in ROOT/<problem>-batch. ``--manifest`` is copied into each BATCH_DIR/replies/ before
the import (evokernel.llm.batch_import reads who answered from it). Exit status 0; 2 on bad
input (a missing run folder), with one line.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from evokernel.cli import main as cli


def pairs(args: argparse.Namespace) -> list[tuple[Path, Path]]:
    if args.root:
        return [(Path(args.root) / p, Path(args.root) / f"{p}-batch")
                for p in args.problems.split()]
    out = []
    for pair in args.runs:
        run, sep, batch = pair.partition("=")
        if not sep:
            raise SystemExit(f"frontier_round: {pair!r}: expected RUN_DIR=BATCH_DIR")
        out.append((Path(run), Path(batch)))
    return out


def waiting(batch: Path) -> list[Path]:
    """The request files of ``batch`` without a reply file (the .md view where there is one)."""
    out = []
    for req in sorted((batch / "requests").glob("*.json")):
        if not (batch / "replies" / f"{req.stem}.txt").exists():
            md = req.with_suffix(".md")
            out.append(md if md.exists() else req)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="RUN_DIR=BATCH_DIR pairs")
    ap.add_argument("--root", help="gpu_check's FRONTIER_ROOT")
    ap.add_argument("--problems", default="", help="gpu_check's FRONTIER_PROBLEMS")
    ap.add_argument("--manifest", type=Path, help="answered_by.json to put beside the replies")
    args = ap.parse_args(argv)
    todo = pairs(args)
    for run, _ in todo:
        if not (run / "run.sqlite").is_file():
            print(f"frontier_round: {run}: not a run folder (no run.sqlite); start it on the GPU "
                  "(scripts/gpu_check.sh frontier)", file=sys.stderr)
            return 2
    if args.manifest is not None and not args.manifest.is_file():
        print(f"frontier_round: {args.manifest}: no such file", file=sys.stderr)
        return 2
    answer: list[Path] = []
    for run, batch in todo:
        print(f"== {run}", flush=True)
        if args.manifest is not None:
            (batch / "replies").mkdir(parents=True, exist_ok=True)
            shutil.copy2(args.manifest, batch / "replies" / "answered_by.json")
        if (batch / "replies").is_dir():
            cli.main(["llm", "import", str(batch), str(run)])
        cli.main(["run", "--resume", str(run), "--llm-batch", str(batch)])
        answer += waiting(batch)
    print(f"to answer ({len(answer)}):")
    for path in answer:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
