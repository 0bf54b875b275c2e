"""`evokernel check` without a GPU: a kernel file's own faults are named (file and line) before
any build or GPU, and `--build-only` compiles files in parallel and names each compiler error at
the kernel file's line."""
from pathlib import Path

import pytest
import torch

from evokernel.build.builder import BuildResult
from evokernel.cli import build_only
from evokernel.cli.kernel_faults import FORMS, kernel_faults
from evokernel.cli.main import main
from evokernel.records import Reason

SEED = Path(__file__).resolve().parents[2] / "problems" / "seeds" / "softmax.py"

#: A kernel whose CUDA fails to compile fast: no implicit torch headers, and the error on the
#: file's line 9 ("LINE" marks it in the tests).
BROKEN = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
__global__ void k(float* y) {
    y[0] = 1.0f;
}

__global__ void broken(float* y) { y[0] = undefined_name_{tag}; }
"""
ext = load_inline(name="broken_{tag}", cpp_sources="", cuda_sources=cuda_src,
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, line, message", [
    ("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n", 2, "syntax error"),
    ("import torch\nfrom torch.utils.cpp_extension import load_inline\nx = load_inline\n",
     None, "no class ModelNew at module level"),
    ("from torch.utils.cpp_extension import load_inline as li\nimport torch\n\n"
     "class ModelNew(torch.nn.Module):\n    pass\n", 4, "class ModelNew has no forward()"),
    ("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
     "        return torch.softmax(x, -1)  # load_inline in a comment does not count\n",
     None, "no GPU code is built"),
])
def test_a_kernel_files_own_faults(tmp_path, text, line, message):
    path = write(tmp_path, "k.py", text)
    faults = [f for f in kernel_faults(path, text) if f.severity == "error"]
    assert len(faults) == 1, faults
    assert faults[0].line == line and message in faults[0].message
    assert str(faults[0]).startswith(f"{path}:{line}: error:" if line else f"{path}: error:")


def test_the_seed_kernels_have_no_fault():
    for seed in (s for s in SEED.parent.glob("*.py") if s.name != "__init__.py"):
        assert kernel_faults(seed, seed.read_text()) == [], seed


def test_a_load_inline_alias_or_module_attribute_is_a_build_call(tmp_path):
    for text in ("from torch.utils.cpp_extension import load_inline as li\next = li(name='x')\n",
                 "import torch.utils.cpp_extension as ce\next = ce.load_inline(name='x')\n"):
        text += "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
                "        return x\n"
        assert kernel_faults(tmp_path / "k.py", text) == []
    assert [f.name for f in FORMS] == ["load_inline", "nvrtc"]


def test_the_source_scan_is_named_at_its_line_as_a_warning(tmp_path):
    text = SEED.read_text().replace("const float o =", "const __half o =", 1)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "__half o" in t)
    faults = kernel_faults(tmp_path / "k.py", text)
    assert [(f.severity, f.line) for f in faults] == [("warning", line)]
    assert "fp16 (__half)" in faults[0].message and "lower precision" in faults[0].message


def test_check_names_faults_without_asking_for_a_gpu(tmp_path, capsys):
    bad = write(tmp_path, "bad.py", "import torch\nclass ModelNew(torch.nn.Module:\n")
    none = write(tmp_path, "none.py", "import torch\n")
    out_json = tmp_path / "check.json"
    assert main(["check", "softmax", str(bad), str(none), "--json", str(out_json)]) == 1
    out, err = capsys.readouterr()
    assert f"{bad}:2: error: syntax error" in out and f"{none}: error: no class ModelNew" in out
    assert "every file has a fault" in out and "GPU" not in err
    import json
    kernels = json.loads(out_json.read_text())["kernels"]
    assert [k["reason"] for k in kernels] == ["build_error", "no_code"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_check_of_a_good_file_without_a_gpu_points_to_build_only(capsys):
    assert main(["check", "softmax", str(SEED)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "check\n  --build-only" in err


def test_build_only_compiles_in_parallel_and_names_each_error_at_its_line(tmp_path, capsys,
                                                                           monkeypatch):
    """Two real nvcc builds for sm_90, at once; each error is at line 9 of its own file."""
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    a = write(tmp_path, "a.py", BROKEN.replace("{tag}", "a"))
    b = write(tmp_path, "b.py", BROKEN.replace("{tag}", "b"))
    assert main(["check", "softmax", str(a), str(b), "--build-only", "--arch", "9.0"]) == 1
    out = capsys.readouterr().out
    assert "building 2 kernel file(s) for sm_90 (--arch)" in out
    for path, tag in ((a, "a"), (b, "b")):
        assert f"{path}: FAILED" in out
        assert f"{path}:9: error: identifier \"undefined_name_{tag}\" is undefined" in out
    assert "0 of 2 kernel file(s) built; 2 did not" in out


def test_build_only_reports_built_files_and_skips_faulty_ones(tmp_path, capsys, monkeypatch):
    """The success path with the Builder replaced (a real successful build is
    tests/build/test_build.py's): faulty files never reach it."""
    seen = []

    def build_many(self, cands):
        seen.extend(c.source for c in cands)
        return [BuildResult(c.id, True, None, 1.5, False) for c in cands]
    monkeypatch.setattr("evokernel.build.builder.Builder.build_many", build_many)
    monkeypatch.setenv("EVOKERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0")
    bad = write(tmp_path, "bad.py", "import torch\n")
    assert main(["check", "softmax", str(SEED), str(bad), "--build-only"]) == 1
    out = capsys.readouterr().out
    assert seen == [SEED.read_text()]
    assert "for sm_80 (TORCH_CUDA_ARCH_LIST)" in out and f"{SEED}: built in 1.5 s" in out
    assert "1 of 2 kernel file(s) built; 1 did not" in out
    assert main(["check", "softmax", str(SEED), "--build-only"]) == 0


def test_located_errors_maps_generated_lines_and_python_frames(tmp_path):
    kernel = tmp_path / "k.py"
    source = "x = 1\ncuda = '''\nint a;\nint b = c;\n'''\n"
    generated = tmp_path / "cuda.cu"
    generated.write_text("#include <torch/types.h>\n\nint a;\nint b = c;\n")
    log = (f"{generated}(4): error: identifier \"c\" is undefined\n"
           f"{tmp_path}/main.cpp:30:5: error: 'f' was not declared in this scope\n")
    assert build_only.located_errors(kernel, source, log) == [
        f"{kernel}:4: error: identifier \"c\" is undefined",
        f"{kernel}: main.cpp:30 (written by load_inline): error: 'f' was not declared in this "
        "scope"]
    py_log = ('Traceback (most recent call last):\n  File "/c/candidate.py", line 7, in '
              "<module>\n    ext = load_inline(nme='x')\nTypeError: load_inline() got an "
              "unexpected keyword argument 'nme'\n")
    assert build_only.located_errors(kernel, source, py_log) == [
        f"{kernel}:7: error: TypeError: load_inline() got an unexpected keyword argument 'nme'"]
    ld_log = ("/usr/bin/ld: cannot find -lcudart: No such file or directory\n"
              "collect2: error: ld returned 1 exit status\nninja: build stopped\n"
              + py_log.replace("TypeError: load_inline() got an unexpected keyword argument "
                               "'nme'", "RuntimeError: Error building extension 'x'"))
    assert build_only.located_errors(kernel, source, ld_log) == [   # not the load_inline line
        f"{kernel}: error: linker: cannot find -lcudart: No such file or directory"]


def test_build_only_flags_are_checked(tmp_path, capsys):
    assert main(["check", "softmax", str(SEED), "--arch", "9.0"]) == 2
    assert "--arch is for --build-only" in capsys.readouterr().err
    assert main(["check", "softmax", str(SEED), "--build-only", "--json", "x.json"]) == 2
    assert "--json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:          # argparse's error, status 2
        main(["check", "softmax", str(SEED), "--build-only", "--arch", "nine"])
    assert exited.value.code == 2
    said = capsys.readouterr()
    assert "argument --arch" in said.err and "'nine'" in said.err, said.err
    assert "building" not in said.out, said.out       # refused before the build plan


def test_faults_reason_default():
    assert kernel_faults(Path("k.py"), "import torch\n")[0].reason is Reason.NO_CODE


def test_a_cuda_home_without_the_runtime_is_named_before_any_build(tmp_path, monkeypatch):
    """torch guesses CUDA_HOME=/usr/local from /usr/local/bin/nvcc; every build then failed at
    its link (a new user, 2026-12-04)."""
    from torch.utils import cpp_extension

    from evokernel.errors import EvokernelError
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path))
    with pytest.raises(EvokernelError, match="no libcudart.so in lib64/ or lib/"):
        build_only.require_nvcc()
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libcudart.so.13").write_text("")
    assert build_only.require_nvcc() == tmp_path / "bin" / "nvcc"
