"""`evokernel check --build-only`: compile kernel files for a GPU arch on a machine without a GPU.

    default_arch()                 the arch to build for, and where that choice came from
    build_kernels(files, arch)     build every file in parallel (evokernel.build.builder.Builder)
    located_errors(path, src, log) a failed build's errors, each at a line of the kernel file

Builds use the same cache, flags and processes as a run's (so a later run on a GPU of that arch
finds them built). A compiler error names a line of the ``.cu``/``.cpp`` file that
``load_inline`` wrote; it is mapped back to the kernel file's line by matching that line's text
(and up to two lines before it) against the file, since the sources are string literals in it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from evokernel.config import EvalConfig
from evokernel.errors import ConfigError, EvokernelError
from evokernel.records import PrecisionFinding

#: The arch built for when nothing else says: the H200's, which the project is tuned on.
FALLBACK_ARCH = "9.0"
#: At most this many errors are named per file (the first ones; later ones tend to follow).
MAX_ERRORS = 8

_COMPILER = re.compile(   # nvcc: "/x/cuda.cu(49): error: ..."; gcc: "/x/main.cpp:12:5: error: ..."
    r"^(?P<file>/\S+?)(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?):\s*(?:fatal\s+)?error\b[^:]*:"
    r"\s*(?P<msg>.+)$", re.MULTILINE)
_PTXAS = re.compile(r"^ptxas\s+(?:fatal|error)\s*:\s*(?P<msg>.+)$", re.MULTILINE)
#: "/usr/bin/ld: cannot find -lcudart: No such file or directory" (collect2's summary left out)
_LINKER = re.compile(r"^(?:/\S*/)?ld(?:\.\w+)?:\s*(?P<msg>.+)$", re.MULTILINE)
_PY_FRAME = re.compile(r'File "[^"]*candidate\.py", line (?P<line>\d+)')
_PY_ERROR = re.compile(r"^(?P<msg>[A-Za-z_][\w.]*(?:Error|Exception|Exit)\b.*)$", re.MULTILINE)


@dataclass(frozen=True)
class BuildReport:
    """The build of one kernel file.

    errors: "FILE:LINE: error: message" lines (LINE of the kernel file where it could be
        found), empty when the build succeeded.
    build_s: wall seconds; cache_hit: nothing had to be compiled.
    precision_audit: the below-FP32 instructions of its SASS (evokernel.build.sass).
    """

    path: Path
    ok: bool
    build_s: float
    cache_hit: bool
    errors: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    precision_audit: tuple[PrecisionFinding, ...] = ()


def default_arch() -> tuple[str, str]:
    """(arch, where from): the visible GPU's, else TORCH_CUDA_ARCH_LIST's last entry, else
    FALLBACK_ARCH. Raises: ConfigError for a malformed TORCH_CUDA_ARCH_LIST."""
    import os

    from evokernel.build.builder import device_arch
    try:
        arch = device_arch()
    except ConfigError:
        if os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip():
            raise
        return FALLBACK_ARCH, "no GPU and no TORCH_CUDA_ARCH_LIST: the H200's; --arch X.Y " \
                              "to change"
    import torch
    return arch, "this machine's GPU" if torch.cuda.is_available() else "TORCH_CUDA_ARCH_LIST"


def require_nvcc() -> Path:
    """The nvcc that builds will use. Raises: EvokernelError when there is none, or when its
    toolkit has no CUDA runtime to link against (``load_inline`` links
    ``-L$CUDA_HOME/lib64 -lcudart``; where CUDA_HOME is unset torch guesses it from the nvcc on
    PATH, e.g. /usr/local for /usr/local/bin/nvcc, and every build then failed at its link)."""
    from torch.utils.cpp_extension import CUDA_HOME
    home = Path(CUDA_HOME or "/usr/local/cuda")
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        raise EvokernelError(f"building kernels needs nvcc, and {nvcc} does not exist: set "
                             "CUDA_HOME to a CUDA toolkit (e.g. /usr/local/cuda)")
    if not any(any((home / d).glob("libcudart.so*")) for d in ("lib64", "lib")):
        raise EvokernelError(f"CUDA_HOME={home} has nvcc but no libcudart.so in lib64/ or lib/, "
                             "so no build could link: set CUDA_HOME to the CUDA toolkit's root "
                             "(e.g. /usr/local/cuda)")
    return nvcc


def build_kernels(files: Sequence[tuple[Path, str]], arch: str,
                  config: EvalConfig | None = None) -> list[BuildReport]:
    """Build each (path, source) for ``arch``, ``config.build_workers`` at a time (None: three
    per four cores), each within ``config.build_timeout_s``. Returns: reports in input order.
    Raises: EvokernelError without nvcc; ValueError for a malformed arch."""
    from evokernel.build.builder import Builder
    from evokernel.records import Candidate, Reason

    config = config or EvalConfig()
    require_nvcc()
    cands = [Candidate(source=src, idea=f"file {path}", operator="check") for path, src in files]
    with Builder(config.cache_path, arch=arch, timeout_s=config.build_timeout_s,
                 workers=config.build_workers, trim_headers=config.trim_headers) as builder:
        results = builder.build_many(cands)
    reports = []
    for (path, src), r in zip(files, results):
        errors: tuple[str, ...] = ()
        if r.reason is Reason.BUILD_TIMEOUT:
            errors = (f"{path}: error: the build took over {config.build_timeout_s:g} s and "
                      "was stopped",)
        elif not r.ok:
            errors = tuple(located_errors(path, src, r.log)) or (
                f"{path}: error: the build failed; its log ends:\n{r.log[-1500:]}",)
        reports.append(BuildReport(path, r.ok, r.build_s, r.cache_hit, errors, r.flags,
                                   r.precision_audit))
    return reports


def located_errors(path: Path, source: str, log: str) -> list[str]:
    """The errors of a failed build's ``log``, each as "PATH:LINE: error: message", LINE being
    the kernel file's; an error in a file ``load_inline`` generated that cannot be matched to a
    line of ``source`` is named by that file's name and line; the linker's errors (often the
    toolkit's, e.g. no libcudart where CUDA_HOME points) by the linker. Python errors raised
    while the module ran give the line of their last frame in the file. At most MAX_ERRORS."""
    lines = source.splitlines()
    out: list[str] = []
    for m in _COMPILER.finditer(log):
        generated, line = Path(m["file"]), int(m["l1"] or m["l2"])
        at = _source_line(lines, generated, line)
        where = f"{path}:{at}" if at else f"{path}: {generated.name}:{line} (written by " \
                                          "load_inline)"
        out.append(f"{where}: error: {m['msg'].strip()}")
    out += [f"{path}: error: ptxas: {m['msg'].strip()}" for m in _PTXAS.finditer(log)]
    out += [f"{path}: error: linker: {m['msg'].strip()}" for m in _LINKER.finditer(log)]
    if not out:
        frames = _PY_FRAME.findall(log)
        errors = _PY_ERROR.findall(log)
        if errors:
            where = f"{path}:{frames[-1]}" if frames else str(path)
            out.append(f"{where}: error: {errors[-1].strip()}")
    return list(dict.fromkeys(out))[:MAX_ERRORS]


def _source_line(lines: list[str], generated: Path, line: int) -> int | None:
    """The 1-based line of ``lines`` (the kernel file) holding line ``line`` of the generated
    file, matched by its text and up to two lines before it; None when it cannot be told."""
    try:
        text = generated.read_text(errors="replace").splitlines()
    except OSError:
        return None
    if not 1 <= line <= len(text) or not text[line - 1].strip():
        return None
    want = [t.strip() for t in text[max(0, line - 3):line]]
    best, best_score = None, 0
    for i, candidate in enumerate(lines):
        if candidate.strip() != want[-1]:
            continue
        score = 1 + sum(1 for k in range(1, len(want))
                        if i - k >= 0 and lines[i - k].strip() == want[-1 - k])
        if score > best_score:
            best, best_score = i + 1, score
    return best
