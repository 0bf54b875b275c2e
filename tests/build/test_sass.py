"""evokernel.build.sass: the precision audit's parser on committed SASS (tests/fixtures/sass/,
real cuobjdump output of nvcc 13.1 for sm_90), its instruction rules, and the live path (nvcc
and cuobjdump on a kernel compiled here, skipped where either is missing)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from evokernel.build.sass import (SassUnavailable, audit_build_dirs, audit_sass, classify,
                                  disassemble, find_cuobjdump, summarize)

SASS = Path(__file__).resolve().parent.parent / "fixtures" / "sass"


def audit(name: str):
    return audit_sass((SASS / f"{name}.sass").read_text(), demangle_names=False)


def opcodes(a) -> dict[str, tuple[str, str, int]]:
    return {f.opcode: (f.kind, f.precision, f.count) for f in a.findings}


def test_pure_fp32_lists_nothing_though_it_holds_hfma2_constant_moves():
    a = audit("fp32_only")
    assert a.kernels == ("fp32_poly", "fp32_consts", "fp32_axpy", "fp32_rowsoftmax")
    assert a.instructions > 400
    assert "HFMA2.MMA" in (SASS / "fp32_only.sass").read_text()    # the trap is present
    assert a.findings == () and a.precisions == () and a.has_sass


def test_half_arithmetic():
    a = audit("half_arith")
    assert opcodes(a) == {"F2FP.F16.F32.PACK_AB": ("conversion", "fp16", 2),
                          "HFMA2": ("half_arith", "fp16", 1),
                          "HADD2": ("half_arith", "fp16", 1),
                          "HADD2.F32": ("widen", "fp16", 1)}
    assert {f.kernel for f in a.findings} == {"half_axpy"}
    assert a.precisions == ("fp16",)


def test_wmma_fp16_tensor_cores():
    got = opcodes(audit("wmma_fp16"))
    assert got["HMMA.16816.F32"] == ("tensor_core", "fp16", 2)
    assert got["F2FP.F16.F32.PACK_AB"] == ("conversion", "fp16", 2)


def test_hopper_wgmma():
    assert opcodes(audit("wgmma_fp16")) == {"HGMMA.64x8x16.F32": ("tensor_core", "fp16", 1)}


def test_tf32_and_bf16_named_per_kernel():
    a = audit("tf32_bf16")
    by_kernel = {(f.kernel, f.opcode): f.precision for f in a.findings}
    assert by_kernel == {("tf32_tile", "HMMA.1684.F32.TF32"): "tf32",
                         ("bf16_round", "F2FP.BF16.F32.PACK_AB"): "bf16",
                         ("bf16_round", "HMUL2.BF16_V2"): "bf16"}
    assert a.precisions == ("bf16", "tf32")


@pytest.mark.parametrize("opcode, operands, want", [
    ("HMMA.16816.F32.BF16", " R4, R8, R12, RZ ", ("tensor_core", "bf16")),
    ("HMMA.16816.F16", " R4, R8, R12, R4 ", ("tensor_core", "fp16")),
    ("HGMMA.64x128x16.F32.BF16", " R24, gdesc[UR4], RZ ", ("tensor_core", "bf16")),
    ("HGMMA.64x64x8.F32.TF32", " R24, gdesc[UR4], RZ ", ("tensor_core", "tf32")),
    ("QGMMA.64x64x32.F32.E4M3.E4M3", " R24, gdesc[UR4], RZ ", ("tensor_core", "fp8")),
    ("IMMA.16832.S8.S8", " R4, R8, R12, RZ ", ("tensor_core", "int8")),
    ("F2F.F16.F32", " R0, R1 ", ("conversion", "fp16")),
    ("F2F.BF16.F32", " R0, R1 ", ("conversion", "bf16")),
    ("F2F.F32.F16", " R0, R1 ", ("widen", "fp16")),
    ("F2FP.PACK_AB", " R0, R1, R2 ", ("conversion", "fp16")),
    ("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", " R0, R1, R2, RZ ", ("conversion", "fp8")),
    ("I2F.F16", " R0, R1 ", ("conversion", "fp16")),
    ("HFMA2.MMA", " R3, R4, R5, -RZ ", ("half_arith", "fp16")),
    ("HFMA2.MMA", " R9, -RZ, RZ, 1.75, 0 ", None),         # a constant move
    ("DMMA.884", " R4, R8, R12, R4 ", None),                # FP64 tensor cores
    ("F2F.F32.F64", " R0, R2 ", None),
    ("F2F.F64.F32", " R0, R2 ", None),
    ("FFMA", " R0, R1, R2, R3 ", None),
    ("I2F.U32", " R0, R1 ", None),
])
def test_classify(opcode, operands, want):
    assert classify(opcode, operands) == want


def test_malformed_text_and_predicated_lines():
    assert audit_sass("garbage\n\n;;; /* */").findings == ()
    assert not audit_sass("no sass here").has_sass
    text = ("\t\tFunction : k\n"
            "        /*0070*/               @!P0 HFMA2 R3, R3.H0_H0, R0.H0_H0, R0.H1_H1 ;"
            "  /* 0x2000000003037231 */\n")
    a = audit_sass(text, demangle_names=False)
    assert [(f.kernel, f.opcode, f.count) for f in a.findings] == [("k", "HFMA2", 1)]


def test_summarize():
    a = audit("wmma_fp16")
    line = summarize(a.findings)
    assert "wmma_tile: HMMA.16816.F32 x2 (tensor core, fp16)" in line
    assert summarize(()) == ""
    many = a.findings * 5
    assert summarize(many, limit=2).endswith("and 8 more")


def test_disassemble_without_a_tool_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKERNEL_CUOBJDUMP", str(tmp_path / "no-such-cuobjdump"))
    with pytest.raises(SassUnavailable, match="cannot run"):
        disassemble(tmp_path / "x.so")


def test_build_folder_without_an_extension_is_named(tmp_path):
    with pytest.raises(SassUnavailable, match=f"{tmp_path}: no built extension"):
        audit_build_dirs([tmp_path], tool="/bin/true")


NVCC = Path("/usr/local/cuda/bin/nvcc")


@pytest.mark.skipif(not NVCC.is_file() or find_cuobjdump() is None,
                    reason="needs nvcc and a cuobjdump")
def test_live_extension_is_audited(tmp_path):
    """A host library with embedded device code, as load_inline builds, compiled here."""
    src = tmp_path / "ext.cu"
    src.write_text("#include <cuda_fp16.h>\n"
                   "__global__ void twice(const float* x, float* y) {\n"
                   "  y[threadIdx.x] = __half2float(__float2half(x[threadIdx.x]) * "
                   "__float2half(2.f)); }\n"
                   "extern \"C\" void launch(const float* x, float* y) { twice<<<1, 32>>>(x, y); }\n")
    subprocess.run([str(NVCC), "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-o",
                    str(tmp_path / "ext.so"), str(src)], check=True, capture_output=True)
    a = audit_build_dirs([tmp_path])
    assert a.has_sass
    names = {f.kernel for f in a.findings}
    assert names == ({"twice(float const*, float*)"} if shutil.which("c++filt")
                     else {"_Z5twicePKfPf"})
    assert {f.opcode for f in a.findings} >= {"F2FP.F16.F32.PACK_AB", "HMUL2"}


def fake_cuobjdump(tmp_path: Path, fixture: str) -> str:
    """A stand-in cuobjdump that prints a committed fixture's SASS, whatever file it is given."""
    tool = tmp_path / "cuobjdump"
    tool.write_text(f"#!/bin/sh\ncat {SASS / (fixture + '.sass')}\n")
    tool.chmod(0o755)
    return str(tool)


