"""evokernel.gate.sanitize: compute-sanitizer's command lines, its output parsed (from the
hand-written samples in tests/fixtures/sanitizer/, in the documented format; see the README
there), and the determinism comparison. No GPU and no compute-sanitizer are needed."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from evokernel.gate.sanitize import (SanitizeResult, SanitizerReport, compare_runs,
                                     format_sanitize, parse_sanitizer, sanitizer_command)

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"
KERNEL = "add_oob_kernel(const float *, const float *, float *, int)"


def sample(name: str, which: str) -> SanitizerReport:
    return parse_sanitizer((SAMPLES / f"{name}.txt").read_text(), which, status=0)


def test_memcheck_out_of_bounds():
    r = sample("memcheck_oob", "memcheck")
    assert r.errors == 3 and not r.clean
    assert [f.message for f in r.findings] == [
        "Invalid __global__ write of size 4 bytes", "Invalid __global__ write of size 4 bytes",
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" '
        "on CUDA API call to cudaDeviceSynchronize."]
    assert [f.kernel for f in r.findings] == [KERNEL, KERNEL, None]     # both name forms
    assert r.findings[0].details == (
        f"at {KERNEL}+0x1b0", "by thread (0,0,0) in block (4,0,0)",
        "Address 0x7f3a2c000400 is out of bounds",
        "and is 1 bytes after the nearest allocation at 0x7f3a2c000000 of size 1023 bytes")
    assert r.findings[2].details == ()                 # its backtrace is left out


def test_memcheck_clean_and_killed():
    clean = sample("memcheck_clean", "memcheck")
    assert clean.errors == 0 and clean.findings == () and clean.clean
    killed = sample("memcheck_killed", "memcheck")
    assert killed.errors is None and not killed.clean
    assert killed.findings[0].kernel == KERNEL


def test_racecheck_error_and_warning():
    r = sample("racecheck_race", "racecheck")
    assert (r.errors, r.warnings) == (1, 1) and not r.clean
    assert [f.is_warning for f in r.findings] == [False, True]
    assert r.findings[0].message.startswith("Error: Race reported between Write access at "
                                            "block_sum(const float *, float *, int)+0x2f0")
    assert {f.kernel for f in r.findings} == {"block_sum(const float *, float *, int)"}
    assert r.findings[0].details == ("and Read access at block_sum(const float *, float *, "
                                     "int)+0x350 in cuda.cu:24 [248 hazards]",)


def test_racecheck_warnings_alone_are_clean():
    text = ("========= COMPUTE-SANITIZER\n"
            "========= Warning: Race reported between Write access at k()+0x10 in a.cu:3\n"
            "=========     and Write access at k()+0x10 in a.cu:3 [2 hazards]\n"
            "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)\n")
    r = parse_sanitizer(text, "racecheck")
    assert r.clean and r.warnings == 1 and r.findings[0].kernel == "k()"


def test_application_lines_and_garbage_are_ignored():
    r = parse_sanitizer("hello\n=== not a report\n\n\x00binary", "memcheck")
    assert r.findings == () and r.errors is None


def test_commands():
    target = ["python", "-m", "evokernel.gate.target", "p.py", "k.py"]
    assert sanitizer_command("/cs", "memcheck", target) == [
        "/cs", "--tool", "memcheck", "--print-limit", "20", "--target-processes",
        "application-only", "--show-backtrace", "device", *target]
    race = sanitizer_command("/cs", "racecheck", target, print_limit=5)
    assert race[:3] == ["/cs", "--tool", "racecheck"] and race[4] == "5"
    assert race[-len(target) - 2:-len(target)] == ["--racecheck-report", "hazard"]
    with pytest.raises(ValueError, match="one of memcheck, racecheck"):
        sanitizer_command("/cs", "leakcheck", target)


def test_determinism_identical_and_different():
    x = torch.arange(6.0)
    same = compare_runs([x, x.clone(), x.clone()])
    assert same == {"runs": 3, "identical": True, "differing_runs": 0,
                    "differing_elements": 0, "max_abs_diff": 0.0, "note": ""}
    y = x.clone()
    y[2] += 0.5
    z = x.clone()
    z[1], z[4] = float("nan"), x[4] + 2 ** -20
    got = compare_runs([x, x.clone(), y, z])
    assert not got["identical"] and got["differing_runs"] == 2
    assert got["differing_elements"] == 2 and math.isinf(got["max_abs_diff"])  # NaN vs number
    nans = torch.tensor([float("nan"), 1.0])
    assert compare_runs([nans, nans.clone()])["identical"]
    shape = compare_runs([x, x[:3]])
    assert not shape["identical"] and "shape" in shape["note"]
    with pytest.raises(ValueError, match="no outputs"):
        compare_runs([])


def test_format_and_failure():
    result = SanitizeResult([sample("memcheck_oob", "memcheck"),
                             sample("racecheck_race", "racecheck")],
                            compare_runs([torch.ones(3), torch.ones(3)]))
    text = "\n".join(format_sanitize(result))
    assert result.failed
    assert "memcheck:       3 error(s)" in text
    assert f"  Invalid __global__ write of size 4 bytes in {KERNEL}" in text
    assert "racecheck:      1 error(s), 1 warning(s)" in text
    assert "determinism:    2 runs on the same inputs, bit-identical" in text
    clean = SanitizeResult([sample("memcheck_clean", "memcheck"),
                            SanitizerReport("racecheck", None, note="no compute-sanitizer")],
                           None, "no GPU")
    assert not clean.failed
    lines = format_sanitize(clean)
    assert lines == ["memcheck:       0 error(s)", "racecheck:      not run: no compute-sanitizer",
                     "determinism:    not run: no GPU"]
