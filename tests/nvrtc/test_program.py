"""evokernel.nvrtc.program against cuda.core.Program, which it replaces in the build worker: the
same NVRTC command line for every allowed option, and the same cubin and lowered names for the
seed kernels; its failures carry NVRTC's log. CPU only (NVRTC needs no GPU)."""
from __future__ import annotations

import pytest

from evokernel.bench.plan import HEADLINE, seed_source
from evokernel.build.forms import nvrtc_calls
from evokernel.nvrtc import compiler, program

FULL = {"use_fast_math": True, "ftz": False, "prec_div": True, "prec_sqrt": False, "fma": True,
        "max_register_count": 64, "define_macro": ["A", ("B", "2")], "std": "c++17",
        "lineinfo": True, "restrict": True, "extra_device_vectorization": True,
        "ptxas_options": ["-v", "-O3"]}


@pytest.mark.parametrize("kw", [{}, FULL, {"ftz": True, "prec_div": False},
                                {"ptxas_options": ["-v"]}])
def test_the_command_line_is_cuda_cores_for_every_allowed_option(kw):
    from cuda.core import ProgramOptions
    include = ["/a", "/b"]
    theirs = ProgramOptions(name="k.cu", arch="sm_90", include_path=include or None,
                            **kw).as_bytes("nvrtc")
    assert program.option_bytes(kw, "sm_90", include) == theirs


def test_every_allowed_option_field_has_a_spelling():
    assert set(compiler.ALLOWED_OPTIONS) == set(FULL) | {"define_macro"}
    with pytest.raises(ValueError, match="unknown option field"):
        program.option_bytes({"debug": True}, "sm_90", [])


@pytest.mark.parametrize("problem", HEADLINE)
def test_the_seed_kernels_compile_to_the_cubin_cuda_core_makes(problem):
    """Byte for byte, with the probes and ptxas -v as compile_spec compiles them."""
    from cuda.core import Program, ProgramOptions
    call = nvrtc_calls(seed_source(problem, "nvrtc"))[0][0]
    kw, _ = compiler.parse_options(call.options)
    kw["ptxas_options"] = list(kw.get("ptxas_options", [])) + ["-v"]
    source = call.source + compiler.PROBE_DECL
    names = [e for n in call.names for e in (n, f"&{compiler.PROBE}<decltype({n})>")]
    include = list(compiler.include_dirs())
    ours = program.compile_program(source, "kernel.cu",
                                   program.option_bytes(kw, "sm_90", include), names)
    opts = ProgramOptions(name="kernel.cu", arch="sm_90", include_path=include or None, **kw)
    theirs = Program(source, "c++", opts).compile("cubin", name_expressions=names)
    assert ours.cubin == bytes(theirs.code) and ours.cubin[:4] == b"\x7fELF"
    assert dict(ours.lowered) == {k: v.decode() if isinstance(v, bytes) else v
                                  for k, v in theirs.symbol_mapping.items()}
    assert "Used" in ours.log and "registers" in ours.log            # the ptxas -v report


def test_a_failed_compile_carries_nvrtcs_log_with_the_line():
    src = "__global__ void k(float* y) {\n  y[0] = undefined_name;\n}\n"
    with pytest.raises(program.NvrtcFailed) as e:
        program.compile_program(src, "bad.cu", program.option_bytes({}, "sm_90", []), ["k"])
    assert "bad.cu(2): error" in e.value.log and "undefined_name" in e.value.log
    with pytest.raises(program.NvrtcFailed, match="unrecognized option --no-such-option"):
        program.compile_program("__global__ void k() {}", "k.cu", [b"--no-such-option"], ["k"])
