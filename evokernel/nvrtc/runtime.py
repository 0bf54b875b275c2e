"""Loading and launching the kernels of an NVRTC candidate: ``compile_kernels`` and ``Kernel``.

``compile_kernels`` finds the compile in the build cache (the build step made it ahead:
evokernel.build.entry) or compiles it here, for the arch of the GPU in use: the one
``configure`` set (the GPU worker passes its device's), else the current CUDA device's. The
cubin is loaded with ``cuda.core.ObjectCode.from_cubin`` when a kernel is first launched, so a
module imports on a machine without a GPU (the build step's check of the module needs no GPU).

``Kernel.launch`` checks the arguments against the kernel's parameters (evokernel.nvrtc.
signature.pack_args) and launches with ``cuda.core.launch`` on PyTorch's current stream (its
``__cuda_stream__`` protocol), so the work is ordered with PyTorch's and timed by its events.
Launch errors are cuda.core's ``CUDAError`` (``CUDA_ERROR_INVALID_VALUE`` for a bad launch
configuration, which leaves the context usable; evokernel.gate.run classifies both spellings).
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import evokernel.nvrtc.compiler as compiler
from evokernel.nvrtc.compiler import CompileSpec, Compiled
from evokernel.nvrtc.errors import KernelArgumentError, NvrtcCompileError
from evokernel.nvrtc.signature import Param, pack_args

#: Dynamic shared memory a block may use without opting in (cudaFuncAttribute
#: MaxDynamicSharedMemorySize); above it the kernel's attribute is raised first.
DEFAULT_DYNAMIC_SMEM = 48 * 1024
_MAX_BLOCK_THREADS = 1024
_CONSTANT = (r"^[ \t]*(?:#[ \t]*define[ \t]+NAME[ \t]+|(?:static[ \t]+)?(?:constexpr|const)\b"
             r"[^;\n=]*?(?:[^;\n]*,)?[ \t]*\bNAME[ \t]*=[ \t]*)\(?(?P<v>[-+]?(?:0[xX][0-9a-fA-F]+|"
             r"\d+\.?\d*(?:[eE][-+]?\d+)?))[uUlLfF]*\)?")


@dataclass(frozen=True)
class Settings:
    """Where compiles are cached and which arch they are for (``configure``); None: no cache /
    the current CUDA device's arch."""

    cache_dir: Path | None = None
    arch: str | None = None


_settings = Settings()
_lock = threading.Lock()
_memory: dict[str, Compiled] = {}        # key -> compile made or read in this process


def configure(cache_dir: str | os.PathLike | None = None, arch: str | None = None) -> Settings:
    """Set the build cache and arch for later ``compile_kernels`` calls in this process (the GPU
    worker calls it with its device's arch). Returns: the previous settings.
    Raises: ValueError for a malformed arch."""
    global _settings
    if arch is not None:
        compiler.nvrtc_arch(arch)
    previous = _settings
    wanted = Settings(Path(cache_dir) if cache_dir is not None else None, arch)
    if wanted != previous:     # unchanged: no new object, so the GPU worker's module snapshot
        _settings = wanted     # (evokernel.engine.snapshot) sees nothing replaced
    return previous


#: warm_up's kernel: it writes one zero.
_WARM_SOURCE = 'extern "C" __global__ void evokernel_warm_up(float* out) { out[0] = 0.f; }'


def warm_up() -> None:
    """Compile, load and launch one empty kernel on the current CUDA device and wait for it.

    The GPU worker calls this before its module snapshot and tamper watch (evokernel.engine.
    session): the first use of NVRTC and cuda.core in a process loads libraries, and on the H200
    (2026-12-02) that first use started a subprocess (a library search), which the gate then
    blamed on the first NVRTC candidate of each worker (rejected as ``threads``).
    Raises: NvrtcCompileError or cuda.core's errors when NVRTC or the launch does not work."""
    import torch
    kernels = compile_kernels(_WARM_SOURCE, "evokernel_warm_up")
    out = torch.ones(1, device="cuda")
    kernels["evokernel_warm_up"].launch((1,), (1,), out)
    torch.cuda.synchronize()
    if out.item() != 0.0:
        raise RuntimeError("evokernel.nvrtc.warm_up: the kernel ran but wrote nothing")


def current_arch() -> str:
    """The arch compiles are for: ``configure``'s, else the current CUDA device's ("9.0").
    Raises: NvrtcCompileError when neither is known (no GPU and nothing configured)."""
    if _settings.arch:
        return _settings.arch
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"{major}.{minor}"
    except Exception:                                     # noqa: BLE001 - no usable CUDA
        pass
    raise NvrtcCompileError("compile_kernels: no CUDA GPU is visible and no arch was "
                            "configured (evokernel.nvrtc.configure(arch='9.0'))")