@pytest.mark.parametrize("fixture, findings, flag", [
    ("wmma_fp16", 2, "sass_below_fp32:fp16"),
    ("tf32_bf16", 3, "sass_below_fp32:bf16,tf32"),
    ("fp32_only", 0, "sass_audit: no instruction below FP32 in 4 kernel(s)"),
])
def test_builder_audit_of_build_folders(tmp_path, monkeypatch, fixture, findings, flag):
    from evokernel.build.builder import sass_audit
    monkeypatch.setenv("EVOKERNEL_CUOBJDUMP", fake_cuobjdump(tmp_path, fixture))
    ext = tmp_path / "builds" / "k"
    ext.mkdir(parents=True)
    (ext / "ext_abc.so").write_bytes(b"\x7fELF")
    got, flags = sass_audit([str(ext)])
    assert len(got) == findings and flags == (flag,)
    assert sass_audit([]) == ((), ())


def test_builder_audit_unavailable_is_a_flag_not_an_error(tmp_path, monkeypatch):
    from evokernel.build.builder import sass_audit
    monkeypatch.setenv("EVOKERNEL_CUOBJDUMP", "/bin/false")
    (tmp_path / "e.so").write_bytes(b"")
    got, flags = sass_audit([str(tmp_path)])
    assert got == () and len(flags) == 1
    assert flags[0].startswith(f"sass_audit_unavailable: {tmp_path / 'e.so'}: cuobjdump exited")


