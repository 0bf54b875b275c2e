"""evokernel.build.ptxas: the ptxas -v report parsed from build output. The samples are real
output of nvcc 13.0 (-gencode=arch=compute_90,code=sm_90 -Xptxas -v, kernels written for the
test, one forced to spill with -maxrregcount=32) and the CUDA 12 form of the "Used" line."""
from __future__ import annotations

from evokernel.build.demangle import demangle
from evokernel.build.ptxas import parse_ptxas, resources_from_json, resources_to_json
from evokernel.records import KernelResources

NVCC13 = """\
[2/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c cuda.cu -Xptxas -v
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z14softmax_kernelILi256EEvPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z14softmax_kernelILi256EEvPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 29 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 34.240 ms
ptxas info    : Compiling entry function '_Z5heavyPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z5heavyPKfPfi
    9888 bytes stack frame, 10428 bytes spill stores, 21380 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 9888 bytes cumulative stack size
ptxas info    : Compile time = 145.091 ms
ptxas info    : Function properties for _Z6helperfPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
[3/3] c++ main.o cuda.cuda.o -shared -o ext.so
"""
CUDA12_USED = """\
ptxas info    : Compiling entry function '_Z3addPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z3addPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 4096 bytes smem, 368 bytes cmem[0]
"""


def test_parses_each_kernel_and_skips_device_functions():
    got = parse_ptxas(NVCC13, demangle_names=False)
    assert got == (
        KernelResources("_Z14softmax_kernelILi256EEvPKfPfi", registers=29, shared_bytes=1024),
        KernelResources("_Z5heavyPKfPfi", registers=32, spill_store_bytes=10428,
                        spill_load_bytes=21380, stack_bytes=9888))


def test_cuda12_used_line_and_demangled_names():
    (k,) = parse_ptxas(CUDA12_USED)
    assert (k.registers, k.shared_bytes) == (10, 4096)
    assert k.name in ("add(float const*, float*, int)", "_Z3addPKfPfi")   # c++filt or not
    names = [r.name for r in parse_ptxas(NVCC13)]
    assert names[0] in ("void softmax_kernel<256>(float const*, float*, int)",
                        "_Z14softmax_kernelILi256EEvPKfPfi")


def test_no_report_and_garbage_give_nothing():
    assert parse_ptxas("") == ()
    assert parse_ptxas("nvcc fatal: no input\nptxas info    : 0 bytes gmem\n") == ()
    assert parse_ptxas("ptxas info    : Used 12 registers\n") == ()       # no entry named


def test_a_kernel_compiled_twice_is_reported_once_with_its_last_numbers():
    twice = CUDA12_USED + CUDA12_USED.replace("Used 10", "Used 12")
    (k,) = parse_ptxas(twice, demangle_names=False)
    assert k.registers == 12


def test_json_round_trip_and_damaged_entries():
    got = parse_ptxas(NVCC13, demangle_names=False)
    assert resources_from_json(resources_to_json(got)) == got
    assert resources_from_json(None) == () and resources_from_json("x") == ()
    assert resources_from_json([{"name": "k", "bogus": 1}]) == ()


def test_demangle_keeps_names_it_cannot_read():
    assert demangle([]) == []
    out = demangle(["_Z5heavyPKfPfi", "not_mangled"])
    assert out[1] == "not_mangled" and len(out) == 2
