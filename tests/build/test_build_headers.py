"""The light stand-in for <torch/extension.h> in cuda_sources (evokernel.build.headers) and the
Builder's build of the source as written when a light build fails (no nvcc needed here; the
seed build in test_seed_build.py compiles one for real)."""
from __future__ import annotations

import json as _json
from pathlib import Path

import pytest

from evokernel.build.builder import Builder
from evokernel.build.headers import (LIGHT_HEADER, LIGHT_INCLUDE, NEEDS_FULL,
                                     trim_extension_include)
from evokernel.build.cache import extension_key
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
                                  "using namespace ::torch;"])
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
