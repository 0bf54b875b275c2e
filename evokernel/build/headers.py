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
  include: they are the declarations and macros the two header sets differ in, with a few ATen
  and c10 headers only the full set brings (``ATen/Parallel.h``, ``ATen/PadNd.h``,
  ``c10/util/ThreadLocal.h``; a review of 2026-12-04 found them), whose names a source reaches
  only qualified (a compile error where missing) or through ``using namespace at``/``c10``,
  which keeps the full header too (``at::divup`` would otherwise lose to a source's own
  ``divup`` silently);
- a source with a preprocessor conditional in any spelling (line splices with trailing blanks,
  ``\\r`` line ends, form feeds before the ``#``), or a raw string literal, keeps it too: a
  macro that only the full header defines could otherwise switch code silently;
- any other difference between the two builds makes the light one fail to compile, and
  ``Builder.build`` then builds the source as written (so a failing candidate is built twice,
  and the error it reports is the source-as-written's).
A build folder's ``evokernel_built.json`` records ``headers_trimmed``; both builds of one source
share its cache key, since they are the same program.

``main.cpp``, which ``load_inline`` writes from ``cpp_sources`` (declarations) and the pybind11
bindings of ``functions``, starts with ``#include <torch/extension.h>`` too; it needs torch's
types and ``<torch/python.h>`` (the bindings, ``torch::wrap_pybind_function``), not the rest of
the C++ frontend. ``light_main`` gives it LIGHT_MAIN in place of that line, under the same
rules (``cpp_sources`` that match NEEDS_FULL or include the full header themselves keep it).
LIGHT_MAIN adds no standard header of its own: g++'s full set lacks ``<cfloat>`` and
``<cinttypes>``, which LIGHT_HEADER has, and a source using ``FLT_MAX`` must fail here as it
would as written, not pass only under evokernel (the same review).
18.8 s -> 12.4 s for main.cpp on this project's 2-core machine (g++ 12.2, torch 2.14.1, two runs
each, 2026-12-04), which matters where builds share the CPU: in session 20's suite bench eight
builds at once kept the H200 host's 16 cores busy while their main.cpp and cuda.cu compiled
side by side (results/h200-2026-12-04-s20/README.md).
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
LIGHT_MAIN_NAME = "evokernel_light_main.h"
LIGHT_MAIN = """\
// Written by evokernel (evokernel/build/headers.py): what load_inline's main.cpp needs from
// <torch/extension.h>: torch's types and its pybind11 bindings.
#pragma once
#include <torch/types.h>
#include <torch/python.h>
"""
#: What ``load_inline`` puts before ``cuda_sources`` unless ``no_implicit_headers``; given
#: ``no_implicit_headers`` (to leave out main.cpp's full include), light_main puts it there.
CUDA_IMPLICIT = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")

#: A cuda source matching this (after joining backslash-newline splices, as the compiler's
#: translation phase 2 does) keeps the full header. It names what only the full header declares
#: or defines: the C++ frontend, pybind11, Python's macros (``Py_``/``PY_``), torch's op
#: registration, ``<sys/stat.h>``'s ``st_*time`` macros. Or it has a preprocessor conditional
#: in any spelling (``#``/``%:``, comments around the ``#``), which a macro of the full header
#: could switch without a compile error. Or a raw string literal (``R"(...)"``), inside which
#: the include line is text, not a directive.
_COMMENT = r"/\*(?:.|\n)*?\*/"
_BLANK = r"[ \t\f\v]"
NEEDS_FULL = re.compile(
    r"pybind11|PYBIND11|\bpy::|\b(?:Py|PY)_\w|\bPyObject\b|\bst_[amc]time\b|"
    rf"\busing(?:\s|{_COMMENT}|//[^\n]*\n)+namespace(?:\s|{_COMMENT}|//[^\n]*\n)+(?:::)?"
    r"(?:torch|at|c10)\b|"                                # and reopened or aliased:
    rf"\bnamespace(?:\s|{_COMMENT})+(?:torch|at|c10)\b|\bnamespace\s+\w+\s*=\s*(?:::)?"
    r"(?:torch|at|c10)\b|"
    r"torch::(nn|optim|jit|autograd|data|serialize|python|cuda::|fft|linalg|special|nested|"
    r"sparse)\b|TORCH_LIBRARY|TORCH_EXTENSION_NAME|R\"|"
    rf"(?:^|\*/){_BLANK}*(?:{_COMMENT}{_BLANK}*)*(?:#|%:)(?:{_BLANK}|{_COMMENT})*"
    r"(?:if|ifdef|ifndef|elif|elifdef|elifndef)\b", re.MULTILINE)


def needs_full(texts: list[str]) -> bool:
    """Whether source texts match NEEDS_FULL once their lines are read as the compiler reads
    them: ``\\r\\n`` and ``\\r`` line ends as ``\\n``, and line splices joined (a backslash,
    blanks, a line end: g++ joins them too, with a warning)."""
    text = "\n".join(texts).replace("\r\n", "\n").replace("\r", "\n")
    return bool(NEEDS_FULL.search(re.sub(r"\\[ \t\f\v]*\n", "", text)))


def trim_extension_include(sources: Any) -> tuple[Any, bool]:
    """``sources`` (a ``load_inline`` ``cuda_sources`` value: str, list of str, or None) with
    every ``#include <torch/extension.h>`` line replaced by LIGHT_INCLUDE, unless the sources
    match NEEDS_FULL. The caller must write LIGHT_HEADER as LIGHT_HEADER_NAME beside the
    compiled file. Returns: (the new value, of the same type, and whether anything was
    replaced)."""
    if not sources:
        return sources, False
    texts = [sources] if isinstance(sources, str) else list(sources)
    if needs_full(texts) or not EXTENSION_INCLUDE.search("\n".join(texts)):
        return sources, False
    out = [EXTENSION_INCLUDE.sub(LIGHT_INCLUDE, t) for t in texts]
    return (out[0] if isinstance(sources, str) else out), True


def light_main(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``load_inline`` keyword changes that give main.cpp ``#include "LIGHT_MAIN_NAME"`` in
    place of ``load_inline``'s ``#include <torch/extension.h>`` (the same line, so compiler
    messages keep main.cpp's line numbers): ``no_implicit_headers`` set, that include put first
    in ``cpp_sources`` and CUDA_IMPLICIT first in ``cuda_sources`` (so cuda.cu is written as
    ``load_inline`` would write it). The caller must write LIGHT_MAIN beside main.cpp.
    ``kwargs``: a ``load_inline`` call's arguments, defaults applied.
    Returns: {} where main.cpp keeps the full header: ``no_implicit_headers`` already given (or
    not a parameter of this torch), ``sycl_sources`` (whose implicit headers it would drop),
    ``use_pch`` (a precompiled <torch/extension.h>), no ``functions`` (the sources bind
    themselves), or ``cpp_sources`` that match NEEDS_FULL or include the full header."""
    cpp = kwargs.get("cpp_sources")
    cpp = [cpp] if isinstance(cpp, str) else list(cpp or [])
    if kwargs.get("no_implicit_headers", True) or kwargs.get("sycl_sources") \
            or kwargs.get("use_pch") or kwargs.get("functions") is None \
            or needs_full(cpp) or EXTENSION_INCLUDE.search("\n".join(cpp)):
        return {}
    cuda = kwargs.get("cuda_sources") or []              # as load_inline: "" writes no cuda.cu
    cuda = [cuda] if isinstance(cuda, str) else list(cuda)
    return {"no_implicit_headers": True, "cpp_sources": [f'#include "{LIGHT_MAIN_NAME}"', *cpp],
            "cuda_sources": [*CUDA_IMPLICIT, *cuda] if cuda else cuda}
