"""The Python API in one page: configure a population and its operators, and plug in your own
mutation operator next to evokernel's LLM-free tune operator.

    python experiments/custom_operator.py [PROBLEM] [--generations G]

An operator is any object with a ``name`` and ``__call__(parent, ctx) -> list[Candidate]``; it only
writes source code. evokernel builds, gates and times what it returns, on a GPU: without one the
script stops with one line before it creates anything.
"""
from __future__ import annotations

import argparse
import re
import sys

import common

from evokernel import Evolution, RunConfig, SearchConfig, load_problem
from evokernel.operators import TuneMutation
from evokernel.operators.base import SearchContext
from evokernel.records import Candidate


class DoubleTunables:
    """A user-defined mutation: double every ``// tune:`` constant that has a larger listed
    value (a crude "more work per thread / bigger blocks" move)."""

    name = "double"

    def __call__(self, parent: Candidate, ctx: SearchContext) -> list[Candidate]:
        from evokernel.operators.tunables import find_tunables, set_tunables
        changes = {t.name: str(2 * int(t.value)) for t in find_tunables(parent.source)
                   if re.fullmatch(r"\d+", t.value) and str(2 * int(t.value)) in t.choices}
        if not changes:
            return []
        source = set_tunables(parent.source, changes)
        idea = "double " + ", ".join(f"{k}->{v}" for k, v in sorted(changes.items()))
        return [ctx.child(source, idea=idea, parents=[parent], operator=self.name)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", default="softmax",
                    help="built-in problem name or KernelBench-format file (default: softmax)")
    ap.add_argument("--generations", type=int, default=2, help="generations (default: 2)")
    ap.add_argument("--run-dir", help="run directory (none: runs/<problem>-<time>)")
    args = ap.parse_args()
    problem = load_problem(args.problem)
    common.require_gpu()
    config = RunConfig(problem=args.problem, run_dir=args.run_dir,
                       search=SearchConfig(population_size=4, offspring_per_generation=6,
                                           generations=args.generations, seed=1))
    evolution = Evolution(problem, config,
                          mutations=[TuneMutation(), DoubleTunables()],
                          on_generation=lambda g: print(f"gen {g.generation}: best "
                                                        f"{g.best_speedup:.3f}x "
                                                        f"valid {g.valid}/{g.total}"))
    result = evolution.run()
    if result.best:
        cand, res = result.best
        print(f"best: {res.speedup:.3f}x by {cand.operator} ({cand.idea}); {result.best_path}")


if __name__ == "__main__":
    sys.exit(common.run_script("custom_operator", main))
