"""NVRTC compiles without a GPU (evokernel.nvrtc.compiler): cubins for the arch asked, errors at
the CUDA source's and the kernel file's lines, kernel names that do not exist, options, the cache
key, and the build step that compiles an NVRTC candidate ahead (no torch in its process)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evokernel.build.cache import MARKER
from evokernel.engine.faults import classify_exception, load_detail
from evokernel.nvrtc import NvrtcCompileError, compile_kernels, configure
from evokernel.nvrtc import compiler
from evokernel.nvrtc.compiler import CompileSpec
from evokernel.records import Reason

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "problems" / "seeds" / "nvrtc" / "softmax.py"

ADD = r"""
constexpr int BLOCK = 256;  // tune: 128 256
__global__ void add_one(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)BLOCK + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
extern "C" __global__ void scale(float* y, float a, int n) { if (threadIdx.x < n) y[0] *= a; }
template <int T> __global__ void tile(const double* x, unsigned char* flags) {}
"""

FILE = f'''import torch
import torch.nn as nn
from evokernel.nvrtc import compile_kernels

SRC = r"""{ADD}"""
kernels = compile_kernels(SRC, ["add_one", "scale", "tile<64>"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        kernels.add_one.launch((x.numel() + 255) // 256, 256, x, y, x.numel())
        return y
'''


def test_a_kernel_compiles_to_a_cubin_for_the_arch_asked_without_a_gpu():
    done = compiler.compile_spec(CompileSpec(ADD, ("add_one", "scale", "tile<64>"), (), "9.0"))
    assert done.cubin[:4] == b"\x7fELF" and done.compile_s > 0
    assert done.symbols == {"add_one": "_Z7add_onePKfPfx", "scale": "scale",
                            "tile<64>": "_Z4tileILi64EEvPKdPh"}
    sig = {n: [p.ctype for p in ps] for n, ps in done.signatures.items()}
    assert sig == {"add_one": ["float const*", "float*", "long long"],
                   "scale": ["float*", "float", "int"],            # extern "C": from the probe
                   "tile<64>": ["double const*", "unsigned char*"]}
    assert "for 'sm_90'" in done.log                               # ptxas -v ran for sm_90
    names = {r["name"] for r in done.resources}
    assert "add_one(float const*, float*, long long)" in names and "scale" in names
    sm80 = compiler.compile_spec(CompileSpec(ADD, ("add_one",), (), "8.0"))
    assert "for 'sm_80'" in sm80.log and sm80.cubin != done.cubin


def test_a_compile_error_names_the_cuda_line_and_the_kernel_files_line():
    bad = ADD.replace("x[i] + 1.0f", "x[i] + undefined_q")
    with pytest.raises(NvrtcCompileError) as e:
        compiler.compile_spec(CompileSpec(bad, ("add_one",), (), "9.0"))
    assert e.value.errors == ('5: error: identifier "undefined_q" is undefined',)
    assert "(line 5 of the CUDA source)" in str(e.value) and "undefined_q" in e.value.log
    text = FILE.replace(ADD, bad)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "undefined_q" in t)
    assert compiler.locate(e.value.errors, bad, text) == [
        f'{line}: error: identifier "undefined_q" is undefined']
    detail = load_detail(e.value, text)                   # the worker's Load stage detail
    assert f'kernel file\'s line {line}: error: identifier "undefined_q"' in detail
    assert classify_exception(e.value) == (Reason.BUILD_ERROR, False)


def test_a_kernel_name_that_does_not_exist_is_a_compile_error_that_names_it():
    for name in ("nosuch", "tile"):          # a template needs its arguments
        with pytest.raises(NvrtcCompileError, match=f"'{name}' is not a __global__ function"):
            compiler.compile_spec(CompileSpec(ADD, ("add_one", name), (), "9.0"))
    device_fn = "__device__ float helper(float v) { return v; }\n" + ADD
    with pytest.raises(NvrtcCompileError, match="'helper' is not a __global__ function"):
        compiler.compile_spec(CompileSpec(device_fn, ("helper",), (), "9.0"))


def test_options_are_nvrtcs_own_spellings_and_nothing_else():
    kw, notes = compiler.parse_options(["-O3", "--use_fast_math", "-D", "TILE=64", "-DX",
                                        "-arch=sm_70", "-maxrregcount=64", "-Xptxas", "-v",
                                        "-std=c++20", "-ftz=false"])
    assert kw == {"use_fast_math": True, "define_macro": [("TILE", "64"), "X"],
                  "max_register_count": 64, "ptxas_options": ["-v"], "std": "c++20",
                  "ftz": False}
    assert notes == ["dropped -O3 (NVRTC optimizes by default)",
                     "arch: dropped -arch=sm_70 (the cubin is for the GPU in use)"]
    for bad in ("-I/etc", "--include-path=/root", "-o", "-D1X"):
        with pytest.raises(NvrtcCompileError, match="not allowed|not a macro name"):
            compiler.parse_options([bad])


def test_the_cache_key_covers_source_names_options_arch_and_nvrtc(monkeypatch):
    base = CompileSpec(ADD, ("add_one",), (), "9.0")
    key = compiler.spec_key(base)
    assert compiler.spec_key(CompileSpec(ADD, ("add_one",), ("-O3", "-arch=sm_80"), "9.0")) == key
    assert compiler.spec_key(CompileSpec(ADD, ("add_one",), ("-D", "T=1"), "9.0")) == \
        compiler.spec_key(CompileSpec(ADD, ("add_one",), ("-DT=1",), "9.0"))
    others = {compiler.spec_key(s) for s in (
        CompileSpec(ADD + " ", ("add_one",), (), "9.0"),
        CompileSpec(ADD, ("add_one", "scale"), (), "9.0"),
        CompileSpec(ADD, ("add_one",), ("--use_fast_math",), "9.0"),
        CompileSpec(ADD, ("add_one",), (), "9.0a"))}
    monkeypatch.setattr(compiler, "toolchain", lambda: {"nvrtc": "99.9", "cuda_bindings": "13.5.0"})
    others.add(compiler.spec_key(base))
    assert len(others) == 5 and key not in others


def test_compile_kernels_stores_its_compile_and_reads_it_back(tmp_path):
    previous = configure(tmp_path, "9.0")
    try:
        kernels = compile_kernels(ADD, ["add_one", "scale"])
        assert not kernels.cached and kernels.constant("BLOCK") == 256
        key = compiler.spec_key(CompileSpec(ADD, ("add_one", "scale"), (), "9.0"))
        folder = tmp_path / "builds" / key
        marker = json.loads((folder / MARKER).read_text())
        assert marker["key"] == key and (folder / compiler.CUBIN).read_bytes()[:4] == b"\x7fELF"
        again = compiler.read_build(folder, CompileSpec(ADD, ("add_one", "scale"), (), "9.0"))
        assert again.cached and again.signatures == {
            n: kernels[n].params for n in ("add_one", "scale")}
        assert compiler.read_build(folder, CompileSpec(ADD, ("scale",), (), "9.0")) is None
        assert repr(kernels.scale) == "Kernel(scale(float*, float, int))"
        with pytest.raises(KeyError, match="no kernel 'tile' was compiled"):
            kernels["tile"]
        with pytest.raises(AttributeError, match="no kernel 'nope'"):
            kernels.nope
    finally:
        configure(previous.cache_dir, previous.arch)


def test_the_build_step_compiles_an_nvrtc_candidate_ahead_without_torch(tmp_path):
    """The build worker's nvrtc mode (evokernel.build.nvrtc_build) runs no candidate code and
    imports no torch, and neither cuda.core nor NumPy (most of a cold build's start-up:
    evokernel.nvrtc.program); its result has the cubin's folder and the ptxas report."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    (work / "candidate.py").write_text(FILE)
    code = ("import sys, json; from pathlib import Path; "
            "from evokernel.build.nvrtc_build import build_nvrtc; "
            f"r = build_nvrtc(Path({str(work)!r}), Path({str(cache)!r}), '9.0'); "
            "print(json.dumps(r)); "
            "print([m for m in ('torch', 'numpy', 'cuda.core') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    result, heavy = json.loads(out[-2]), out[-1]
    assert heavy == "[]"
    assert result["ok"] and not result["cache_hit"] and len(result["build_dirs"]) == 1
    folder = Path(result["build_dirs"][0])
    assert folder.parent == work / "builds" and (folder / compiler.CUBIN).is_file()
    assert {r["name"] for r in result["resources"]} >= {"scale"}


def test_builder_builds_nvrtc_candidates_and_names_errors_at_the_file_line(tmp_path):
    from evokernel.build.builder import Builder
    from evokernel.records import Candidate
    bad = FILE.replace("x[i] + 1.0f", "x[i] + undefined_q")
    missing = FILE.replace('"scale", "tile<64>"', '"scale", "nosuch"')
    with Builder(tmp_path / "cache", arch="9.0", timeout_s=300, workers=2) as b:
        good, broken, gone = b.build_many([Candidate(source=s, idea="t")
                                           for s in (FILE, bad, missing)])
        hit = b.build(Candidate(source=FILE + "\n# again\n", idea="t"))
    assert good.ok and not good.cache_hit and good.resources
    assert (Path(good.build_dirs[0]) / compiler.CUBIN).is_file()
    assert Path(good.build_dirs[0]).parent == (tmp_path / "cache" / "builds").resolve()
    assert hit.ok and hit.cache_hit and hit.build_dirs == good.build_dirs    # same compile
    line = next(i for i, t in enumerate(bad.splitlines(), 1) if "undefined_q" in t)
    assert not broken.ok and broken.reason is Reason.BUILD_ERROR
    assert f'candidate.py:{line}: error: identifier "undefined_q" is undefined' in broken.log
    call_line = next(i for i, t in enumerate(missing.splitlines(), 1) if "nosuch" in t)
    assert not gone.ok and "'nosuch' is not a __global__ function" in gone.log
    assert f"candidate.py:{call_line}: error: no __global__ function 'nosuch'" in gone.log


def test_check_build_only_names_nvrtc_errors_at_the_kernel_files_line(tmp_path, capsys,
                                                                      monkeypatch):
    from evokernel.cli.main import main
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "bad.py"
    bad.write_text(FILE.replace("x[i] + 1.0f", "x[i] + undefined_q"))
    good = tmp_path / "good.py"
    good.write_text(SOFTMAX.read_text())
    assert main(["check", "softmax", str(good), str(bad), "--build-only", "--arch", "9.0"]) == 1
    out = capsys.readouterr().out
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "undefined_q" in t)
    assert f'{bad}:{line}: error: identifier "undefined_q" is undefined' in out
    assert f"{good}: built" in out and "1 of 2 kernel file(s) built" in out


