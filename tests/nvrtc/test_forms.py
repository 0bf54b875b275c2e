"""The candidate form of a kernel file, told by what it calls, and the compile_kernels calls the
build step can read without running the module (evokernel.build.forms)."""
from pathlib import Path

import pytest

from evokernel.build.forms import FORMS, form_name, nvrtc_calls

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "problems" / "seeds"


def test_every_seed_kernel_is_recognized_in_its_form():
    names = sorted(p.stem for p in SEEDS.glob("*.py") if p.name != "__init__.py")
    assert names == sorted(p.stem for p in (SEEDS / "nvrtc").glob("*.py")
                           if p.name != "__init__.py")
    for name in names:
        assert form_name((SEEDS / f"{name}.py").read_text()) == "load_inline"
        assert form_name((SEEDS / "nvrtc" / f"{name}.py").read_text()) == "nvrtc"
    assert [f.name for f in FORMS] == ["load_inline", "nvrtc"]


@pytest.mark.parametrize("text, form", [
    ("from evokernel.nvrtc import compile_kernels as ck\nk = ck('x', ['k'])\n", "nvrtc"),
    ("import evokernel.nvrtc as nv\nk = nv.compile_kernels('x', ['k'])\n", "nvrtc"),
    ("from torch.utils.cpp_extension import load_inline\nfrom evokernel.nvrtc import "
     "compile_kernels\n", "load_inline"),           # both: built as load_inline (module runs)
    ("import torch\n# compile_kernels in a comment is no call\n", None),
    ("def broken(:\n", None),
])
def test_form_by_what_the_file_uses(text, form):
    assert form_name(text) == form


def test_literal_arguments_are_read_without_running_the_module():
    text = '''
from evokernel.nvrtc import compile_kernels as ck
TILE = 64
HEAD = "constexpr int TILE = " + str(TILE) + ";"
src = f"""
constexpr int BLOCK = {TILE};
__global__ void a(float* y) {{ y[0] = 1.0f; }}
"""
NAMES = ("a",)
k1 = ck(src, NAMES, options=["-DX=1", "--use_fast_math"])
k2 = ck(source="__global__ void b() {}" + "\\n", names="b")
k3 = ck(HEAD, ["c"])                       # str(TILE) is a call: needs the module to run


class ModelNew:
    def __init__(self):
        self.k = ck(make_source(), ["d"])      # computed: left to the GPU worker
'''
    calls, deferred = nvrtc_calls(text)
    assert [(c.names, c.options, c.line) for c in calls] == [
        (("a",), ("-DX=1", "--use_fast_math"), 10), (("b",), (), 11)]
    assert "constexpr int BLOCK = 64;" in calls[0].source and "{y[0]" not in calls[0].source
    assert calls[1].source == "__global__ void b() {}\n"
    assert deferred == (12, 17)


def test_a_name_bound_twice_is_not_a_literal():
    text = ("from evokernel.nvrtc import compile_kernels\nS = 'a'\nS = 'b'\n"
            "k = compile_kernels(S, ['k'])\n")
    assert nvrtc_calls(text) == ((), (4,))
