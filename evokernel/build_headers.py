"""Leaving ``#include <torch/extension.h>`` out of a candidate's ``cuda_sources`` to cut its build
time, with a full-header rebuild when that breaks it.

Where a ``load_inline`` build's time goes (softmax seed kernel, nvcc 13.0 ``-time``, one build
alone on 2 cores, torch 2.14.1; scratch measurements of 2026-11-30): ``cuda.cu`` takes ~74 s,
of which cudafe++ ~25 s, the host gcc pass ~23 s and cicc ~26 s, nearly all of it parsing the
torch headers three times; ptxas takes 0.05 s. ``main.cpp`` (18 s) compiles alongside it, so the
``.cu`` file sets the wall time. torch's own precompiled header (``use_pch=True``) cuts main.cpp
to 7 s but cannot reach the ``.cu`` file, so it leaves the wall time unchanged (72 vs 74 s).

``load_inline`` already puts ``#include <torch/types.h>`` (ATen, ``torch::Tensor``, the tensor
factories, ``TORCH_CHECK``) at the top of ``cuda_sources``; ``<torch/extension.h>`` adds the
whole C++ frontend (``torch::nn``, optim, jit, serialize) and pybind11, which a kernel file
rarely uses. Without it the same ``.cu`` compiled in 32 s instead of 77 s (2.4x; both at once
on 2 cores). The binary's code is the same: only declarations the file does not use are left
out. A source that names the frontend or pybind11 keeps the include, and a trimmed build that
fails with a missing-declaration error is rebuilt with the original source
(``Builder.build``), so trimming never turns a good candidate into a build error.
"""
from __future__ import annotations

import re
from typing import Any

EXTENSION_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/extension\.h[>"].*$',
                               re.MULTILINE)
#: Kept in place of the include, so compiler messages keep the source's line numbers.
TRIM_NOTE = "// evokernel: <torch/extension.h> left out here (load_inline adds <torch/types.h>)"
#: A cuda source naming any of these needs more than <torch/types.h>: never trimmed.
NEEDS_FULL = re.compile(r"pybind11|PYBIND11|\bpy::|torch::(nn|optim|jit|autograd|data|serialize|"
                        r"python|cuda::|fft|linalg|special|nested|sparse)\b|TORCH_LIBRARY|"
                        r"TORCH_EXTENSION_NAME")
#: Compiler messages that a missing declaration can cause: a failed trimmed build that says one
#: of these is rebuilt with the full headers; others (syntax errors, ptxas errors) are not.
MISSING_DECLARATION = re.compile(
    r"is undefined|has no member|not declared|was not declared|incomplete type|"
    r"no instance of|is not a template|not a class or namespace|no suitable|ambiguous|"
    r"namespace .* has no|expected a type specifier|no storage class or type specifier",
    re.IGNORECASE)


def trim_extension_include(sources: Any) -> tuple[Any, bool]:
    """``sources`` (a ``load_inline`` ``cuda_sources`` value: str, list of str, or None) with
    every ``#include <torch/extension.h>`` line replaced by TRIM_NOTE, unless it names something
    only that header declares (NEEDS_FULL).
    Returns: (the new value, of the same type, and whether anything was replaced)."""
    if not sources:
        return sources, False
    texts = [sources] if isinstance(sources, str) else list(sources)
    joined = "\n".join(texts)
    if NEEDS_FULL.search(joined) or not EXTENSION_INCLUDE.search(joined):
        return sources, False
    out = [EXTENSION_INCLUDE.sub(TRIM_NOTE, t) for t in texts]
    return (out[0] if isinstance(sources, str) else out), True


def should_rebuild_full(log: str) -> bool:
    """Whether a failed trimmed build's compiler output could come from the missing header."""
    return bool(MISSING_DECLARATION.search(log))
