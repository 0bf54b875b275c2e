"""Build candidate files in parallel into the build cache, and print each build's time.

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
for f, r in zip(files, results):
    print(f"{str(f):<45} {'ok' if r.ok else 'FAILED':<7} {r.build_s:6.1f} s"
          f"{'  (cache)' if r.cache_hit else ''}  {' '.join(r.flags)}")
    if not r.ok:
        print(r.log[-1500:])
print(f"{len(files)} builds in {time.perf_counter() - t0:.1f} s wall on {builder.workers} workers")
