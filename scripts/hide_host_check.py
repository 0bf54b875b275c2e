"""Event and whole-device medians of a few calls under both timing modes (TimingConfig.hide_host_ms
0 and 1), on the GPU: the numbers behind timing.side_stream_suspect's slack in the hiding mode.

    python3 scripts/hide_host_check.py      # prints a table (ms)
"""
import time

import torch

from evokernel.config import TimingConfig
from evokernel.timing.interleaved import side_stream_suspect, time_interleaved


def main() -> None:
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev)
    big = torch.randn(256 * 2**20, device=dev)           # 1 GiB
    tiny = torch.randn(1024, device=dev)
    side = torch.cuda.Stream()
    urgent = torch.cuda.Stream(priority=torch.cuda.Stream.priority_range()[1])

    def on_side(i):
        with torch.cuda.stream(side):
            a @ a

    def on_urgent(i):
        with torch.cuda.stream(urgent):
            a @ a

    def slow_host(i):
        time.sleep(0.0003)
        return a @ a

    calls = {"gemm 4096": lambda i: a @ a, "copy 1 GiB": lambda i: big * 2.0,
             "tiny": lambda i: tiny + 1, "gemm + 0.3 ms host": slow_host,
             "gemm on a side stream": on_side, "gemm on a top-priority side stream": on_urgent}
    from evokernel.timing.spin import DeviceSpin
    spin = DeviceSpin.get(dev, 1.0)
    print(f"spin: {spin.blocks} blocks x {spin.threads} threads; calibrated marker offset "
          f"{spin.baseline_ms:.4f} ms, done gap {spin.done_gap_ms:.4f} ms\n")
    print("| call | hide_host_ms | event ms | device-wide ms | difference | side stream? |")
    print("|---|---|---|---|---|---|")
    for hide in (0.0, 1.0):
        stats = time_interleaved(calls, TimingConfig(warmup_ms=25.0, max_trials=100,
                                                     hide_host_ms=hide), device=dev)
        for name, s in stats.items():
            print(f"| {name} | {hide:g} | {s.median_ms:.4f} | {s.host_median_ms:.4f} | "
                  f"{s.host_median_ms - s.median_ms:.4f} | {side_stream_suspect(s)} |")


if __name__ == "__main__":
    import argparse
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    main()
