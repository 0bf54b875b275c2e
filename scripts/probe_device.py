"""What the GPU machine offers for the fitness, NVRTC, containment and shared-GPU designs: one
call, printed as sections. Diagnostic only; its output is committed under results/.

    python3 scripts/probe_device.py [--load-procs 16]

Sections:
  env        versions of the libraries the designs would use (cuda.core, NVML, ...)
  load       the spin mode's whole-device gap (start->done less start->end) and its spin
             deviation: calibrated idle, then with busy loops on every core. A gap that grows
             under load beyond the 0.05 ms slack is what flips side_stream on short kernels.
  profiler   torch.profiler kernel records: stream id and GPU start/end of a kernel on the
             current stream, one on a side stream and a marker after the call
  nvml       compute processes and utilization seen through NVML while another process runs
             a matmul loop on the same GPU, and what that loop does to a kernel's event time
  cudacore   cuda.core: NVRTC compile to cubin (time), launch on torch's current stream with
             tensor pointers
  sandbox    a child in new network and mount namespaces as user nobody: can it use the GPU?
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import textwrap
import time


def section(name: str) -> None:
    print(f"\n=== {name} ===", flush=True)


def env() -> None:
    section("env")
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
    for mod in ("cuda.core", "cuda.bindings", "pynvml", "cupy", "dask", "distributed"):
        try:
            m = __import__(mod, fromlist=["x"])
            print(mod, getattr(m, "__version__", "?"))
        except Exception as e:  # noqa: BLE001
            print(mod, "MISSING", type(e).__name__, e)
    for tool in ("unshare", "bwrap", "setpriv", "compute-sanitizer", "cuobjdump", "ncu", "nsenter"):
        print(tool, subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                                   text=True).stdout.strip() or "not found")
    print(subprocess.run(["sh", "-c", "ls -l /dev/nvidia*; id; uname -r"], capture_output=True,
                         text=True).stdout)


def _busy(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def load(nprocs: int) -> None:
    section("load")
    import torch
    sys.path.insert(0, os.getcwd())
    from evokernel.timing.spin import DeviceSpin, spin_trial
    dev = torch.device("cuda", 0)
    spin = DeviceSpin.get(dev, 1.0)
    print(f"calibrated at set-up: baseline {spin.baseline_ms:.4f} ms, done gap "
          f"{spin.done_gap_ms:.4f} ms")
    x = torch.randn(4096 * 1024, device=dev)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

    def measure(label: str, n: int = 60) -> None:
        gaps, devs, flagged = [], [], 0
        for _ in range(n):
            e_ms, d_ms, off = spin_trial(spin, *ev, lambda: torch.cuda.synchronize(dev),
                                         lambda: x.mul_(1.0))
            gaps.append(d_ms - e_ms)
            devs.append(spin.deviation_ms(off))
            whole = spin.whole_device_ms(d_ms, off)
            flagged += whole > 1.2 * e_ms + 0.05
        q = statistics.quantiles(gaps, n=10)
        print(f"{label}: event~{e_ms:.4f} ms; gap median {statistics.median(gaps):.4f} p10 "
              f"{q[0]:.4f} p90 {q[-1]:.4f} max {max(gaps):.4f}; deviation median "
              f"{statistics.median(devs):.4f} p90 {statistics.quantiles(devs, n=10)[-1]:.4f} max "
              f"{max(devs):.4f}; trials over the old rule {flagged}/{n}", flush=True)

    measure("idle")
    stop_at = time.time() + 20
    procs = [mp.Process(target=_busy, args=(stop_at,)) for _ in range(nprocs)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    measure(f"{nprocs} busy loops")
    for p in procs:
        p.terminate()
    measure("idle again")


def profiler() -> None:
    section("profiler")
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    dev = torch.device("cuda", 0)
    a = torch.randn(2048, 2048, device=dev)
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    for label, use_side in (("same stream", False), ("side stream", True)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            if use_side:
                side.wait_stream(cur)
                with torch.cuda.stream(side):
                    b = a @ a
            else:
                b = a @ a
            torch.cuda._sleep(10)       # marker on the current stream
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        rows = []
        for e in prof.events():
            if getattr(e, "device_type", None) != DeviceType.CUDA:
                continue
            rows.append((e.name[:50], getattr(e, "device_resource_id", None),
                         round(e.time_range.start, 2), round(e.time_range.end, 2)))
        print(f"{label} (profiled region {1e3 * (t1 - t0):.1f} ms wall):")
        for r in rows:
            print("   ", r)
        del b
    # kineto raw events: what fields exist
    try:
        ev = prof.profiler.kineto_results.events()
        k = [e for e in ev if e.device_type() == DeviceType.CUDA][:2]
        for e in k:
            print("kineto:", e.name()[:40], e.device_resource_id(), e.start_ns(), e.end_ns())
    except Exception as e:  # noqa: BLE001
        print("kineto events unavailable:", e)
    # cost of one profiled call
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            a.mul_(1.0)
            torch.cuda.synchronize()
        list(prof.events())
    print(f"profile one small call: {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms each")


LOOP = textwrap.dedent("""
    import torch, time, sys
    a = torch.randn(8192, 8192, device='cuda')
    stop = time.time() + float(sys.argv[1])
    print('loop started', flush=True)
    while time.time() < stop:
        a @ a
    torch.cuda.synchronize()