class CudaCoreError(Exception):
    """Named and worded as cuda.core's CUDAError (the H200's messages)."""


CudaCoreError.__name__ = "CUDAError"


def test_cuda_core_launch_errors_are_classified_like_the_runtimes():
    from evokernel.gate.run import exception_reason
    refused = CudaCoreError("CUDA_ERROR_INVALID_VALUE: This indicates that one or more of the "
                            "parameters passed to the API call is not within an acceptable "
                            "range of values.")
    fault = CudaCoreError("CUDA_ERROR_ILLEGAL_ADDRESS: While executing a kernel, the device "
                          "encountered a load or store instruction on an invalid memory address.")
    assert classify_exception(refused) == (Reason.RUNTIME_ERROR, False)
    assert classify_exception(fault) == (Reason.CUDA_FAULT, True)
    assert exception_reason(refused) is Reason.RUNTIME_ERROR
    assert exception_reason(fault) is Reason.CUDA_FAULT


def test_the_nvrtc_fault_fixtures_build_or_fail_as_the_gpu_batch_expects(tmp_path):
    """tests/kernels/nvrtc/faults: only the compile error and the missing kernel fail to build
    (the GPU batch, tests/nvrtc/test_gpu_nvrtc.py, checks the rest's reasons)."""
    from evokernel.build.builder import Builder
    from evokernel.records import Candidate
    faults = sorted((ROOT / "tests" / "kernels" / "nvrtc" / "faults").glob("*.py"))
    with Builder(tmp_path / "cache", arch="9.0", timeout_s=300, workers=2) as b:
        results = b.build_many([Candidate(source=p.read_text(), idea=p.stem) for p in faults])
    failed = {p.stem for p, r in zip(faults, results) if not r.ok}
    assert failed == {"add_compile_error", "add_missing_kernel"}
    assert len({r.build_dirs for r, p in zip(results, faults)
                if p.stem not in failed | {"add_ok2", "add_oob"}}) == 1   # one shared compile
