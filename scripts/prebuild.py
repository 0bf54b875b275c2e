"""Build candidate files in parallel into the build cache, and print each build's time, split
into its compile steps (from ninja's own log: the .cu file, the generated main.cpp, the link).

    python scripts/prebuild.py [--full-headers] [--cache DIR] KERNEL.py [KERNEL.py ...]

--full-headers builds the sources as written (EvalConfig.trim_headers=False; see
evokernel.build.headers), --cache DIR into another cache (e.g. a fresh one for a cold A/B).
"""
import argparse
import time
from pathlib import Path

from evokernel.build.builder import Builder, device_arch
from evokernel.config import EvalConfig
from evokernel.records import Candidate

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("kernels", nargs="+", type=Path, help="candidate files (KernelBench format)")
ap.add_argument("--full-headers", action="store_true",
                help="build the sources as written (no <torch/extension.h> trimming)")
ap.add_argument("--cache", help="build cache folder (default: evokernel's)")
args = ap.parse_args()
full = args.full_headers
files = [f for f in args.kernels if f.name != "__init__.py"]
cfg = EvalConfig(trim_headers=not full, cache_dir=args.cache)
t0 = time.perf_counter()
with Builder(cfg.cache_path, arch=device_arch(), timeout_s=cfg.build_timeout_s,
             workers=cfg.build_workers, trim_headers=cfg.trim_headers) as builder:
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
print(f"{len(files)} builds in {time.perf_counter() - t0:.1f} s wall on {builder.workers} workers"
      f" ({'full headers' if full else 'trimmed headers'})")