""")


def nvml() -> None:
    section("nvml")
    import torch
    try:
        import pynvml
    except ImportError as e:
        print("no pynvml:", e)
        return
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)

    def procs(label: str) -> None:
        try:
            ps = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            print(f"{label}: processes {[(p.pid, p.usedGpuMemory) for p in ps]}; util "
                  f"gpu {util.gpu}% mem {util.memory}%; me {os.getpid()}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(label, "NVML error", type(e).__name__, e)

    procs("before torch")
    x = torch.randn(64 * 2**20, device="cuda")
    torch.cuda.synchronize()
    procs("after torch init")

    def kernel_ms() -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(30):
            torch.cuda.synchronize()
            s.record()
            x.mul_(1.0)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)

    print(f"256 MiB in-place mul alone: {kernel_ms():.4f} ms")
    loop = subprocess.Popen([sys.executable, "-c", LOOP, "12"], stdout=subprocess.PIPE, text=True)
    loop.stdout.readline()
    time.sleep(1.0)
    procs("with a matmul loop in another process")
    print(f"256 MiB in-place mul beside it: {kernel_ms():.4f} ms")
    loop.kill()
    loop.wait()
    time.sleep(0.5)
    procs("after the loop")


def cudacore() -> None:
    section("cudacore")
    import torch
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except Exception as e:  # noqa: BLE001
        try:
            from cuda.core.experimental import (Device, LaunchConfig, Program, ProgramOptions,
                                                launch)
            print("cuda.core.experimental namespace")
        except Exception as e2:  # noqa: BLE001
            print("no cuda.core:", e, e2)
            return
    src = r'''
    extern "C" __global__ void add1(const float* __restrict__ x, float* __restrict__ y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] + 1.0f;
    }'''
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    t0 = time.perf_counter()
    dev = Device(0)
    dev.set_current()
    cc = dev.compute_capability
    arch = f"sm_{cc[0]}{cc[1]}"
    obj = Program(src, "c++", ProgramOptions(arch=arch)).compile("cubin")
    t1 = time.perf_counter()
    kern = obj.get_kernel("add1")
    t2 = time.perf_counter()
    print(f"arch {arch}; compile {1e3 * (t1 - t0):.1f} ms (with set_current), get_kernel "
          f"{1e3 * (t2 - t1):.1f} ms")
    ts = torch.cuda.current_stream()
    for how in ("__cuda_stream__", "handle"):
        try:
            if how == "__cuda_stream__":
                s = dev.create_stream(ts)
            else:
                from cuda.core import Stream
                s = Stream.from_handle(ts.cuda_stream)
            y.zero_()
            launch(s, LaunchConfig(grid=(x.numel() + 255) // 256, block=256), kern,
                   x.data_ptr(), y.data_ptr(), x.numel())
            torch.cuda.synchronize()
            print(how, "ok:", bool(torch.allclose(y, x + 1)))
        except Exception as e:  # noqa: BLE001
            print(how, "failed:", type(e).__name__, str(e)[:300])
    try:
        import numpy as np
        s = dev.create_stream(ts)
        launch(s, LaunchConfig(grid=1, block=32), kern, np.uintp(x.data_ptr()),
               np.uintp(y.data_ptr()), np.int32(3))
        torch.cuda.synchronize()
        print("numpy-typed args ok")
    except Exception as e:  # noqa: BLE001
        print("numpy-typed args failed:", type(e).__name__, str(e)[:300])
    try:
        launch(s, LaunchConfig(grid=1, block=32), kern, x.data_ptr())
        torch.cuda.synchronize()
        print("wrong argument count: no error raised")
    except Exception as e:  # noqa: BLE001
        print("wrong argument count:", type(e).__name__, str(e)[:200])
    try:
        obj.get_kernel("nope")
    except Exception as e:  # noqa: BLE001
        print("missing kernel:", type(e).__name__, str(e)[:200])
    t0 = time.perf_counter()
    for i in range(5):
        Program(src.replace("1.0f", f"{i}.0f"), "c++", ProgramOptions(arch=arch)).compile("cubin")
    print(f"5 more compiles: {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms each")


CHILD = textwrap.dedent("""
    import os, socket, torch
    print('uid', os.getuid(), 'cuda', torch.cuda.is_available())
    x = torch.ones(4, device='cuda'); print('sum', float((x + 1).sum()))
    try:
        socket.create_connection(('127.0.0.1', 22), timeout=1); print('net: connected')
    except OSError as e:
        print('net:', e)
    try:
        open('/root/evokernel-probe-write', 'w').write('x'); print('wrote /root')
    except OSError as e:
        print('write /root:', e)
""")


def sandbox() -> None:
    section("sandbox")
    cmds = {
        "unshare net+mount, nobody": ["unshare", "--net", "--mount", "--fork", "setpriv",
                                      "--reuid=65534", "--regid=65534", "--clear-groups",
                                      sys.executable, "-c", CHILD],
        "unshare user+net (no root)": ["unshare", "--user", "--net", "--fork", sys.executable,
                                       "-c", CHILD],
    }
    for label, cmd in cmds.items():
        env = dict(os.environ, HOME="/tmp")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        print(f"{label}: rc {r.returncode}\n{r.stdout}{r.stderr[-800:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load-procs", type=int, default=os.cpu_count() or 16)
    ap.add_argument("--sections", default="env,load,profiler,nvml,cudacore,sandbox")
    args = ap.parse_args()
    for s in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            {"env": env, "load": lambda: load(args.load_procs), "profiler": profiler,
             "nvml": nvml, "cudacore": cudacore, "sandbox": sandbox}[s]()
        except Exception as e:  # noqa: BLE001
            import traceback
            print(f"section {s} failed: {type(e).__name__}: {e}")
            traceback.print_exc()
        print(f"({s}: {time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
