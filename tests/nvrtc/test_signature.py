"""Kernel parameter types from the demangled signature probe, and the checks of a launch's
arguments against them (evokernel.nvrtc.signature): pure Python, no GPU."""
import ctypes

import numpy as np
import pytest
import torch

from evokernel.nvrtc.errors import KernelArgumentError
from evokernel.build.demangle import demangle
from evokernel.nvrtc.signature import PROBE, classify, pack_args, parse_signature


class CudaTensor:
    """A stand-in for a CUDA tensor (this machine has no GPU): what pack_args reads of one."""

    def __init__(self, dtype=torch.float32, ptr=0x7F0000001000, index=0):
        self.dtype, self._ptr, self.is_cuda = dtype, ptr, True
        self.device = torch.device("cuda", index)

    def data_ptr(self):
        return self._ptr


def test_the_probe_symbol_demangles_to_the_parameter_types():
    # NVRTC's lowered name of &evokernel_signature_probe<decltype(k)> for
    # k(const float*, float*, long long, float), as compiled on this machine.
    [text] = demangle([f"_Z{len(PROBE)}{PROBE}IFvPKfPfxfEE"])
    assert text == f"{PROBE}<void (float const*, float*, long long, float)>"
    params = parse_signature(text)
    assert [(p.ctype, p.kind, p.pointee) for p in params] == [
        ("float const*", "pointer", "float"), ("float*", "pointer", "float"),
        ("long long", "scalar", ""), ("float", "scalar", "")]
    assert parse_signature(f"{PROBE}<void ()>") == ()
    assert demangle(["not_mangled"]) == ["not_mangled"]


def test_types_are_classified_with_commas_inside_templates_kept():
    params = parse_signature(f"{PROBE}<void (float4 const*, cuda::std::pair<int, int>, "
                             "unsigned int, __half*)>")
    assert [p.kind for p in params] == ["pointer", "opaque", "scalar", "pointer"]
    assert params[0].dtypes == ("float32",) and params[3].dtypes == ("float16",)
    assert classify("void*").dtypes == () and classify("unsigned char*").dtypes == ()
    with pytest.raises(ValueError, match="not a demangled signature probe"):
        parse_signature("void k(float*)")


PARAMS = parse_signature(f"{PROBE}<void (float const*, float*, long long, float, int)>")


def test_arguments_are_converted_to_the_parameters_c_types():
    x, y = CudaTensor(), CudaTensor(ptr=0x7F0000002000)
    packed = pack_args("k", PARAMS, [x, y, 5, 1, np.int64(3)], device=0)
    assert packed[:2] == [x.data_ptr(), y.data_ptr()]
    assert type(packed[2]) is np.int64 and type(packed[3]) is np.float32 and packed[3] == 1.0
    assert type(packed[4]) is np.int32 and packed[4] == 3
    assert pack_args("k", PARAMS, [None, 0x7F00, 1, 2.5, 0])[:2] == [0, 0x7F00]


@pytest.mark.parametrize("args, message", [
    ((CudaTensor(), CudaTensor(), 5), "takes 5 argument(s) (float const*, float*, long long, "
                                      "float, int), the launch passed 3"),
    ((torch.zeros(4), CudaTensor(), 5, 1.0, 2), "argument 0 (float const*) needs a CUDA "
                                                "tensor, got a tensor on cpu"),
    ((CudaTensor(torch.float64), CudaTensor(), 5, 1.0, 2), "points to float, got a "
                                                           "torch.float64 tensor"),
    ((CudaTensor(), CudaTensor(index=1), 5, 1.0, 2), "the tensor is on cuda:1, the launch on "
                                                     "cuda:0"),
    ((CudaTensor(), CudaTensor(), CudaTensor(), 1.0, 2), "argument 2 (long long) is a scalar, "
                                                          "got a tensor"),
    ((CudaTensor(), CudaTensor(), 5.5, 1.0, 2), "is an integer parameter, got the float 5.5"),
    ((CudaTensor(), CudaTensor(), 5, 1.0, 1 << 40), "does not fit"),
    ((CudaTensor(), CudaTensor(), 5, "1.0", 2), "needs a number, got str"),
    ((CudaTensor(), [1, 2], 5, 1.0, 2), "argument 1 (float*) needs a CUDA tensor"),
])
def test_bad_launch_arguments_are_rejected_by_name_before_the_driver(args, message):
    with pytest.raises(KernelArgumentError) as e:
        pack_args("softmax_row", PARAMS, args, device=0)
    assert message in str(e.value) and str(e.value).startswith("kernel softmax_row")
    assert isinstance(e.value, TypeError)


def test_a_struct_by_value_takes_only_a_value_of_its_layout():
    params = parse_signature(f"{PROBE}<void (float4)>")
    with pytest.raises(KernelArgumentError, match="float4 passed by value"):
        pack_args("k", params, [1.0])

    class Float4(ctypes.Structure):
        _fields_ = [(c, ctypes.c_float) for c in "xyzw"]
    v = Float4(1, 2, 3, 4)
    assert pack_args("k", params, [v]) == [v]
