"""Issue 19's bad input on the CPU: the NVRTC fault fixtures run as the GPU worker's load stage
and forward would run them, up to the point a GPU is needed. A kernel name the source does not
define and a compile error are BUILD_ERROR naming the name or the kernel file's line; a launch
with the wrong argument count is RUNTIME_ERROR before the driver is called. None of them is
fatal to the worker (classify_exception's second value), so the next candidate runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from evokernel.engine.faults import classify_exception, load_detail, load_log
from evokernel.gate.run import exception_reason
from evokernel.nvrtc import KernelArgumentError, NvrtcCompileError, configure
from evokernel.problem import exec_module
from evokernel.records import Reason

FAULTS = Path(__file__).resolve().parents[1] / "kernels" / "nvrtc" / "faults"


@pytest.fixture(autouse=True)
def arch_9_0(tmp_path):
    previous = configure(tmp_path, "9.0")            # as the GPU worker configures its arch
    yield
    configure(previous.cache_dir, previous.arch)


def _load(name: str):
    source = (FAULTS / f"{name}.py").read_text()
    return source, lambda: exec_module(source, f"fault_{name}", "candidate.py")


def test_a_kernel_name_that_does_not_exist_is_a_build_error_naming_it():
    source, load = _load("add_missing_kernel")
    with pytest.raises(NvrtcCompileError) as e:
        load()
    assert classify_exception(e.value) == (Reason.BUILD_ERROR, False)
    assert "'sub_kernel' is not a __global__ function" in load_detail(e.value, source)
    assert "sub_kernel" in load_log(e.value)


def test_a_compile_error_is_a_build_error_at_the_kernel_files_line():
    source, load = _load("add_compile_error")
    # NVRTC reports the missing ";" at the token after it: the "}" on the next line
    line = next(i for i, t in enumerate(source.splitlines(), 1) if "a[i] + b[i]" in t) + 1
    with pytest.raises(NvrtcCompileError) as e:
        load()
    assert classify_exception(e.value) == (Reason.BUILD_ERROR, False)
    detail = load_detail(e.value, source)
    assert f"at the kernel file's line {line}: error: expected a \";\"" in detail, detail
    assert "error" in load_log(e.value) and "kernel.cu(" in load_log(e.value)


def test_a_launch_with_the_wrong_argument_count_is_a_runtime_error_before_the_driver():
    import torch
    _, load = _load("add_wrong_arg_count")
    model = load().ModelNew()
    a = torch.ones(1000)
    with pytest.raises(KernelArgumentError, match="takes 4 argument.*passed 3") as e:
        model(a, a)
    assert classify_exception(e.value) == (Reason.RUNTIME_ERROR, False)
    assert exception_reason(e.value) is Reason.RUNTIME_ERROR
