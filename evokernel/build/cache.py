"""The in-process side of a candidate build: ``load_inline`` routed through the build cache.

A candidate compiles its own CUDA with a module-level ``load_inline(...)`` call. Every such call
goes through ``_LoadInlinePatch``, which:

1. rewrites GPU arch flags for the device in use (``-arch=sm_70`` -> ``sm_90``; CUDA 13 rejects
   ``sm_70``) and records each rewrite;
2. looks up ``<cache_dir>/builds/<key>``, where ``key`` hashes everything that affects the
   binary (sources, flags, arch, torch / CUDA / nvcc versions), and builds a missing one in
   ``<staging_dir>/<key>``: a build worker's own folder, from which evokernel.build.publish
   moves it into the cache once the worker has ended (workers see the cache read-only:
   evokernel.sandbox.workers). Without a staging folder it builds in ``<cache_dir>/builds/<key>``
   when that is writable, else in a temporary folder of the process; never in a shared
   folder, so a killed build leaves no lock behind;
3. names the extension ``<name>_<key[:12]>``, so many candidates coexist in one process;
4. loads a finished build (marker file present) straight from its ``.so``, without ninja;
5. with ``trim_headers``, builds ``cuda_sources`` and main.cpp with light stand-ins for ``#include
   <torch/extension.h>`` (2.2-2.4x faster ``.cu`` compiles; evokernel.build.headers), and
   ``Builder`` (evokernel.build.builder) builds the source as written when that build fails;
6. with ``ptxas_report``, compiles with ``-Xptxas -v`` and keeps each kernel's registers,
   spills and shared memory (evokernel.build.ptxas) in the call record and the build folder's
   marker, so a cache hit reports them too. The flag only adds diagnostics (the binary is the
   same), so it is added after the cache key is computed and builds made without it stay valid.

``patched_load_inline`` applies the patch in a build subprocess (``evokernel.build.entry``,
started by ``evokernel.build.builder.Builder``). ``load_candidate`` runs a candidate in the GPU worker
with the same patch, so it loads the cache. evokernel.build.builder re-exports every public name here.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from loguru import logger

from evokernel.build.headers import (LIGHT_HEADER, LIGHT_HEADER_NAME, LIGHT_MAIN, LIGHT_MAIN_NAME,
                                     light_main, trim_extension_include)
from evokernel.build.ptxas import parse_ptxas, resources_from_json, resources_to_json

MARKER = "evokernel_built.json"     # written into a build folder once its module has loaded
ARCH_PATTERN = re.compile(r"^(\d+)\.(\d+)([af]?)$")
_ARCH_OPTS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code",
              "--gpu-code")
_ARCH_IN = re.compile(r"(^|\s)(%s)([=\s]|$)" % "|".join(_ARCH_OPTS))


def arch_digits(arch: str) -> tuple[str, str]:
    m = ARCH_PATTERN.match(arch)
    if not m:
        raise ValueError(f"arch must look like '9.0' (or '9.0a'), got {arch!r}")
    return m.group(1) + m.group(2), m.group(3)


def rewrite_arch_flags(flags: Sequence[str] | str | None, arch: str, *, host: bool = False
                       ) -> tuple[list[str], list[str]]:
    """Replace every GPU arch option in ``flags`` by the device's.

    Recognized: ``-arch=X``/``-arch X``, ``--gpu-architecture``, ``-gencode=...``/``-gencode
    ...``, ``--generate-code``, ``-code``, ``--gpu-code`` (each with ``=`` or a separate token;
    list items holding several space-separated options are split). For nvcc flags (``host=False``)
    all of them are dropped and one ``-gencode=arch=compute_XY,code=sm_XY`` is appended (with an
    ``a``/``f`` suffix when ``arch`` has one, or when a flag asked for the device's own major.minor
    with one). For host-compiler flags (``host=True``) they are dropped only.
    Returns: (new flags, notes such as "arch: -arch=sm_70 -> sm_90").
    Raises: ValueError for a malformed ``arch``.
    """
    digits, suffix = arch_digits(arch)
    items = [flags] if isinstance(flags, str) else list(flags or [])
    tokens = [t for item in items
              for t in (str(item).split() if _ARCH_IN.search(str(item)) else [str(item)])]
    kept, groups, i = [], [], 0
    while i < len(tokens):
        t = tokens[i]
        if "=" in t and t.split("=", 1)[0] in _ARCH_OPTS:
            groups.append(t)
        elif t in _ARCH_OPTS and i + 1 < len(tokens):
            groups.append(f"{t} {tokens[i + 1]}")
            i += 1
        else:
            kept.append(t)
        i += 1
    asked = [re.findall(r"(?:sm|compute|lto)_(\d+)([af]?)", g) for g in groups]
    if not suffix:                                   # keep sm_90a when the device is 9.0
        suffix = next((s for a in asked for d, s in a if d == digits and s), "")
    target = digits + suffix
    notes = [f"arch: dropped {g} from extra_cflags (host compiler)" if host
             else f"arch: {g} -> sm_{target}"
             for g, a in zip(groups, asked) if host or {d + s for d, s in a} != {target}]
    if not host:
        kept.append(f"-gencode=arch=compute_{target},code=sm_{target}")
    return kept, notes


def toolchain() -> dict[str, str]:
    """torch and CUDA versions, nvcc's ``--version`` text and the host compiler (``$CXX``): the
    parts of a cache key that come from the machine rather than the candidate."""
    import torch
    from torch.utils.cpp_extension import CUDA_HOME
    return {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda),
            "nvcc": _nvcc_version(str(Path(CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc")),
            "cxx": os.environ.get("CXX", "c++")}


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    try:
        return subprocess.run([nvcc, "--version"], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "none"


def extension_key(arch: str, *args: Any, **load_inline_kwargs: Any) -> str:
    """The cache key (SHA-256 hex) that a ``load_inline(*args, **load_inline_kwargs)`` call gets
    when built for ``arch``; its build folder is ``<cache_dir>/builds/<key>``.
    Raises: ValueError for a malformed arch; TypeError for arguments load_inline does not take.
    """
    return _LoadInlinePatch(Path("."), arch).prepare(*args, **load_inline_kwargs)[2]


def cache_key(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``spec`` (sorted keys, no spaces)."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[int]:
    """An exclusive advisory lock (flock(2)) on ``path``, created if missing; the kernel drops it
    when the last process holding its descriptor ends, so it never goes stale.

    Yields: the lock file's descriptor. A child process given it (``pass_fds``) holds the lock
    too, until it ends, even when this process has died first.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield f.fileno()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=1)
