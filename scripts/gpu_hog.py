"""Another process on the GPU: a loop of 8192^2 FP32 matmuls for --seconds, the way a second user
of a shared GPU would load it (issue 12: `evokernel run softmax` beside such a loop).

    python3 scripts/gpu_hog.py [--seconds 60]
"""
import argparse
import time

import torch

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--seconds", type=float, default=60.0)
args = ap.parse_args()
a = torch.randn(8192, 8192, device="cuda")
stop = time.time() + args.seconds
print(f"gpu_hog: matmul loop for {args.seconds:.0f} s (pid {__import__('os').getpid()})",
      flush=True)
n = 0
while time.time() < stop:
    a @ a
    n += 1
    if n % 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print(f"gpu_hog: {n} matmuls, done", flush=True)
