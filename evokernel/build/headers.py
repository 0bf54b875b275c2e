"""Building a candidate's ``cuda_sources`` with a light stand-in for ``#include
<torch/extension.h>`` to cut its build time, and the rules that keep that safe.

Where a ``load_inline`` build's time goes (softmax seed kernel, nvcc 13.0 ``-time``, one build
alone on 2 cores, torch 2.14.1; scratch measurements of 2026-11-30): ``cuda.cu`` takes ~74 s,
of which cudafe++ ~25 s, the host gcc pass ~23 s and cicc ~26 s, nearly all of it parsing the
torch headers three times; ptxas takes 0.05 s. ``main.cpp`` (18 s) compiles alongside it, so the
``.cu`` file sets the wall time. torch's own precompiled header (``use_pch=True``) cuts main.cpp
to 7 s but cannot reach the ``.cu`` file, so it leaves the wall time unchanged (72 vs 74 s).

``load_inline`` already puts ``#include <torch/types.h>`` (ATen, ``torch::Tensor``, the tensor
factories, ``TORCH_CHECK``) at the top of ``cuda_sources``; ``<torch/extension.h>`` adds the
whole C++ frontend (``torch::nn``, optim, jit, serialize) and pybind11/Python.h, which a kernel
file rarely uses. The include line is replaced, on the same line (so compiler messages keep the
source's line numbers), by ``#include "evokernel_light_extension.h"``: LIGHT_HEADER, written
beside ``cuda.cu``, with ``<torch/version.h>`` and the standard headers the full one brings in
(``<cinttypes>`` for ``PRId64``, ``<cmath>``, containers, streams). The ``.cu`` file compiled in
32-35 s instead of 77 s here (2.2-2.4x), and 14 builds on the H200 took 68.5 s instead of
135.6 s (results/h200-2026-11-30-s2).

Safety, as the rules stand (two adversarial reviews of 2026-11-30 shaped them):
- a source that names the C++ frontend, pybind11 or Python's macros (NEEDS_FULL) keeps the
  include: they are the only declarations and macros the two header sets differ in (from
  ``-dM`` and the include lists: no ATen or c10 header differs, so overloads on torch types
  resolve the same);
- a source with a preprocessor conditional in any spelling, or a raw string literal, keeps it
  too: a macro that only the full header defines could otherwise switch code silently;
- any other difference between the two builds makes the light one fail to compile, and
  ``Builder.build`` then builds the source as written (so a failing candidate is built twice,
  and the error it reports is the source-as-written's).
A build folder's ``evokernel_built.json`` records ``headers_trimmed``; both builds of one source
share its cache key, since they are the same program.
"""
from __future__ import annotations

import re
from typing import Any

#: The directive alone: the rest of its line (a comment, say) is kept as it is.
EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"]',
                               re.MULTILINE)
LIGHT_HEADER_NAME = "evokernel_light_extension.h"
#: Replaces the directive in place (same line: compiler messages keep their line numbers).
LIGHT_INCLUDE = f'#include "{LIGHT_HEADER_NAME}"'
LIGHT_HEADER = """\
// Written by evokernel (evokernel/build/headers.py): what a kernel file usually needs from
// <torch/extension.h> beyond the <torch/types.h> that load_inline includes.
#pragma once
#include <torch/version.h>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cfloat>
#include <climits>
#include <algorithm>
#include <array>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
"""
#: A cuda source matching this (after joining backslash-newline splices, as the compiler's
#: translation phase 2 does) keeps the full header. It names what only the full header declares
#: or defines: the C++ frontend, pybind11, Python's macros (``Py_``/``PY_``), torch's op
#: registration, ``<sys/stat.h>``'s ``st_*time`` macros. Or it has a preprocessor conditional
#: in any spelling (``#``/``%:``, comments around the ``#``), which a macro of the full header
#: could switch without a compile error. Or a raw string literal (``R"(...)"``), inside which
#: the include line is text, not a directive.
_COMMENT = r"/\*(?:.|\n)*?\*/"
NEEDS_FULL = re.compile(
    r"pybind11|PYBIND11|\bpy::|\b(?:Py|PY)_\w|\bPyObject\b|\bst_[amc]time\b|"
    r"\busing\s+namespace\s+(?:::)?torch\b|"
    r"torch::(nn|optim|jit|autograd|data|serialize|python|cuda::|fft|linalg|special|nested|"
    r"sparse)\b|TORCH_LIBRARY|TORCH_EXTENSION_NAME|R\"|"
    rf"(?:^|\*/)[ \t]*(?:{_COMMENT}[ \t]*)*(?:#|%:)(?:[ \t]|{_COMMENT})*"
    r"(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b", re.MULTILINE)


def trim_extension_include(sources: Any) -> tuple[Any, bool]:
    """``sources`` (a ``load_inline`` ``cuda_sources`` value: str, list of str, or None) with
    every ``#include <torch/extension.h>`` line replaced by LIGHT_INCLUDE, unless the sources
    match NEEDS_FULL. The caller must write LIGHT_HEADER as LIGHT_HEADER_NAME beside the
    compiled file. Returns: (the new value, of the same type, and whether anything was
    replaced)."""
    if not sources:
        return sources, False
    texts = [sources] if isinstance(sources, str) else list(sources)
    joined = "\n".join(texts)
    if NEEDS_FULL.search(joined.replace("\\\n", "")) or not EXTENSION_INCLUDE.search(joined):
        return sources, False
    out = [EXTENSION_INCLUDE.sub(LIGHT_INCLUDE, t) for t in texts]
    return (out[0] if isinstance(sources, str) else out), True
