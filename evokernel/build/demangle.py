"""C++ symbol names demangled in this process, for the ptxas report, the SASS audit and the
NVRTC signature probe.

libstdc++'s ``abi::__cxa_demangle`` (the runtime library PyTorch itself links) reads Itanium
names; ``c++filt`` is the fallback when that library cannot be loaded. In-process first, because
a GPU worker may demangle on a candidate's behalf (an NVRTC compile its module runs when it is
imported there), and the worker's tamper watch rejects a subprocess started with candidate code
on the stack (evokernel.engine.tamper): on the H200 (2026-12-03) a ``c++filt`` call per compile
had every such candidate rejected as ``threads``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import shutil
import subprocess
from typing import Any, Sequence


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> Any:
    # libstdc++ by its soname first: ctypes.util.find_library runs `ldconfig -p` (a subprocess,
    # which a GPU worker's tamper watch rejects when it happens in a candidate's call).
    try:
        fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        path = ctypes.util.find_library("stdc++")
        try:
            fn = ctypes.CDLL(path).__cxa_demangle if path else None
        except (OSError, AttributeError):
            fn = None
    if fn is None:
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t),
                   ctypes.POINTER(ctypes.c_int)]
    return fn


@functools.lru_cache(maxsize=1)
def _libc_free() -> Any:
    return ctypes.CDLL(None).free         # what __cxa_demangle's buffers are released with


def demangle(symbols: Sequence[str]) -> list[str]:
    """Itanium C++ symbols demangled (``__cxa_demangle``, else one ``c++filt`` call); a symbol
    that neither can read (an ``extern "C"`` name, for one) is returned as given."""
    fn = _cxa_demangle()
    if fn is None:
        return _cxxfilt(symbols)
    free = _libc_free()
    out = []
    for s in symbols:
        status = ctypes.c_int(0)
        ptr = fn(s.encode(), None, None, ctypes.byref(status))
        if ptr and status.value == 0:
            out.append(ctypes.string_at(ptr).decode())
            free(ctypes.c_void_p(ptr))
        else:
            out.append(s)
    return out


def _cxxfilt(symbols: Sequence[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if tool is None or not symbols:
        return list(symbols)
    try:
        res = subprocess.run([tool], input="\n".join(symbols) + "\n", capture_output=True,
                             text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return list(symbols)
    lines = res.stdout.splitlines()
    return lines if len(lines) == len(symbols) else list(symbols)
