"""The program ``ncu`` profiles (evokernel.engine.ncu): one candidate call on the problem's inputs.

Usage: ``python -m evokernel.engine.ncu_target WORK_DIR CACHE_DIR ARCH``, with ``problem.py``
and ``candidate.py`` in WORK_DIR. Builds ``ModelNew(*get_init_inputs())`` and the inputs under
``torch.manual_seed(0)`` on the visible GPU, loads the candidate's extension from the build cache
(evokernel.build.cache.load_candidate), calls it once to warm up, then once between
``cudaProfilerStart`` and ``cudaProfilerStop`` (what ``ncu --profile-from-start off`` profiles).
Exits with status 0 when the profiled call returned, 2 when anything raised (traceback on
stderr). Runs candidate code: start it only with evokernel.sandbox.worker_env().
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch
    from evokernel.build.cache import load_candidate
    from evokernel.gate.maths import map_tensors
    from evokernel.problem import exec_module

    work, cache_dir, arch = Path(argv[0]), Path(argv[1]), argv[2]
    try:
        problem = exec_module((work / "problem.py").read_text(encoding="utf-8"),
                              "evokernel_ncu_problem", str(work / "problem.py"))
        module = load_candidate((work / "candidate.py").read_text(encoding="utf-8"),
                                "evokernel_ncu_candidate", cache_dir, arch)
        device = torch.device("cuda", 0)
        torch.manual_seed(0)
        model = module.ModelNew(*problem.get_init_inputs()).to(device)
        torch.manual_seed(0)
        inputs = map_tensors(list(problem.get_inputs()), lambda t: t.to(device))
        with torch.no_grad():
            model(*inputs)
            torch.cuda.synchronize(device)
            torch.cuda.cudart().cudaProfilerStart()
            model(*inputs)
            torch.cuda.synchronize(device)
            torch.cuda.cudart().cudaProfilerStop()
    except Exception:  # noqa: BLE001 - reported to the profiler's caller through stderr
        traceback.print_exc()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
