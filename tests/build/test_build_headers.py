"""The light stand-ins for <torch/extension.h> in cuda_sources and main.cpp (evokernel.build.headers) and the
Builder's build of the source as written when a light build fails (no nvcc needed here; the
seed build in test_seed_build.py compiles one for real)."""
from __future__ import annotations

import json as _json
from pathlib import Path

import pytest

from evokernel.build.builder import Builder
from evokernel.build.headers import (CUDA_IMPLICIT, LIGHT_HEADER, LIGHT_HEADER_NAME, LIGHT_INCLUDE,
                                     LIGHT_MAIN, LIGHT_MAIN_NAME, NEEDS_FULL, light_main,
                                     trim_extension_include)
from evokernel.build.cache import extension_key, patched_load_inline
from evokernel.records import Candidate, Reason

KERNEL = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}\n"


def test_trim_replaces_the_include_and_keeps_line_numbers():
    out, trimmed = trim_extension_include(KERNEL)
    assert trimmed and "torch/extension.h>\n" not in out.replace(LIGHT_INCLUDE, "")
    assert out.splitlines()[0] == LIGHT_INCLUDE and len(out.splitlines()) == len(KERNEL.splitlines())
    assert "#include <cuda_runtime.h>" in out


@pytest.mark.parametrize("text", ['  #  include "torch/extension.h"  // all of it\n',
                                  "#include<torch/extension.h>\n"])
def test_trim_spellings(text):
    out, trimmed = trim_extension_include(text + "__global__ void k() {}\n")
    assert trimmed and out.startswith(LIGHT_INCLUDE)


def test_trim_keeps_lists_as_lists():
    out, trimmed = trim_extension_include([KERNEL, "int x;"])
    assert trimmed and isinstance(out, list) and out[0].startswith(LIGHT_INCLUDE)
    assert out[1] == "int x;"


@pytest.mark.parametrize("uses", ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}",
                                  "namespace py = pybind11;", "torch::nn::functional::relu(x);",
                                  "TORCH_LIBRARY(my_ops, m) {}",
                                  "using namespace torch;\nauto f = nn::functional::relu;",
                                  # a macro of the full header could switch these silently
                                  "#if TORCH_VERSION_MAJOR >= 2\nconstexpr int B = 512;\n#endif",
                                  "  #ifdef AT_MKL_ENABLED\n#endif", "#ifndef X\n#define X 1\n#endif",
                                  "#if 0\n#elif defined(PY_VERSION)\n#endif",
                                  # the second review's spellings of the same
                                  "/**/ #ifdef FOO\n#endif", "%:ifdef FOO\n%:endif",
                                  "#\\\nifdef FOO\n#endif", "#if\\\ndef FOO\n#endif",
                                  "# /* x */ ifdef FOO\n#endif",
                                  "#define S(x) #x\nconst char* v = S(PY_VERSION_HEX);",
                                  'const char* s = R"DOC(\n#include <torch/extension.h>\n)DOC";',
                                  "using namespace ::torch;",
                                  # the review of 2026-12-04's: ATen/Parallel.h is full-only
                                  "using namespace at;\nint divup(int x, int y);",
                                  "using namespace c10;", "#\\  \nifdef FOO\n#endif",
                                  "\f#ifdef FOO\n#endif", "int a;\r#ifdef FOO\r#endif\r",
                                  "using /* x */ namespace at;", "using // x\nnamespace c10;",
                                  "namespace A = ::at;\nusing namespace A;",
                                  "namespace at { int divup(int x, int y); }"])
def test_sources_that_may_need_the_full_header_keep_it(uses):
    src = KERNEL + uses + "\n"
    assert trim_extension_include(src) == (src, False)


def test_the_rest_of_the_include_line_is_kept():
    """A comment opened after the include must stay open (it hides the next line)."""
    src = "#include <torch/extension.h> /* open\nstatic int pick() { return 2; } // */\n"
    out, trimmed = trim_extension_include(src)
    assert trimmed and out.splitlines()[0] == LIGHT_INCLUDE + " /* open"


def test_pragmas_and_defines_are_trimmed():
    src = KERNEL + ("#pragma once\n#define CHECK(x) \\\n  TORCH_CHECK(x)\n#pragma unroll 4\n"
                    "/* a comment */ int x = 1;\n")
    assert trim_extension_include(src)[1]