def _block_threads(dims: Any, what: str, kernel: str) -> tuple[int, ...]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims) if isinstance(dims, (tuple, list)) \
        else None
    if not dims or len(dims) > 3 or not all(isinstance(d, int) and not isinstance(d, bool)
                                            and d >= 1 for d in dims):
        raise KernelArgumentError(f"kernel {kernel}: {what} must be a positive int or a tuple "
                                  f"of 1-3 positive ints, got {dims!r}")
    return dims


class Kernel:
    """One compiled kernel, launched on PyTorch's current stream.

    name: the name expression it was compiled under. params: its parameters (from NVRTC).
    """

    def __init__(self, name: str, params: Sequence[Param], module: "_Module"):
        self.name, self.params, self._module = name, tuple(params), module
        self._handle: Any = None
        self._smem_set = 0

    def __repr__(self) -> str:
        return f"Kernel({self.name}({', '.join(p.ctype for p in self.params)}))"

    def launch(self, grid: int | Sequence[int], block: int | Sequence[int], *args: Any,
               shared_mem: int = 0) -> None:
        """Launch on ``torch.cuda.current_stream()``: ``grid`` blocks of ``block`` threads
        (ints or 1-3 dims), ``shared_mem`` bytes of dynamic shared memory per block, the
        arguments in parameter order (tensors for pointers, Python numbers for scalars).

        Raises: KernelArgumentError (before the launch) for a grid, block or shared_mem of the
            wrong shape, more than 1024 threads per block, or arguments that do not fit;
            cuda.core's CUDAError when the driver refuses the launch.
        """
        g = _block_threads(grid, "grid", self.name)
        b = _block_threads(block, "block", self.name)
        threads = 1
        for d in b:
            threads *= d
        if threads > _MAX_BLOCK_THREADS:
            raise KernelArgumentError(f"kernel {self.name}: a block of {b} is {threads} "
                                      f"threads, over the {_MAX_BLOCK_THREADS} allowed")
        if not isinstance(shared_mem, int) or isinstance(shared_mem, bool) or shared_mem < 0:
            raise KernelArgumentError(f"kernel {self.name}: shared_mem must be an int >= 0 "
                                      f"(bytes), got {shared_mem!r}")
        import torch
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        packed = pack_args(self.name, self.params, args, device=device)
        if device is None:
            raise KernelArgumentError(f"kernel {self.name}: no CUDA device to launch on")
        from cuda.core import LaunchConfig, launch
        handle = self._kernel(device, shared_mem)
        stream = self._module.stream(torch.cuda.current_stream(device))
        launch(stream, LaunchConfig(grid=g, block=b, shmem_size=shared_mem), handle, *packed)

    __call__ = launch

    def _kernel(self, device: int, shared_mem: int) -> Any:
        if self._handle is None:
            self._handle = self._module.get(self.name, device)
        if shared_mem > DEFAULT_DYNAMIC_SMEM and shared_mem > self._smem_set:
            from cuda.bindings import driver
            from cuda.core import Device
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            err, = driver.cuKernelSetAttribute(attr, shared_mem, self._handle.handle,
                                               Device(device).device_id)
            if err != driver.CUresult.CUDA_SUCCESS:
                raise KernelArgumentError(f"kernel {self.name}: {shared_mem} bytes of dynamic "
                                          f"shared memory refused by the driver ({err.name})")
            self._smem_set = shared_mem
        return self._handle


class _Module:
    """A compile's cubin, loaded on first use, with the cuda.core streams wrapping PyTorch's."""

    def __init__(self, compiled: Compiled):
        self.compiled = compiled
        self._code: Any = None
        self._streams: dict[int, Any] = {}

    def get(self, name: str, device: int) -> Any:
        from cuda.core import Device, ObjectCode
        Device(device).set_current()
        if self._code is None:
            self._code = ObjectCode.from_cubin(self.compiled.cubin)
        # The lowered (mangled) symbol, as bytes: cuda.core 1.2.0 passes a symbol_mapping's
        # str values to the driver unencoded (TypeError "expected bytes, str found" on the H200,
        # 2026-12-02), and bytes are what every version's get_kernel takes.
        symbol = self.compiled.symbols.get(name, name)
        return self._code.get_kernel(symbol.encode() if isinstance(symbol, str) else symbol)

    def stream(self, torch_stream: Any) -> Any:
        key = int(torch_stream.cuda_stream)
        s = self._streams.get(key)
        if s is None:
            from cuda.core import Device
            s = self._streams[key] = Device(torch_stream.device.index).create_stream(torch_stream)
        return s


