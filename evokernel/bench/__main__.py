"""``python -m evokernel.bench``: the engine benchmarks (see :mod:`evokernel.bench`), and the
separate do_bench process (``python -m evokernel.bench _do_bench SPEC OUT``)."""
import sys

from evokernel.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