def test_the_light_header_gives_format_macros_and_torch_version():
    """What the full header brings that kernels use without naming it: PRId64 & co.
    (<cinttypes>), TORCH_VERSION_* (<torch/version.h>), <cmath>, containers."""
    for header in ("<torch/version.h>", "<cinttypes>", "<cmath>", "<vector>", "<string>"):
        assert f"#include {header}" in LIGHT_HEADER
    assert NEEDS_FULL.search("#if X") and not NEEDS_FULL.search("// #if in a comment")


@pytest.mark.parametrize("sources", [None, "", [], "__global__ void k() {}"])
def test_nothing_to_trim(sources):
    assert trim_extension_include(sources) == (sources, False)


def test_cache_key_is_of_the_source_as_written():
    """Trimming must not change the key: the worker loads a build by the key of the source it
    was given, whichever headers built it."""
    kw = dict(name="k", cpp_sources="void k();", cuda_sources=KERNEL, functions=["k"])
    assert extension_key("9.0", **kw) == extension_key("9.0", **{**kw, "cuda_sources": KERNEL})
    other = extension_key("9.0", **{**kw, "cuda_sources": trim_extension_include(KERNEL)[0]})
    assert extension_key("9.0", **kw) != other


class _FakeRuns:
    """Stands in for Builder._run: each call writes the build log and result.json that a real
    build of the given outcome would, and records whether it was asked to trim."""

    def __init__(self, outcomes):
        self.outcomes, self.trims = list(outcomes), []

    def __call__(self, builder, work: Path, mode: str, spent_s: float = 0.0, keep_fds=()):
        ok, log = self.outcomes.pop(0)
        trim = mode == "trim"                  # Builder._run's modes: "trim", "full", "nvrtc"
        self.trims.append(trim)
        (work / "build.log").write_text(log)
        (work / "result.json").write_text(_json.dumps(
            {"ok": ok, "cache_hit": False, "build_dirs": [], "flags": [],
             "trimmed": trim}))
        return False, 0


def _build(tmp_path, monkeypatch, outcomes, trim=True):
    fake = _FakeRuns(outcomes)
    monkeypatch.setattr(Builder, "_run", lambda self, *a, **k: fake(self, *a, **k))
    r = Builder(tmp_path, arch="9.0", timeout_s=60, trim_headers=trim).build(
        Candidate("x = 1\n"))
    return r, fake.trims


@pytest.mark.parametrize("error", [
    'cuda.cu(9): error: namespace "torch" has no member "indexing"',
    'cuda.cu(17): error: expected a ")"',          # "%" PRId64 without <inttypes.h>
    'cuda.cu(12): error: expected a ";"'])
def test_any_failed_light_build_is_built_as_written(tmp_path, monkeypatch, error):
    r, trims = _build(tmp_path, monkeypatch, [(False, error), (True, "evokernel: building k")])
    assert trims == [True, False]
    assert r.ok and r.reason is None
    assert any("built as written" in f for f in r.flags)


def test_the_source_as_written_decides_and_its_error_is_reported(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [
        (False, 'error: expected a ";" (light headers)'),
        (False, 'error: expected a ";" (as written)')])
    assert trims == [True, False]
    assert not r.ok and r.reason is Reason.BUILD_ERROR
    assert "(as written)" in r.log and "(light headers)" not in r.log


def test_a_good_light_build_is_built_once(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [(True, "evokernel: building k")])
    assert trims == [True] and r.ok and not r.flags


def test_trim_headers_off_builds_once_as_written(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [(False, 'error: identifier "x" is undefined')],
                      trim=False)
    assert trims == [False] and not r.ok


DECL = "torch::Tensor k(torch::Tensor x);"


def _main(**kw):
    """light_main of a call with load_inline's defaults (as the build cache binds them)."""
    return light_main({"cpp_sources": DECL, "cuda_sources": KERNEL, "functions": ["k"],
                       "no_implicit_headers": False, "sycl_sources": None, "use_pch": False,
                       **kw})


def test_light_main_replaces_load_inlines_own_include():
    kw = _main()
    assert kw == {"no_implicit_headers": True,
                  "cpp_sources": [f'#include "{LIGHT_MAIN_NAME}"', DECL],
                  "cuda_sources": [*CUDA_IMPLICIT, KERNEL]}