class Kernels(Mapping[str, Kernel]):
    """The kernels of one ``compile_kernels`` call, by name (also as attributes when the name
    is an identifier: ``k.softmax_row``). ``source``: the CUDA source; ``resources``: the
    kernels' ``ptxas -v`` report (JSON dicts of evokernel.records.KernelResources); ``log``:
    NVRTC's log; ``cached``: read from the cache, not compiled here."""

    def __init__(self, compiled: Compiled, names: Sequence[str], source: str = ""):
        module = _Module(compiled)
        self._kernels = {n: Kernel(n, compiled.signatures[n], module) for n in names}
        self.source = source
        self.resources, self.log, self.cached = compiled.resources, compiled.log, compiled.cached

    def constant(self, name: str) -> int | float:
        """The value of a numeric constant defined in the CUDA source, ``constexpr int NAME =
        256;`` (or ``const``) or ``#define NAME 256``: so the launch uses the block size that
        the tune operator set (evokernel.operators.tunables). Raises: KeyError when the source
        defines no such literal constant."""
        m = re.search(_CONSTANT.replace("NAME", re.escape(name)), self.source, re.MULTILINE)
        if m is None:
            raise KeyError(f"the CUDA source defines no numeric constant {name!r} (as "
                           f"'constexpr int {name} = 256;' or '#define {name} 256')")
        v = m["v"]
        return int(v, 0) if re.fullmatch(r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+)", v) else float(v)

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self._kernels[name]
        except KeyError:
            raise KeyError(f"no kernel {name!r} was compiled (compiled: "
                           f"{', '.join(self._kernels)})") from None

    def __getattr__(self, name: str) -> Kernel:
        kernels = self.__dict__.get("_kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(f"no kernel {name!r} was compiled (compiled: "
                             f"{', '.join(kernels)})")

    def __iter__(self) -> Iterator[str]:
        return iter(self._kernels)

    def __len__(self) -> int:
        return len(self._kernels)


def compile_kernels(source: str, names: str | Sequence[str], *,
                    options: Sequence[str] = ()) -> Kernels:
    """Compile CUDA ``source`` with NVRTC for the GPU in use and return its kernels ``names``
    (C++ names; a template kernel with its arguments, ``"tile<64>"``; ``extern "C"`` or not).

    options: NVRTC options (``"--use_fast_math"``, ``"-DTILE=64"``, ``"-maxrregcount=64"``;
        evokernel.nvrtc.compiler.ALLOWED_OPTIONS); arch options are ignored.
    Returns: Kernels (a mapping name -> Kernel; ``kernels.name.launch(grid, block, *args)``).
    Raises: NvrtcCompileError with NVRTC's log for a compile error, a name that is not a
        ``__global__`` function, or a bad option; ValueError for names that are not strings.
    """
    names = (names,) if isinstance(names, str) else tuple(names)
    spec = CompileSpec(source=source, names=names, options=tuple(options), arch=current_arch())
    key = compiler.spec_key(spec)
    with _lock:
        compiled = _memory.get(key)
    if compiled is None:
        compiled = _cached(spec, key)
        if compiled is None:
            compiled = compiler.compile_spec(spec)
            _store(spec, key, compiled)
        with _lock:
            _memory[key] = compiled
    return Kernels(compiled, names, source)


def _cached(spec: CompileSpec, key: str) -> Compiled | None:
    cache = _settings.cache_dir
    return compiler.read_build(cache / "builds" / key, spec) if cache is not None else None


def _store(spec: CompileSpec, key: str, compiled: Compiled) -> None:
    """Keep a compile made here in the cache when this process may write it (a contained GPU
    worker sees the cache read-only and keeps it in memory only)."""
    cache = _settings.cache_dir
    if cache is None:
        return
    builds = cache / "builds"
    if not os.access(builds if builds.is_dir() else cache, os.W_OK):
        return
    from evokernel.build.cache import exclusive_lock
    try:
        with exclusive_lock(builds / f"{key}.lock"):
            if compiler.read_build(builds / key, spec) is None:
                tmp = builds / f"{key}.{os.getpid()}.tmp"
                compiler.write_build(tmp, key, spec, compiled)
                if (builds / key).exists():
                    import shutil
                    shutil.rmtree(builds / key)
                tmp.rename(builds / key)
    except OSError:
        pass                                            # a cache we cannot write: memory only
