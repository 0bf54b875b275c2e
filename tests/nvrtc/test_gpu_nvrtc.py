"""On a GPU (the H200): NVRTC kernels launched on PyTorch's current stream give PyTorch's results;
bad launches are rejected by name and leave the context usable; the seed kernels of both forms
pass the engine; an NVRTC fault batch gets a named reason per fault and the good kernels their
verdicts, in one evaluator. Run by scripts/gpu_check.sh with the other gpu-marked tests."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from evokernel.config import EvalConfig
from evokernel.problem import exec_module, load_problem
from evokernel.records import Candidate, Reason

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "kernels" / "nvrtc" / "faults"

ADD = r"""
__global__ void add_one(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
extern "C" __global__ void smem_reverse(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = buf[n - 1 - i];
}
"""


@pytest.mark.gpu
def test_a_launch_runs_on_the_current_stream_in_order_with_torch(tmp_path):
    import torch

    from evokernel.nvrtc import compile_kernels, configure
    configure(tmp_path, None)                         # the arch of this GPU
    k = compile_kernels(ADD, ["add_one", "smem_reverse"])
    n = 1 << 24
    src = torch.randn(n, device="cuda")
    x, y = torch.empty_like(src), torch.empty_like(src)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)                 # ~tens of ms of GPU time on `side` first
        x.copy_(src)                                  # then x is written, still on `side`
        k.add_one.launch((n + 255) // 256, 256, x, y, n)   # must read x after the copy
    side.synchronize()
    torch.testing.assert_close(y, src + 1.0, rtol=0, atol=0)
    # 64 KiB of dynamic shared memory: over the 48 KiB default, so the attribute is raised first.
    m = 16384
    xs = torch.arange(m, device="cuda", dtype=torch.float32)
    ys = torch.empty_like(xs)
    k.smem_reverse.launch(1, 1024, xs, ys, m, shared_mem=4 * m)
    torch.cuda.synchronize()
    torch.testing.assert_close(ys, xs.flip(0), rtol=0, atol=0)


@pytest.mark.gpu
def test_bad_launches_are_rejected_by_name_and_the_context_survives(tmp_path):
    import torch

    from evokernel.engine.faults import classify_exception
    from evokernel.nvrtc import (KernelArgumentError, NvrtcCompileError, compile_kernels,
                                 configure)
    configure(tmp_path, None)
    k = compile_kernels(ADD, ["add_one"])
    x = torch.randn(1000, device="cuda")
    y = torch.empty_like(x)
    with pytest.raises(KernelArgumentError, match="takes 3 argument"):
        k.add_one.launch(4, 256, x, y)
    with pytest.raises(KernelArgumentError, match="got a torch.float64 tensor"):
        k.add_one.launch(4, 256, x.double(), y, 1000)
    with pytest.raises(KernelArgumentError, match="needs a CUDA tensor"):
        k.add_one.launch(4, 256, x.cpu(), y, 1000)
    with pytest.raises(NvrtcCompileError, match="'nosuch' is not a __global__ function"):
        compile_kernels(ADD, ["nosuch"])
    with pytest.raises(Exception) as refused:            # the driver: grid.y over 65535
        k.add_one.launch((1, 70000), 256, x, y, 1000)
    assert "CUDA_ERROR_INVALID_VALUE" in str(refused.value)
    assert classify_exception(refused.value) == (Reason.RUNTIME_ERROR, False)
    k.add_one.launch(4, 256, x, y, 1000)                 # the context still works
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 1.0, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("name, inputs", [
    ("softmax", lambda t: [t.randn(64, 3000)]),
    ("layernorm", lambda t: [t.randn(4, 64, 256, 256)]),
    ("matmul", lambda t: [t.randn(300, 200), t.randn(200, 170)]),
    ("conv2d", lambda t: [t.randn(2, 3, 64, 64)]),
    ("conv2d_relu_maxpool", lambda t: [t.randn(2, 3, 64, 64)]),
])
def test_each_nvrtc_seed_computes_what_its_reference_does(name, inputs, tmp_path):
    import torch

    from evokernel.nvrtc import configure
    configure(tmp_path, None)
    problem = load_problem(name, form="nvrtc")
    ref_mod = exec_module(problem.source, f"ref_{name}", problem.path.name)
    cand_mod = exec_module(problem.seed_source, f"nvrtc_{name}", f"<candidate nvrtc_{name}>")
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).cuda()
    torch.manual_seed(0)
    cand = cand_mod.ModelNew(*ref_mod.get_init_inputs()).cuda()
    cand.load_state_dict(ref.state_dict())
    xs = [x.cuda() for x in inputs(torch)]
    with torch.no_grad():
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        torch.testing.assert_close(cand(*xs), ref(*xs), rtol=1e-4, atol=1e-4)


def _evaluate(problem, sources):
    from evokernel.engine.evaluator import CudaEvaluator
    cands = [Candidate(source=s, idea=n) for n, s in sources.items()]
    evaluator = CudaEvaluator(problem, EvalConfig(eval_timeout_s=60, measure_compile=False,
                                                  sandbox=True, require_sandbox=True))
    try:
        return {c.idea: r for c, r in zip(cands, evaluator.evaluate(cands))}, evaluator
    finally:
        evaluator.close()


@pytest.mark.gpu
def test_the_softmax_seeds_of_both_forms_pass_the_engine():
    problem = load_problem("softmax")
    nvrtc_seed = load_problem("softmax", form="nvrtc").seed_source
    t0 = time.perf_counter()
    got, _ = _evaluate(problem, {"load_inline": problem.seed_source, "nvrtc": nvrtc_seed})
    for form, r in got.items():
        assert r.accepted, (form, r.reason.value, r.detail[:400])
        assert r.candidate_ms > 0 and any(k.own for k in r.kernels), form
    assert got["nvrtc"].build_s < 5.0, got["nvrtc"].build_s     # NVRTC: about a second
    print(f"both seeds in {time.perf_counter() - t0:.1f} s; builds: load_inline "
          f"{got['load_inline'].build_s:.1f} s, nvrtc {got['nvrtc'].build_s:.2f} s")


EXPECTED = {
    "add_ok": Reason.OK, "add_compile_error": Reason.BUILD_ERROR,
    "add_missing_kernel": Reason.BUILD_ERROR, "add_wrong_arg_count": Reason.RUNTIME_ERROR,
    "add_wrong_arg_type": Reason.RUNTIME_ERROR, "add_bad_grid": Reason.RUNTIME_ERROR,
    "add_oob": Reason.CUDA_FAULT, "add_ok2": Reason.OK,
}


@pytest.mark.gpu
def test_nvrtc_fault_batch_blames_only_the_faulty():
    problem = load_problem(ROOT / "tests" / "kernels" / "faults" / "problem_add.py")
    got, evaluator = _evaluate(problem, {n: (FAULTS / f"{n}.py").read_text() for n in EXPECTED})
    seen = {n: got[n].reason for n in EXPECTED}
    assert seen == EXPECTED, {n: (got[n].reason.value, got[n].detail[:300]) for n in EXPECTED}
    for name in ("add_ok", "add_ok2"):
        assert got[name].accepted and got[name].candidate_ms > 0
    src = (FAULTS / "add_compile_error.py").read_text().splitlines()
    # NVRTC reports the missing ";" at the token after it: the "}" on the next line
    line = next(i for i, t in enumerate(src, 1) if "a[i] + b[i]" in t) + 1
    assert f"candidate.py:{line}: error" in got["add_compile_error"].log
    assert "'sub_kernel' is not a __global__ function" in got["add_missing_kernel"].log
    assert "takes 4 argument(s)" in got["add_wrong_arg_count"].detail
    assert "argument 3 (long long)" in got["add_wrong_arg_type"].detail
    assert "CUDA_ERROR_INVALID_VALUE" in got["add_bad_grid"].detail
    assert all(not w.alive() for w in evaluator.workers)
