"""A search with the LLM operators (ideas, k x m implementations, crossover, repair) against a
scripted LLM served through litellm's ``mock_response``: the whole pipeline on the GPU, with no
provider. Failures (no code, compile errors) are recorded with their reasons. Without a GPU it
stops with one line before it creates anything (experiments/headline.py --mock --evaluator fake
is the GPU-free demonstration).

    python experiments/mock_llm_search.py [PROBLEM] [--generations 3] [--run-dir D]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import common  # noqa: E402

from evokernel.demo.scripted_llm import scripted_reply  # noqa: E402

from evokernel import Evolution, LLMConfig, RunConfig, SearchConfig, load_problem  # noqa: E402
from evokernel.llm.client import LLMClient  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", nargs="?", default="softmax",
                    help="built-in problem name or KernelBench-format file (default: softmax)")
    ap.add_argument("--generations", type=int, default=3, help="generations (default: 3)")
    ap.add_argument("--run-dir", default=None,
                    help="run directory (none: runs/mock-llm-<problem>)")
    ap.add_argument("--no-compile-baseline", action="store_true",
                    help="skip timing torch.compile")
    args = ap.parse_args()
    problem = load_problem(args.problem)
    common.require_gpu()
    from evokernel.config import EvalConfig
    llm_config = LLMConfig(model="openai/scripted-mock", max_concurrency=16)
    config = RunConfig(problem=args.problem, run_dir=args.run_dir or f"runs/mock-llm-{args.problem}",
                       llm=llm_config,
                       evaluation=EvalConfig(measure_compile=not args.no_compile_baseline),
                       search=SearchConfig(population_size=3, offspring_per_generation=2,
                                           generations=args.generations, ideas_per_call=2,
                                           implementations_per_idea=1, crossover_prob=0.34,
                                           seed=0))
    run_dir = Path(config.run_dir or f"runs/mock-llm-{args.problem}")
    llm = LLMClient(llm_config, cache_path=run_dir.parent / f"{run_dir.name}-llm-cache.sqlite",
                    mock_response=scripted_reply)
    evo = Evolution(problem, config, llm=llm,
                    on_generation=lambda g: print(f"gen {g.generation}: best "
                                                  f"{g.best_speedup:.3f}x valid {g.valid}/{g.total}",
                                                  flush=True))
    result = evo.run()
    store = RunStore(result.run_dir)
    cands, results = store.candidates(), store.results()
    print(f"{store.llm_usage()['calls']} LLM calls (scripted); {len(cands)} candidates")
    print(f"{'gen':>3} {'operator':<9} {'id':<16} {'parents':<16} {'verdict':<7} "
          f"{'reason':<18} {'speedup':>7}  idea")
    for cid, c in cands.items():
        r = results.get(cid)
        print(f"{c.generation:>3} {c.operator:<9} {cid:<16} {(c.parent_ids or ('-',))[0]:<16} "
              f"{r.verdict.value if r else '-':<7} {r.reason.value if r else '-':<18} "
              f"{r.speedup if r else 0:7.3f}  {c.idea.splitlines()[0][:60] if c.idea else ''}")


if __name__ == "__main__":
    sys.exit(common.run_script("mock_llm_search", main))
