"""Kernel parameter types, read from the compiler, and the packing of a launch's arguments.

NVRTC compiles each kernel named in ``compile_kernels`` together with a name expression
``&evokernel_signature_probe<decltype(KERNEL)>`` (evokernel.nvrtc.compiler): the variable
template's mangled name carries the kernel's function type, ``extern "C"`` kernels included,
whose own symbol carries none. Demangled (evokernel.build.demangle) it reads
``evokernel_signature_probe<void (float const*, float*, long long, float)>``;
:func:`parse_signature` turns the parameter list into :class:`Param` records.

:func:`pack_args` checks a launch's arguments against them before anything reaches the driver
(a wrong count or type is a :class:`~evokernel.nvrtc.errors.KernelArgumentError`, never a
launch that reads garbage) and converts them: a tensor to its data pointer (its dtype must fit
the pointee), a Python number to the parameter's C type (NumPy scalars of that type, which
cuda.core packs by their size). Pure Python and NumPy: no torch import, no GPU. NumPy is
imported by the packing alone, so the build step's compiles (evokernel.build.nvrtc_build, which
read signatures but launch nothing) do not pay its ~0.2 s import.

Sizes follow the CUDA ABI on 64-bit Linux (LP64: ``long`` is 8 bytes, as on the host).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Sequence

from evokernel.build.demangle import demangle
from evokernel.nvrtc.errors import KernelArgumentError

#: The variable template whose instantiations carry the kernels' function types.
PROBE = "evokernel_signature_probe"

#: Scalar C types (as the demangler spells them) -> the name of their NumPy type.
SCALARS: dict[str, str] = {
    "bool": "bool_", "char": "int8", "signed char": "int8", "unsigned char": "uint8",
    "short": "int16", "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32",
    "long": "int64", "unsigned long": "uint64", "long long": "int64",
    "unsigned long long": "uint64", "float": "float32", "double": "float64",
    "__half": "float16", "half": "float16",
}

#: Pointee type -> the torch dtypes (by name) a tensor passed for it may have. A pointee not
#: listed here (void, char, unsigned char, a struct) accepts a tensor of any dtype.
_POINTEE_DTYPES: dict[str, tuple[str, ...]] = {}
for _names, _dtypes in (
        (("float", "float1", "float2", "float3", "float4"), ("float32",)),
        (("double", "double1", "double2", "double3", "double4"), ("float64",)),
        (("__half", "half", "__half2", "half2"), ("float16",)),
        (("__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16"), ("bfloat16",)),
        (("int", "unsigned int", "int1", "int2", "int3", "int4", "uint1", "uint2", "uint3",
          "uint4"), ("int32", "uint32")),
        (("long", "unsigned long", "long long", "unsigned long long", "longlong2",
          "longlong4", "ulonglong2", "long2", "ulong2"), ("int64", "uint64")),
        (("short", "unsigned short", "short2", "ushort2"), ("int16", "uint16")),
        (("signed char",), ("int8",)),
        (("bool",), ("bool",))):
    for _n in _names:
        _POINTEE_DTYPES[_n] = _dtypes


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    ctype: its type as the demangler spells it ("float const*", "long long", "float4").
    kind: "pointer", "scalar" (a type of SCALARS) or "opaque" (a struct or enum by value:
        passed only as a NumPy scalar or ctypes object the candidate made).
    pointee: the pointed-to type without qualifiers ("float"), for a pointer; else "".
    """

    ctype: str
    kind: str
    pointee: str = ""

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The torch dtype names a tensor for this pointer may have; () for any."""
        return _POINTEE_DTYPES.get(self.pointee, ())


def classify(ctype: str) -> Param:
    """The Param of one demangled parameter type."""
    text = " ".join(ctype.split())
    if text.endswith("*"):
        pointee = text[:-1].strip()
        words = [w for w in pointee.replace("*", " * ").split()
                 if w not in ("const", "volatile", "__restrict__", "__restrict")]
        return Param(text, "pointer", " ".join(words).replace(" *", "*"))
    bare = " ".join(w for w in text.split() if w not in ("const", "volatile"))
    return Param(text, "scalar" if bare in SCALARS else "opaque")


def split_params(text: str) -> list[str]:
    """The comma-separated items of a parameter list, commas inside <>, () or [] kept."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    return items + [last] if last or items else items


