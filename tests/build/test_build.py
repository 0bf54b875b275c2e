"""evokernel.build.builder and evokernel.build.cache: arch-flag rewriting, cache keys, timeouts that
kill the whole process group, build errors with their log, and ONE real nvcc build of a tiny
kernel (then a cache hit). The compile-error build and the real one run contained (another
user, no network, read-only files: evokernel.sandbox), so they also show that a contained build
finds nvcc, ninja, the torch headers and the cache."""
from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from evokernel.build.entry import judge_import
from evokernel.build.builder import Builder, device_arch, worker_env
from evokernel.errors import ConfigError
from evokernel.build.cache import MARKER, extension_key, load_candidate, rewrite_arch_flags
from evokernel.records import Candidate, Reason
from tests.support.jails import HAS_UTIL_LINUX, contained

GENCODE_90 = "-gencode=arch=compute_90,code=sm_90"

TINY_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void add_one_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
torch::Tensor add_one(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="add_one", cpp_sources="torch::Tensor add_one(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["add_one"],
                  extra_cuda_cflags=["-O3", "-arch=sm_70"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.add_one(x)
'''


def _sandbox(cache: Path):
    """This machine's full containment for ``cache`` (made readable to the sandbox user), or
    None where util-linux is missing (not Linux)."""
    if not HAS_UTIL_LINUX:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    cache.chmod(0o755)
    return contained(cache)


def _arch() -> str:
    try:
        return device_arch()
    except ConfigError:
        return "9.0"


# --- pure functions ------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, expected, note", [
    (["-O3", "-arch=sm_70"], ["-O3", GENCODE_90], "arch: -arch=sm_70 -> sm_90"),
    (["-arch", "sm_70"], [GENCODE_90], "arch: -arch sm_70 -> sm_90"),
    (["-O3 -arch sm_80 --use_fast_math"], ["-O3", "--use_fast_math", GENCODE_90],
     "arch: -arch sm_80 -> sm_90"),
    (["--gpu-architecture=sm_75"], [GENCODE_90], "arch: --gpu-architecture=sm_75 -> sm_90"),
    (["-gencode=arch=compute_70,code=sm_70"], [GENCODE_90],
     "arch: -gencode=arch=compute_70,code=sm_70 -> sm_90"),
    (["-gencode", "arch=compute_80,code=sm_80"], [GENCODE_90],
     "arch: -gencode arch=compute_80,code=sm_80 -> sm_90"),
    (["-gencode arch=compute_70,code=sm_70"], [GENCODE_90],
     "arch: -gencode arch=compute_70,code=sm_70 -> sm_90"),
    (["-arch=compute_70", "-code=sm_70"], [GENCODE_90], "arch: -code=sm_70 -> sm_90"),
    (["-arch=native"], [GENCODE_90], "arch: -arch=native -> sm_90"),
    (["-arch=sm_90a"], ["-gencode=arch=compute_90a,code=sm_90a"], None),
    (["-arch=sm_90"], [GENCODE_90], None),
    (["-O3", "-Xcompiler", "-march=native"], ["-O3", "-Xcompiler", "-march=native", GENCODE_90],
     None),
    (None, [GENCODE_90], None),
    ("-arch=sm_70", [GENCODE_90], "arch: -arch=sm_70 -> sm_90"),
])
def test_rewrite_arch_flags(flags, expected, note):
    out, notes = rewrite_arch_flags(flags, "9.0")
    assert out == expected
    if note is None:
        assert notes == []
    else:
        assert note in notes


def test_rewrite_arch_flags_host_and_errors():
    out, notes = rewrite_arch_flags(["-O2", "-arch=sm_70"], "9.0", host=True)
    assert out == ["-O2"] and "extra_cflags" in notes[0]
    assert rewrite_arch_flags(["-arch=sm_70"], "9.0a")[0] == [
        "-gencode=arch=compute_90a,code=sm_90a"]
    assert rewrite_arch_flags(["-arch=sm_90a"], "10.0")[0] == [
        "-gencode=arch=compute_100,code=sm_100"]
    with pytest.raises(ValueError):
        rewrite_arch_flags([], "sm_90")


def test_cache_key():
    base = dict(name="k", cpp_sources="int f();", cuda_sources="int f() { return 1; }",
                extra_cuda_cflags=["-O3"])
    k = extension_key("9.0", **base)
    assert k == extension_key("9.0", **base, build_directory="/somewhere/else", verbose=True)
    assert k == extension_key("9.0", "k", "int f();", "int f() { return 1; }",
                              extra_cuda_cflags=["-O3"])            # positional args bind alike
    assert k != extension_key("9.0", **{**base, "cuda_sources": "int f() { return 2; }"})
    assert k != extension_key("9.0", **{**base, "extra_cuda_cflags": ["-O2"]})
    assert k != extension_key("10.0", **base)
    # -arch=sm_70 and -arch=sm_80 both become sm_90: the same binary, the same key
    assert (extension_key("9.0", **{**base, "extra_cuda_cflags": ["-O3", "-arch=sm_70"]})
            == extension_key("9.0", **{**base, "extra_cuda_cflags": ["-O3", "-arch=sm_80"]}))


def test_worker_env_strips_keys():
    env = worker_env({"PATH": "/bin", "OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "x",
                      "HF_TOKEN": "x", "AWS_REGION": "x", "MY_SECRET": "x", "DB_PASSWORD": "x",
                      "GEMINI_API_KEY": "x", "github_token": "x", "CUDA_HOME": "/usr/local/cuda"})
    assert env == {"PATH": "/bin", "CUDA_HOME": "/usr/local/cuda"}


def test_device_arch(monkeypatch):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: device_arch reads it")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    assert device_arch() == "9.0"
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    with pytest.raises(ConfigError, match="TORCH_CUDA_ARCH_LIST"):
        device_arch()


def test_judge_import():
    ok_call = {"ok": True, "flags": ["arch: -arch=sm_70 -> sm_90"]}
    assert judge_import([], None) == (True, ["no_load_inline"])
    ok, flags = judge_import([ok_call], RuntimeError("No CUDA GPUs are available"))
    assert ok and flags[0].startswith("arch:") and flags[1].startswith("import_error_after_build")
    assert not judge_import([ok_call, {"ok": False}], None)[0]
    assert not judge_import([], ImportError("no module named triton"))[0]
    assert not judge_import([], NameError("name 'cuda_src' is not defined"))[0]
    ok, flags = judge_import([], RuntimeError("Found no NVIDIA driver on your system"))
    assert ok and flags[0].startswith("deferred_build")


def test_builder_arguments(tmp_path):
    with pytest.raises(ValueError):
        Builder(tmp_path, arch="sm_90", timeout_s=1)
    with pytest.raises(ValueError):
        Builder(tmp_path, arch="9.0", timeout_s=0)


# --- subprocess builds (no nvcc work, a few seconds each) --------------------------------------

def test_syntax_error_is_build_error(tmp_path):
    with Builder(tmp_path, arch="9.0", timeout_s=120, workers=2) as b:
        bad, plain = b.build_many([Candidate("import torch\nx = (1,\ny = 2 +\n"),
                                   Candidate("import torch\nclass ModelNew: pass\n")])
    assert not bad.ok and bad.reason is Reason.BUILD_ERROR
    assert "SyntaxError" in bad.log and "line 2" in bad.log and bad.build_s < 1.0
    assert plain.ok and plain.reason is None and plain.flags == ("no_load_inline",)


def test_compile_error_keeps_log_in_its_own_folder(tmp_path):
    """A failed build stays in its candidate's folder with its log; the cache is not touched
    (here, a partial folder an older version left for that key stays as it was)."""
    kwargs = dict(name="broken", cpp_sources="", cuda_sources="this is not CUDA;",
                  no_implicit_headers=True)
    key = extension_key("9.0", **kwargs)
    stale = tmp_path / "builds" / key
    stale.mkdir(parents=True)
    (stale / "leftover.o").write_text("partial build of a killed process")
    source = ("from torch.utils.cpp_extension import load_inline\n"
              f"ext = load_inline(**{kwargs!r})\n")
    r = Builder(tmp_path, arch="9.0", timeout_s=300, sandbox=_sandbox(tmp_path)).build(
        Candidate(source))
    assert not r.ok and r.reason is Reason.BUILD_ERROR and not r.cache_hit
    assert "cuda.cu" in r.log and "error" in r.log.lower()
    (own,) = map(Path, r.build_dirs)
    assert own.name == key and own.parent.name == "builds"
    assert own.parents[2] == tmp_path / "candidates" and not (own / MARKER).exists()
    assert "error" in (own / "build.log").read_text().lower()
    assert (stale / "leftover.o").is_file() and not (stale / MARKER).exists()


def test_timeout_kills_whole_process_group(tmp_path, monkeypatch):
    """A fake host compiler that starts a sleeping child: the timeout must kill it too."""
    pid_file = tmp_path / "sleeper.pid"
    fake = tmp_path / "fake-cxx"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do\n  if [ "$a" = "-c" ]; then\n'
                    f'    sleep 300 &\n    echo $! > {pid_file}\n    wait\n  fi\ndone\n'
                    f'exec c++ "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CXX", str(fake))
    source = ("from torch.utils.cpp_extension import load_inline\n"
              "ext = load_inline(name='slow', cpp_sources='int f() { return 1; }',\n"
              "                  no_implicit_headers=True)\n")
    r = Builder(tmp_path, arch="9.0", timeout_s=15).build(Candidate(source))
    assert not r.ok and r.reason is Reason.BUILD_TIMEOUT
    assert "timed out" in r.log and len(r.build_dirs) == 1
    pid = int(pid_file.read_text())                 # the compile really started
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the compiler's sleeping child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


# --- the one real build --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build TINY_KERNEL once for real (nvcc + host compiler, about a minute on 2 cores)."""
    cache = tmp_path_factory.mktemp("build_cache")
    arch = _arch()
    result = Builder(cache, arch=arch, timeout_s=600, sandbox=_sandbox(cache)).build(
        Candidate(TINY_KERNEL))
    return cache, arch, result


def test_real_build_then_cache_hit(built):
    cache, arch, first = built
    assert first.ok, first.log
    assert not first.cache_hit and first.reason is None
    assert "arch: -arch=sm_70 -> sm_" in " ".join(first.flags)
    assert len(first.build_dirs) == 1 and (Path(first.build_dirs[0]) / MARKER).is_file()
    again = Builder(cache, arch=arch, timeout_s=600).build(Candidate(TINY_KERNEL))
    assert again.ok and again.cache_hit and again.build_s < 1.0
    assert again.build_dirs == first.build_dirs
    assert again.resources == first.resources      # the ptxas report survives a cache hit
    audit = [f for f in first.flags if f.startswith("sass_audit")]   # pure FP32: nothing listed
    assert audit == ["sass_audit: no instruction below FP32 in 1 kernel(s)"] or \
        audit[0].startswith("sass_audit_unavailable: ")               # no cuobjdump here
    assert first.precision_audit == ()
    assert [f for f in again.flags if f.startswith("sass_audit")] == audit   # kept, not redone


def test_real_build_keeps_the_ptxas_report(built):
    """-Xptxas -v is added to the build (not to its cache key); its report is parsed."""
    cache, arch, first = built
    assert [r.name for r in first.resources] == ["add_one_kernel(float const*, float*, int)"]
    (kernel,) = first.resources
    assert 4 <= kernel.registers <= 64 and kernel.spill_store_bytes == 0
    assert kernel.shared_bytes == 0 and kernel.stack_bytes == 0
    output = (Path(first.build_dirs[0]) / "build_output.log").read_text()
    assert "ptxas info" in output and "-Xptxas -v" in output
    cuda_src = TINY_KERNEL.split('cuda_src = r"""')[1].split('"""')[0]
    assert Path(first.build_dirs[0]).name == extension_key(    # the key is the one without -v
        arch, name="add_one", cpp_sources="torch::Tensor add_one(torch::Tensor x);",
        cuda_sources=cuda_src, functions=["add_one"], extra_cuda_cflags=["-O3", "-arch=sm_70"])


def test_other_candidate_reuses_extension_and_tolerates_late_errors(built):
    cache, arch, first = built
    source = TINY_KERNEL + "\nraise RuntimeError('No CUDA GPUs are available')\n"
    r = Builder(cache, arch=arch, timeout_s=120).build(Candidate(source))
    assert r.ok and r.cache_hit and r.build_dirs == first.build_dirs
    assert any(f.startswith("import_error_after_build") for f in r.flags)
    assert r.resources == first.resources          # read from the extension's marker


def test_load_candidate_uses_cache(built):
    cache, arch, first = built
    t0 = time.perf_counter()
    module = load_candidate(TINY_KERNEL, "evokernel_test_tiny", cache, arch)
    assert time.perf_counter() - t0 < 1.0
    assert hasattr(module.ext, "add_one") and hasattr(module, "ModelNew")


@pytest.mark.gpu
def test_loaded_kernel_runs(built):
    import torch
    cache, arch, _ = built
    module = load_candidate(TINY_KERNEL, "evokernel_test_tiny_gpu", cache, arch)
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(module.ModelNew()(x), x + 1)


def test_build_reexports_the_extension_cache():
    """The in-process cache moved to evokernel.build.cache; evokernel.build.builder still exports it."""
    from evokernel import sandbox
    from evokernel.build import builder as build
    from evokernel.build import cache as extension_cache
    for name in ("MARKER", "cache_key", "extension_key", "load_candidate", "patched_load_inline",
                 "rewrite_arch_flags", "toolchain", "toolkit_header_fallbacks"):
        assert getattr(build, name) is getattr(extension_cache, name)
    assert build.worker_env is sandbox.worker_env
    assert all(hasattr(build, name) for name in build.__all__)


def test_in_worker_build_step_is_not_blamed_on_the_candidate():
    """evokernel.engine.tamper does not blame a subprocess (ninja) started from evokernel's build
    code (now in two files) on the candidate whose load_inline call started the build."""
    from evokernel.build import builder as build
    from evokernel.build import cache as extension_cache
    from evokernel.engine import tamper
    for path in (extension_cache.__file__, build.__file__):
        step: dict = {}
        exec(compile("def step(f):\n    return f()\n", path, "exec"), step)
        g = {"step": step["step"], "probe": tamper._called_from_candidate}
        exec(compile("blamed = step(probe)\ndirect = probe()\n", "<candidate t>", "exec"), g)
        assert g["direct"] and not g["blamed"]


def test_default_build_workers_keep_the_cores_busy_without_doubling_them():
    from evokernel.build.host import default_build_workers
    assert [default_build_workers(c) for c in (1, 2, 4, 16, 128)] == [1, 1, 3, 12, 96]
    assert default_build_workers() >= 1


def test_default_build_workers_count_the_cores_this_process_may_use(monkeypatch):
    import os

    from evokernel.build import host
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert host.usable_cores() == 4 and host.default_build_workers() == 3


def test_builds_run_below_the_gpu_workers(tmp_path):
    """Compilers at niceness +10: the GPU workers' set-ups and timings come first."""
    import shutil
    import subprocess
    import sys

    from evokernel.build.builder import Builder
    from evokernel.build.host import BUILD_NICENESS
    with Builder(tmp_path, arch="9.0", timeout_s=60, workers=1) as b:
        cmd, env = b.command(tmp_path, "trim")
    assert cmd[:2] == [shutil.which("sh"), "-c"] and "/proc/self/autogroup" in cmd[2]
    assert cmd[4:7] == [shutil.which("nice"), "-n", str(BUILD_NICENESS)]
    assert cmd[7:10] == [sys.executable, "-m", "evokernel.build.entry"]
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["MAX_JOBS"] == "2"
    import os
    probe = cmd[:7] + [sys.executable, "-c", "import os, pathlib; print(os.nice(0)); "
                       "a = pathlib.Path('/proc/self/autogroup'); print(a.read_text() "
                       "if a.exists() else 'none')"]
    out = subprocess.run(probe, text=True, capture_output=True, start_new_session=True,
                         check=True).stdout.splitlines()
    assert int(out[0]) == min(19, os.nice(0) + BUILD_NICENESS)
    # with scheduler autogroups a nice value counts only inside the build's own session
    assert out[1] == "none" or out[1].endswith(f"nice {BUILD_NICENESS}"), out
