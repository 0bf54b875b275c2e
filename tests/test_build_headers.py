"""Leaving <torch/extension.h> out of cuda_sources (evokernel.build_headers) and the Builder's
rebuild with the original source when that fails on a missing declaration (no nvcc needed)."""
from __future__ import annotations

import json as _json
from pathlib import Path

import pytest

from evokernel.build import Builder
from evokernel.build_headers import TRIM_NOTE, should_rebuild_full, trim_extension_include
from evokernel.extension_cache import extension_key
from evokernel.records import Candidate, Reason

KERNEL = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k() {}\n"


def test_trim_replaces_the_include_and_keeps_line_numbers():
    out, trimmed = trim_extension_include(KERNEL)
    assert trimmed and "torch/extension.h>\n" not in out.replace(TRIM_NOTE, "")
    assert out.splitlines()[0] == TRIM_NOTE and len(out.splitlines()) == len(KERNEL.splitlines())
    assert "#include <cuda_runtime.h>" in out


@pytest.mark.parametrize("text", ['  #  include "torch/extension.h"  // all of it\n',
                                  "#include<torch/extension.h>\n"])
def test_trim_spellings(text):
    out, trimmed = trim_extension_include(text + "__global__ void k() {}\n")
    assert trimmed and out.startswith(TRIM_NOTE)


def test_trim_keeps_lists_as_lists():
    out, trimmed = trim_extension_include([KERNEL, "int x;"])
    assert trimmed and isinstance(out, list) and out[0].startswith(TRIM_NOTE)
    assert out[1] == "int x;"


@pytest.mark.parametrize("uses", ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}",
                                  "namespace py = pybind11;", "torch::nn::functional::relu(x);",
                                  "TORCH_LIBRARY(my_ops, m) {}"])
def test_sources_using_the_frontend_keep_the_include(uses):
    src = KERNEL + uses + "\n"
    assert trim_extension_include(src) == (src, False)


@pytest.mark.parametrize("sources", [None, "", [], "__global__ void k() {}"])
def test_nothing_to_trim(sources):
    assert trim_extension_include(sources) == (sources, False)


@pytest.mark.parametrize("log, rebuild", [
    ('cuda.cu(9): error: namespace "torch" has no member "indexing"', True),
    ('cuda.cu(3): error: identifier "THPVariable_Wrap" is undefined', True),
    ("error: 'py' was not declared in this scope", True),
    ('cuda.cu(12): error: expected a ";"', False),
    ("ptxas error   : Entry function uses too much shared data", False),
])
def test_rebuild_only_for_missing_declarations(log, rebuild):
    assert should_rebuild_full(log) is rebuild


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

    def __call__(self, builder, work: Path, trim: bool, spent_s: float = 0.0):
        ok, log = self.outcomes.pop(0)
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


def test_missing_declaration_rebuilds_with_the_original_source(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [
        (False, 'cuda.cu(9): error: namespace "torch" has no member "indexing"'),
        (True, "evokernel: building k")])
    assert trims == [True, False]
    assert r.ok and r.reason is None
    assert any("rebuilt with <torch/extension.h>" in f for f in r.flags)


def test_syntax_error_is_not_rebuilt(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [(False, 'cuda.cu(12): error: expected a ";"')])
    assert trims == [True]
    assert not r.ok and r.reason is Reason.BUILD_ERROR and 'expected a ";"' in r.log


def test_a_rebuild_that_fails_too_reports_the_full_build(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [
        (False, 'error: identifier "foo" is undefined'),
        (False, 'error: identifier "foo" is undefined (full headers)')])
    assert trims == [True, False]
    assert not r.ok and "(full headers)" in r.log


def test_trim_headers_off_builds_once_as_written(tmp_path, monkeypatch):
    r, trims = _build(tmp_path, monkeypatch, [(False, 'error: identifier "x" is undefined')],
                      trim=False)
    assert trims == [False] and not r.ok