@pytest.mark.parametrize("kw", [
    {"cpp_sources": "#include <torch/extension.h>\n" + DECL},     # the source's own include
    {"cpp_sources": DECL + "\nnamespace py = pybind11;"},         # NEEDS_FULL
    {"cpp_sources": DECL + "\n#ifdef WITH_X\n#endif"},
    {"cpp_sources": "torch::nn::Linear make();"},
    {"cpp_sources": "using namespace at;\nstatic int divup(int x, int y);"},  # vs at::divup
    {"cpp_sources": "using namespace ::c10;"},
    {"cpp_sources": "#\\ \nif X\nint f();\n#endif"},            # a splice with a blank
    {"cpp_sources": "\f#if X\nint f();\n#endif"},                 # a form feed before #
    {"cpp_sources": "int f();\r#ifdef X\rint g();\r#endif"},     # \r line ends
    {"functions": None},                                           # binds itself
    {"no_implicit_headers": True},                                 # the caller's own headers
    {"sycl_sources": "int s();"}, {"use_pch": True}])
def test_light_main_leaves_the_full_header_where_it_may_be_needed(kw):
    assert _main(**kw) == {}


def test_light_main_needs_a_torch_that_takes_no_implicit_headers():
    kw = {"cpp_sources": DECL, "cuda_sources": KERNEL, "functions": ["k"]}
    assert light_main(kw) == {}                                   # not a parameter: as written


@pytest.mark.parametrize("cuda", [None, "", []])
def test_light_main_writes_no_cuda_cu_where_load_inline_writes_none(cuda):
    """load_inline writes cuda.cu only for non-empty cuda_sources ("" included)."""
    assert _main(cuda_sources=cuda)["cuda_sources"] == []


def test_the_light_main_header_adds_no_standard_header():
    """g++'s <torch/extension.h> lacks <cfloat>: a source using FLT_MAX must fail with the
    light main.cpp as it does as written (a review, 2026-12-04), not pass only here."""
    includes = [ln for ln in LIGHT_MAIN.splitlines() if ln.startswith("#include")]
    assert includes == ["#include <torch/types.h>", "#include <torch/python.h>"]


def _written(tmp_path, monkeypatch, trim, **kw):
    """The main.cpp and cuda.cu that load_inline writes through the build cache's patch (the
    compile itself stubbed out), and the headers written beside them."""
    from torch.utils import cpp_extension
    monkeypatch.setattr(cpp_extension, "_jit_compile", lambda *a, **k: object())
    with patched_load_inline(tmp_path / f"cache-{trim}", "9.0", trim_headers=trim) as patch:
        cpp_extension.load_inline(name=f"k_{tmp_path.name}_{trim}", functions=["k"], **kw)
    folder = Path(patch.calls[-1]["build_dir"])
    return {f.name: f.read_text() for f in folder.iterdir() if f.suffix in (".cpp", ".cu", ".h")}


def test_light_main_changes_one_line_of_main_cpp_and_nothing_in_cuda_cu(tmp_path, monkeypatch):
    """Trimmed, main.cpp differs from load_inline's own only in its first line (so compiler
    messages keep their line numbers), and cuda.cu only in the extension include's line."""
    src = dict(cpp_sources=DECL, cuda_sources=KERNEL)
    full = _written(tmp_path, monkeypatch, False, **src)
    light = _written(tmp_path, monkeypatch, True, **src)
    assert set(full) == {"main.cpp", "cuda.cu"}
    assert set(light) == {"main.cpp", "cuda.cu", LIGHT_MAIN_NAME, LIGHT_HEADER_NAME}
    f, m = full["main.cpp"].splitlines(), light["main.cpp"].splitlines()
    assert f[0] == "#include <torch/extension.h>" and m[0] == f'#include "{LIGHT_MAIN_NAME}"'
    assert f[1:] == m[1:] and any("torch::wrap_pybind_function(k)" in ln for ln in m)
    assert light["cuda.cu"] == full["cuda.cu"].replace("#include <torch/extension.h>",
                                                       LIGHT_INCLUDE)
    assert "#include <torch/python.h>" in light[LIGHT_MAIN_NAME]


def test_a_source_needing_the_full_header_is_written_as_load_inline_would(tmp_path, monkeypatch):
    src = dict(cpp_sources="#include <torch/extension.h>\n" + DECL, cuda_sources=KERNEL)
    light = _written(tmp_path, monkeypatch, True, **src)
    assert light["main.cpp"].splitlines()[:2] == ["#include <torch/extension.h>"] * 2
    assert LIGHT_MAIN_NAME not in light
