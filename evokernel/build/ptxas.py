"""The ``ptxas -v`` report of a candidate's kernels, parsed from its build output.

A build with ``-Xptxas -v`` (evokernel.build.cache adds it to the nvcc flags of every build it
runs; the flag changes diagnostics only, not the binary, so it is not part of the cache key)
prints, for each kernel, lines such as (CUDA 13.0 nvcc, sm_90)::

    ptxas info    : Compiling entry function '_Z5heavyPKfPfi' for 'sm_90'
    ptxas info    : Function properties for _Z5heavyPKfPfi
        9888 bytes stack frame, 10428 bytes spill stores, 21380 bytes spill loads
    ptxas info    : Used 32 registers, used 0 barriers, 9888 bytes cumulative stack size

and CUDA 12 prints ``Used 29 registers, 1024 bytes smem, 376 bytes cmem[0]``. Only entry
functions (kernels) are reported; ``Function properties`` of non-inlined device functions are
skipped. Names are demangled (evokernel.build.demangle), so they read as
torch.profiler's kernel names do (evokernel.records.KernelTime).
"""
from __future__ import annotations

import re
from typing import Sequence

from evokernel.build.demangle import demangle
from evokernel.records import KernelResources

_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '(?P<name>[^']+)'")
_PROPS = re.compile(r"ptxas info\s*: Function properties for (?P<name>\S+)")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, "
                    r"(?P<ld>\d+) bytes spill loads")
_USED = re.compile(r"ptxas info\s*: Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


def parse_ptxas(text: str, *, demangle_names: bool = True) -> tuple[KernelResources, ...]:
    """Every kernel's resources in a build log holding ``ptxas -v`` output.

    Args:
        text: the build output (other lines are ignored; any amount of interleaved noise).
        demangle_names: demangle the names (evokernel.build.demangle).
    Returns: one KernelResources per entry function (registers per thread; spill stores and
        loads, stack frame and static shared memory in bytes), in order of appearance; a kernel
        compiled twice (two translation units) once, with its last report. () when the text
        holds no ptxas report. Never raises on malformed text.
    """
    found: dict[str, dict[str, int]] = {}
    entry: str | None = None        # the kernel whose report the next lines belong to
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            entry = m.group("name")
            found[entry] = {"registers": 0}
            continue
        m = _PROPS.search(line)
        if m:
            if m.group("name") != entry:       # a device function's properties: not a kernel
                entry = None
            continue
        if entry is None:
            continue
        m = _FRAME.search(line)
        if m:
            found[entry].update(stack_bytes=int(m.group("stack")),
                                spill_store_bytes=int(m.group("st")),
                                spill_load_bytes=int(m.group("ld")))
            continue
        m = _USED.search(line)
        if m:
            found[entry]["registers"] = int(m.group("regs"))
            smem = _SMEM.search(line)
            if smem:
                found[entry]["shared_bytes"] = int(smem.group("smem"))
            entry = None                       # "Used ..." closes a kernel's report
    names = list(found)
    readable = demangle(names) if demangle_names else names
    return tuple(KernelResources(name=nice, **found[raw]) for raw, nice in zip(names, readable))


def resources_to_json(resources: Sequence[KernelResources]) -> list[dict[str, object]]:
    """The report as JSON-ready dicts (the build's result.json and build-folder marker)."""
    import dataclasses
    return [dataclasses.asdict(r) for r in resources]


def resources_from_json(data: object) -> tuple[KernelResources, ...]:
    """The inverse of ``resources_to_json``; () for anything that is not a list of such dicts
    (an older cache entry without a report, or a damaged one)."""
    if not isinstance(data, list):
        return ()
    out = []
    for d in data:
        try:
            out.append(KernelResources(**d))
        except TypeError:
            return ()
    return tuple(out)