def parse_signature(demangled: str) -> tuple[Param, ...]:
    """The parameters in a demangled probe symbol, ``PROBE<void (T1, T2, ...)>``.

    Raises: ValueError when the text is not of that shape (the demangler failed).
    """
    text = demangled.strip()
    if not text.startswith(PROBE + "<") or not text.endswith(">"):
        raise ValueError(f"not a demangled signature probe: {demangled!r}")
    fn = text[len(PROBE) + 1:-1].strip()
    open_at = fn.find("(")
    if open_at < 0 or not fn.endswith(")"):
        raise ValueError(f"no parameter list in {demangled!r}")
    inner = fn[open_at + 1:-1].strip()
    if inner in ("", "void"):
        return ()
    return tuple(classify(p) for p in split_params(inner))


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "data_ptr") and hasattr(x, "dtype") and hasattr(x, "device")


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _pointer(kernel: str, i: int, p: Param, arg: Any, device: int | None) -> Any:
    import numpy as np
    where = f"kernel {kernel}: argument {i} ({p.ctype})"
    if arg is None:
        return 0
    if isinstance(arg, (int, np.integer)) and not isinstance(arg, (bool, np.bool_)):
        return int(arg)                                  # a raw device address
    if not _is_tensor(arg):
        raise KernelArgumentError(f"{where} needs a CUDA tensor (or a device address as an "
                                  f"int), got {type(arg).__name__}")
    if not getattr(arg, "is_cuda", False):
        raise KernelArgumentError(f"{where} needs a CUDA tensor, got a tensor on "
                                  f"{arg.device}")
    if device is not None and arg.device.index not in (None, device):
        raise KernelArgumentError(f"{where}: the tensor is on {arg.device}, the launch on "
                                  f"cuda:{device}")
    if p.dtypes and _dtype_name(arg) not in p.dtypes:
        raise KernelArgumentError(f"{where} points to {p.pointee}, got a {arg.dtype} tensor "
                                  f"(expected {' or '.join('torch.' + d for d in p.dtypes)})")
    return int(arg.data_ptr())


def _scalar(kernel: str, i: int, p: Param, arg: Any) -> Any:
    import numpy as np
    where = f"kernel {kernel}: argument {i} ({p.ctype})"
    np_type = getattr(np, SCALARS[" ".join(w for w in p.ctype.split() if w not in ("const", "volatile"))])
    if _is_tensor(arg):
        raise KernelArgumentError(f"{where} is a scalar, got a tensor (pass a Python number; "
                                  "tensors go to pointer parameters)")
    if isinstance(arg, np.generic):
        arg = arg.item()
    if not isinstance(arg, (bool, int, float)):
        raise KernelArgumentError(f"{where} needs a number, got {type(arg).__name__}")
    is_float = np.issubdtype(np_type, np.floating)
    if isinstance(arg, float) and not is_float:
        raise KernelArgumentError(f"{where} is an integer parameter, got the float {arg!r} "
                                  "(convert it with int() if truncation is meant)")
    if not is_float and np_type is not np.bool_:
        info = np.iinfo(np_type)
        if not info.min <= int(arg) <= info.max:
            raise KernelArgumentError(f"{where}: {arg} does not fit ({info.min}..{info.max})")
    return np_type(arg)


def pack_args(kernel: str, params: Sequence[Param], args: Sequence[Any], *,
              device: int | None = None) -> list[Any]:
    """A launch's arguments checked against the kernel's parameters and converted for
    ``cuda.core.launch``: tensors to data pointers (ints), numbers to NumPy scalars of the
    parameter's C type; NumPy scalars and ctypes objects for opaque (struct) parameters pass
    as given. ``device``: the CUDA device the launch runs on (tensors must be on it).

    Raises: KernelArgumentError naming the kernel, the argument (0-based) and what is wrong:
        the count, a non-CUDA or wrong-dtype tensor, a tensor for a scalar, a float for an
        integer, an integer out of range, or an opaque parameter given a plain value.
    """
    if len(args) != len(params):
        sig = ", ".join(p.ctype for p in params)
        raise KernelArgumentError(f"kernel {kernel} takes {len(params)} argument(s) ({sig}), "
                                  f"the launch passed {len(args)}")
    import numpy as np
    out = []
    for i, (p, arg) in enumerate(zip(params, args)):
        if p.kind == "pointer":
            out.append(_pointer(kernel, i, p, arg, device))
        elif p.kind == "scalar":
            out.append(_scalar(kernel, i, p, arg))
        elif isinstance(arg, (np.generic, ctypes._SimpleCData, ctypes.Structure)):
            out.append(arg)
        else:
            raise KernelArgumentError(f"kernel {kernel}: argument {i} is a {p.ctype} passed by "
                                      "value; pass a NumPy scalar or ctypes structure of that "
                                      f"layout, or its fields as scalars (got "
                                      f"{type(arg).__name__})")
    return out