def toolkit_header_fallbacks() -> list[str]:
    """Include folders to add when the CUDA toolkit lacks library headers that PyTorch's own
    headers need (``<ATen/cuda/CUDAContext.h>`` includes ``cusparse.h``, which a minimal toolkit,
    such as nvcc alone, does not ship). PyTorch's pip wheels bring those headers in
    ``site-packages/nvidia/*/include``; they are used only when the toolkit has none.
    """
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME and (Path(CUDA_HOME) / "include" / "cusparse.h").is_file():
        return []
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    found = sorted({str(h.parent) for root in spec.submodule_search_locations
                    for h in Path(root).glob("*/include/cusparse.h")})
    return found[:1]


_LOADED: dict[str, Any] = {}        # key -> extension module already loaded in this process
_LOADED_LOCK = threading.Lock()


class _LoadInlinePatch:
    """A stand-in for ``torch.utils.cpp_extension.load_inline`` (see the module docstring).

    ``calls`` records one dict per call: name, key, build_dir, cache_hit, ok, flags, error,
    trimmed, resources (the ptxas report as JSON dicts; [] when not asked for or unknown).
    """

    def __init__(self, cache_dir: Path, arch: str, trim_headers: bool = False,
                 staging_dir: Path | None = None):
        from torch.utils import cpp_extension
        arch_digits(arch)
        self.cache_dir = Path(cache_dir)
        self.staging_dir = Path(staging_dir) if staging_dir is not None else None
        self.arch = arch
        self.trim_headers = trim_headers
        self.calls: list[dict[str, Any]] = []
        self.announce = False       # print "evokernel: building ..." before each compile
        self.ptxas_report = False   # compile with -Xptxas -v and parse its report
        self._original = cpp_extension.load_inline
        while isinstance(self._original, _LoadInlinePatch):
            self._original = self._original._original
        self._signature = inspect.signature(self._original)

    def prepare(self, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], list[str], str]:
        """Bind a ``load_inline`` call and rewrite its arch flags.
        Returns: (arguments, notes on rewritten flags, cache key).
        Raises: TypeError for arguments that load_inline does not take."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = {k: list(v) if isinstance(v, (list, tuple)) else v      # load_inline mutates lists
             for k, v in bound.arguments.items()}
        a["extra_cuda_cflags"], notes = rewrite_arch_flags(a["extra_cuda_cflags"], self.arch)
        if a.get("extra_cflags"):
            a["extra_cflags"], more = rewrite_arch_flags(a["extra_cflags"], self.arch, host=True)
            notes += more
        extra = toolkit_header_fallbacks()
        if extra:
            a["extra_include_paths"] = list(a.get("extra_include_paths") or []) + extra
        spec = {k: v for k, v in a.items()
                if k not in ("build_directory", "verbose", "keep_intermediates", "use_pch")}
        key = cache_key({**spec, **toolchain(), "arch": self.arch})   # of the source as given
        return a, notes, key

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call: dict[str, Any] = {"name": str(kwargs.get("name", args[0] if args else "?")),
                                "key": None, "build_dir": None, "cache_hit": True,
                                "ok": False, "flags": [], "error": None, "trimmed": False,
                                "resources": []}
        self.calls.append(call)
        try:
            a, call["flags"], key = self.prepare(*args, **kwargs)
            call.update(key=key, build_dir=str(self.cache_dir / "builds" / key))
            with _LOADED_LOCK:
                module = _LOADED.get(key)
            if module is not None:
                call["resources"] = _marker_resources(Path(call["build_dir"]))
            else:
                a.update(name=re.sub(r"\W", "_", str(a["name"])) + "_" + key[:12], verbose=False)
                module = self._load_or_build(a, key, call)
                with _LOADED_LOCK:
                    _LOADED[key] = module
        except Exception as e:
            call["error"] = f"{type(e).__name__}: {e}"
            if call["build_dir"] is not None and not call["cache_hit"] \
                    and Path(call["build_dir"]).is_dir():
                (Path(call["build_dir"]) / "build.log").write_text(call["error"])
            raise
        call["ok"] = True
        return module

    def _build_root(self) -> Path:
        """Where missing extensions are built: ``staging_dir``; else ``<cache>/builds`` when it
        is writable; else (a GPU worker's read-only cache) a temporary folder of this process."""
        if self.staging_dir is None:
            builds = self.cache_dir / "builds"
            try:
                builds.mkdir(parents=True, exist_ok=True)
                writable = os.access(builds, os.W_OK)
            except OSError:
                writable = False
            self.staging_dir = builds if writable else Path(
                tempfile.mkdtemp(prefix="evokernel-builds-"))
        return self.staging_dir

    def _load_cached(self, a: dict[str, Any], key: str, call: dict[str, Any]) -> Any:
        """The extension from a finished build in the cache, or None."""
        from torch.utils import cpp_extension
        cached = self.cache_dir / "builds" / key
        if not (cached / MARKER).is_file():
            return None
        try:
            module = cpp_extension._import_module_from_library(a["name"], str(cached),
                                                               a["is_python_module"])
        except Exception as e:                       # damaged build: build it again
            logger.warning(f"{cached}: cached build does not load ({e}); rebuilding")
            return None
        call["resources"] = _marker_resources(cached)
        return module

    def _load_or_build(self, a: dict[str, Any], key: str, call: dict[str, Any]) -> Any:
        module = self._load_cached(a, key, call)
        if module is not None:
            return module
        root = self._build_root()
        with exclusive_lock(root / f"{key}.lock"):
            if root == self.cache_dir / "builds":    # another process may have built it
                module = self._load_cached(a, key, call)
            return module if module is not None else self._build(a, root / key, call)

    def _build(self, a: dict[str, Any], build_dir: Path, call: dict[str, Any]) -> Any:
        module_name = a["name"]
        call.update(cache_hit=False, build_dir=str(build_dir))
        a["build_directory"] = str(build_dir)
        if build_dir.exists():
            shutil.rmtree(build_dir)                 # partial build of a killed process
        build_dir.mkdir(parents=True)
        cu = main = False                            # only a build that runs is trimmed
        if self.trim_headers and not a.get("no_implicit_headers"):
            a["cuda_sources"], cu = trim_extension_include(a.get("cuda_sources"))
            a.update(main_kw := light_main(a))
            main = bool(main_kw)
        light = [(f, name, text) for f, on, name, text in (
            ("cuda.cu", cu, LIGHT_HEADER_NAME, LIGHT_HEADER),
            ("main.cpp", main, LIGHT_MAIN_NAME, LIGHT_MAIN)) if on]
        for _, name, text in light:                  # beside the file that includes it
            (build_dir / name).write_text(text)
        call["trimmed"] = trimmed = bool(light)
        if self.announce:
            print(f"evokernel: building {module_name} in {build_dir}" + (
                  " (light headers in place of <torch/extension.h> in "
                  f"{' and '.join(f for f, _, _ in light)})" if light else ""), flush=True)
        t0 = time.perf_counter()
        if self.ptxas_report:
            a["extra_cuda_cflags"] = list(a["extra_cuda_cflags"] or []) + ["-Xptxas", "-v"]
            a["verbose"] = True                      # ninja's output then goes to fd 1
            with _tee_stdout(build_dir / "build_output.log") as output:
                module = self._original(**a)
            call["resources"] = resources_to_json(parse_ptxas(output.read_text(errors="replace")))
        else:
            module = self._original(**a)
        logger.debug(f"built {module_name} in {time.perf_counter() - t0:.1f} s")
        (build_dir / MARKER).write_text(json.dumps({"module_name": module_name, "key": call["key"],
                                                    "flags": call["flags"],
                                                    "headers_trimmed": trimmed,
                                                    "resources": call["resources"]}, indent=1))
        return module


def _marker_resources(build_dir: Path) -> list[dict[str, Any]]:
    """The ptxas report kept in a build folder's marker ([] for a build made without one)."""
    try:
        data = json.loads((build_dir / MARKER).read_text()).get("resources")
    except (OSError, ValueError, AttributeError):
        return []
    return resources_to_json(resources_from_json(data))


@contextlib.contextmanager
def _tee_stdout(path: Path) -> Iterator[Path]:
    """Send file descriptor 1 (what ninja and nvcc print with ``verbose=True``) to ``path``
    while active, then copy it to the original fd 1 (the build log), failure or not.
    Only used in a build subprocess, where nothing else writes to fd 1 meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "wb") as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield path
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
    finally:
        os.close(saved)
        with contextlib.suppress(OSError), open(path, "rb") as captured, \
                os.fdopen(os.dup(1), "wb") as out:
            shutil.copyfileobj(captured, out)


@contextlib.contextmanager
def patched_load_inline(cache_dir: Path, arch: str, trim_headers: bool = False,
                        staging_dir: Path | None = None) -> Iterator[_LoadInlinePatch]:
    """Route ``torch.utils.cpp_extension.load_inline`` through the build cache while active;
    ``trim_headers``: build with a light stand-in for ``<torch/extension.h>``
    (evokernel.build.headers); ``staging_dir``: where missing extensions are built (see the
    module docstring, item 2).

    Code that imported ``load_inline`` by name while active keeps the cached version afterwards.
    Yields: the patch; its ``calls`` list records every call (build folder, cache hit, flags).
    Raises: ValueError for a malformed ``arch``.
    """
    from torch.utils import cpp_extension
    patch = _LoadInlinePatch(cache_dir, arch, trim_headers, staging_dir)
    previous = cpp_extension.load_inline
    cpp_extension.load_inline = patch
    try:
        yield patch
    finally:
        cpp_extension.load_inline = previous


def load_candidate(source: str, module_name: str, cache_dir: Path, arch: str
                   ) -> types.ModuleType:
    """Import a candidate's module in this process (the GPU worker) with ``load_inline`` routed
    through the build cache: a cached build loads in well under a second; a missing one (e.g.
    ``load_inline`` called lazily) is built here, in ``<cache_dir>/builds`` when this process
    may write it, else (a contained worker) in a temporary folder that is not kept. Wrap the
    whole evaluation in ``patched_load_inline`` to catch lazy calls written as
    ``cpp_extension.load_inline(...)``.

    Returns: the module (registered in ``sys.modules`` as ``module_name``).
    Raises: whatever the module raises (build errors included); ValueError for a bad ``arch``.
    """
    from evokernel.problem import exec_module
    with patched_load_inline(cache_dir, arch):
        return exec_module(source, module_name, f"<candidate {module_name}>")
