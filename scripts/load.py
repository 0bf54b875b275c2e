"""Keep the host busy the way a search does: N compiles of CUDA files that include the torch headers
at once (as candidate builds do) and M busy loops, until stopped (SIGTERM) or --seconds pass. The gate report
and the side-stream tests are run beside it to show that host load moves no verdict (issue 12).

    python3 scripts/load.py [--builds 8] [--busy 16] [--seconds 600] [--work DIR]

Run it with setsid, so that killing its process group stops every compile it started.
"""
import argparse
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

SOURCE = r"""
#include <torch/extension.h>
__global__ void load_kernel(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 2.0f + TAG;
}
torch::Tensor run(torch::Tensor x) {
    load_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel());
    return x;
}
"""


def busy(stop_at: float) -> None:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    x = 0
    while time.time() < stop_at:
        x += 1


def compile_command(work: Path, tag: int) -> list[str]:
    """nvcc compiling a .cu file that includes <torch/extension.h>, as a candidate's build does
    (the host compiler parsing the torch headers is most of a build's time)."""
    import shutil

    from torch.utils.cpp_extension import include_paths
    src = work / f"load_{tag}.cu"
    src.write_text(SOURCE.replace("TAG", f"{tag}.0f"))
    includes = [f"-I{p}" for p in include_paths()] + [
        "-I" + os.path.join(sys.prefix, "include", f"python{sys.version_info.major}."
                                                   f"{sys.version_info.minor}")]
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                "bin", "nvcc")
    return [nvcc, "-c", "-O3", "-std=c++17", "-arch=sm_90", *includes, str(src), "-o",
            str(work / f"load_{tag}.o")]


def builds(n: int, stop_at: float, work: Path) -> None:
    """Keep ``n`` compiles running until ``stop_at``; each child is ours (same process group),
    so stopping this process stops them."""
    import subprocess
    running: list[subprocess.Popen] = []
    tag = 0
    t0 = time.perf_counter()
    try:
        while time.time() < stop_at:
            running = [p for p in running if p.poll() is None]
            while len(running) < n:
                running.append(subprocess.Popen(compile_command(work, tag),
                                                stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL))
                tag += 1
            time.sleep(0.5)
        print(f"load: started {tag} compiles in {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        for p in running:
            p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", type=int, default=8, help="builds at once (default 8)")
    ap.add_argument("--busy", type=int, default=os.cpu_count() or 16,
                    help="busy loops (default: one per core)")
    ap.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    ap.add_argument("--work", type=Path, help="the compiles' scratch folder (default: a "
                    "temporary one)")
    args = ap.parse_args()
    stop_at = time.time() + args.seconds
    work = args.work or Path(tempfile.mkdtemp(prefix="evokernel-load-"))
    loops = [mp.Process(target=busy, args=(stop_at,), daemon=True) for _ in range(args.busy)]
    for p in loops:
        p.start()
    print(f"load: {args.busy} busy loops, {args.builds} builds at once, for {args.seconds:.0f} s",
          flush=True)

    def stop(*_: object) -> None:
        for p in loops:
            p.terminate()
        os.killpg(0, signal.SIGKILL) if os.getpgid(0) == os.getpid() else None
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    try:
        if args.builds > 0:
            builds(args.builds, stop_at, work)
        else:
            time.sleep(max(0.0, stop_at - time.time()))
    finally:
        stop()


if __name__ == "__main__":
    main()