def test_with_audit_appends_evidence_to_the_detail():
    from evokernel.build.sass import with_audit
    f = audit("wmma_fp16").findings
    assert with_audit("accepted: norm ratio 1.2", ()) == "accepted: norm ratio 1.2"
    got = with_audit("accepted: norm ratio 1.2", f)
    assert got.startswith("accepted: norm ratio 1.2; SASS audit (evidence; the gate's numbers "
                          "decide): below FP32: wmma_tile: ")
    assert with_audit("", f).startswith("SASS audit")


def test_audit_is_kept_in_the_result_record_and_printed():
    """The findings survive the run store's JSON and show in check's, show's and report's text."""
    from evokernel.cli.check import audit_lines, format_result
    from evokernel.records import EvalResult, Reason, Verdict
    from evokernel.build.sass import audit_text
    f = audit("wmma_fp16").findings
    r = EvalResult("c1", Verdict.REJECT, Reason.LOWER_PRECISION, "matches fp16",
                   precision_audit=f, flags=("sass_below_fp32:fp16",))
    back = EvalResult.from_dict(r.to_dict())
    assert back.precision_audit == f
    text = format_result(back)
    assert "SASS audit:" in text and "wmma_tile: HMMA.16816.F32 x2 (tensor core, fp16)" in text
    clean = EvalResult("c2", Verdict.ACCEPT, Reason.OK,
                       flags=("sass_audit: no instruction below FP32 in 1 kernel(s)",))
    assert audit_lines((), clean.flags) == ["SASS audit:     no instruction below FP32 in 1 "
                                            "kernel(s)"]
    assert audit_lines((), ()) == []
    assert audit_text(back.precision_audit, back.flags).startswith(
        "below FP32 (evidence; the gate's numbers decide): wmma_tile")
    assert audit_text((), clean.flags) == "no instruction below FP32 in 1 kernel(s)"
    assert audit_text((), ("sass_audit_unavailable: x.so: no cuobjdump",)) == \
        "not available: x.so: no cuobjdump"
    assert audit_text((), ("arch: sm_70 -> sm_90",)) is None


def test_show_and_report_print_the_best_kernels_audit(tmp_path, capsys):
    import dataclasses

    from evokernel.cli.main import main
    from evokernel.config import RunConfig
    from evokernel.problem import Problem
    from evokernel.report.write import write_report
    from evokernel.runs.store import RunStore
    from tests.support.runstores import accepted, kernel
    run = tmp_path / "run"
    store = RunStore.create(run, RunConfig(run_dir=str(run)),
                            Problem(name="toy", path=tmp_path / "t.py", source="#\n"))
    c = kernel("k", "wmma tiles")
    store.add_candidate(c)
    store.add_result(dataclasses.replace(accepted(c, 1.0),
                                         precision_audit=audit("wmma_fp16").findings,
                                         flags=("sass_below_fp32:fp16",)))
    store.close()
    assert main(["show", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())   # rich wraps lines
    assert "SASS audit below FP32 (evidence; the gate's numbers decide): wmma_tile: " \
           "F2FP.F16.F32.PACK_AB x2 (conversion, fp16); wmma_tile: HMMA.16816.F32 x2 " \
           "(tensor core, fp16)" in out
    md = write_report(run, tmp_path / "rep").read_text()
    assert "best kernel: SASS audit" in md and "HMMA.16816.F32 x2" in md


def test_the_builder_keeps_an_audit_for_the_next_cache_hit(tmp_path, monkeypatch):
    from evokernel.build.builder import Builder
    monkeypatch.setenv("EVOKERNEL_CUOBJDUMP", fake_cuobjdump(tmp_path, "half_arith"))
    ext, work = tmp_path / "builds" / "k", tmp_path / "candidates" / "c"
    ext.mkdir(parents=True)
    work.mkdir(parents=True)
    (ext / "ext.so").write_bytes(b"")
    with Builder(tmp_path, arch="9.0", timeout_s=10, workers=1) as b:
        first = b.audit_build(work, [str(ext)])
        assert [f.opcode for f in first[0]][:2] == ["F2FP.F16.F32.PACK_AB", "HFMA2"]
        assert (work / "sass_audit.json").is_file()
        monkeypatch.setenv("EVOKERNEL_CUOBJDUMP", "/bin/false")        # not run again
        assert b.audit_build(work, [str(ext)]) == first
    with Builder(tmp_path, arch="9.0", timeout_s=10, workers=1, audit=False) as b:
        assert b.audit_build(tmp_path / "elsewhere", [str(ext)]) == ((), ())
