"""Build candidate files in parallel into the build cache, and print each build's time, split
into its compile steps (from ninja's own log: the .cu file, the generated main.cpp, the link).

    python scripts/prebuild.py KERNEL.py [KERNEL.py ...]
"""
import sys
import time
from pathlib import Path

from evokernel.build import Builder, device_arch
from evokernel.config import EvalConfig
from evokernel.records import Candidate

files = [Path(f) for f in sys.argv[1:] if not f.endswith("__init__.py")]
cfg = EvalConfig()
t0 = time.perf_counter()
with Builder(cfg.cache_path, arch=device_arch(), timeout_s=cfg.build_timeout_s,
             workers=cfg.build_workers) as builder:
    results = builder.build_many([Candidate(source=f.read_text()) for f in files])


def ninja_steps(build_dirs) -> str:
    """'cuda.cuda.o 21.3 s, main.o 14.0 s, x.so 0.4 s' from each build folder's .ninja_log
    (tab-separated: start ms, end ms, mtime, output, hash)."""
    steps = []
    for d in build_dirs:
        log = Path(d) / ".ninja_log"
        for line in log.read_text().splitlines() if log.is_file() else []:
            cols = line.split("\t")
            if len(cols) >= 4 and cols[0].isdigit():
                steps.append(f"{cols[3]} {(int(cols[1]) - int(cols[0])) / 1e3:.1f} s")
    return ", ".join(steps)


for f, r in zip(files, results):
    print(f"{str(f):<45} {'ok' if r.ok else 'FAILED':<7} {r.build_s:6.1f} s"
          f"{'  (cache)' if r.cache_hit else ''}  {' '.join(r.flags)}")
    if r.ok and not r.cache_hit:
        print(f"    steps: {ninja_steps(r.build_dirs)}")
    if not r.ok:
        print(r.log[-1500:])
print(f"{len(files)} builds in {time.perf_counter() - t0:.1f} s wall on {builder.workers} workers")
