"""Measure the evaluation engine (issue 4): throughput cold / warm / sequential, timing fidelity
against triton.testing.do_bench, and the fault batch by reference. Same flags as `evokernel bench`.

    python scripts/bench_engine.py --dry-run --cores 16      # the plan and its time estimate
    python scripts/bench_engine.py --results-dir results/h200-<date>
"""
import sys

from evokernel.bench import main

if __name__ == "__main__":
    sys.exit(main())
