"""`evokernel check --sanitize` and `--robustness` without a GPU: the clear no-GPU message, the
flags refused with --build-only, the target's command line, and the plumbing that runs
compute-sanitizer and reads its output (a stand-in compute-sanitizer that prints a
hand-written sample, tests/fixtures/sanitizer/). What the tools find on real kernels needs the
H200."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from evokernel.cli.extra_checks import (require_gpu_for, robustness, sanitize_kernel,
                                        target_command)
from evokernel.cli.main import main
from evokernel.errors import NoGPUError
from evokernel.gate.sanitize import format_sanitize

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "kernels" / "faults" / "problem_add.py"
KERNEL = ROOT / "tests" / "kernels" / "faults" / "add_ok.py"
SAMPLES = ROOT / "tests" / "fixtures" / "sanitizer"


def test_no_gpu_message_names_the_flags():
    with pytest.raises(NoGPUError) as e:
        require_gpu_for(["--sanitize", "--robustness"], gpu_visible=False)
    msg = str(e.value)
    assert msg.startswith("evokernel check --sanitize --robustness: runs the kernel on a CUDA "
                          "GPU")
    assert "PyTorch sees no GPU on this machine" in msg and "--build-only" in msg
    require_gpu_for(["--sanitize"], gpu_visible=True)        # no error
    require_gpu_for([], gpu_visible=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less host")
def test_check_sanitize_without_a_gpu(capsys):
    assert main(["check", str(PROBLEM), str(KERNEL), "--sanitize"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evokernel check --sanitize: runs the kernel on a CUDA GPU")


def test_flags_refused_with_build_only(capsys):
    assert main(["check", str(PROBLEM), str(KERNEL), "--build-only", "--robustness"]) == 2
    assert "--robustness runs the kernel on a GPU, which --build-only does not use" in \
        capsys.readouterr().err


def test_target_command(tmp_path):
    cmd = target_command(PROBLEM, KERNEL, "repeat", tmp_path / "o.json", tmp_path / "cache",
                         "9.0", repeat=7, tolerance=16.0, seed=3)
    assert cmd == [sys.executable, "-m", "evokernel.gate.target", str(PROBLEM), str(KERNEL),
                   "--mode", "repeat", "--json", str(tmp_path / "o.json"), "--cache",
                   str(tmp_path / "cache"), "--arch", "9.0", "--repeat", "7", "--tolerance",
                   "16", "--seed", "3"]


def stand_in(tmp_path: Path) -> str:
    """A compute-sanitizer that prints the sample for the tool it is asked for, records its
    arguments and environment, and does not run the target."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\n"
                    f"echo \"$@\" >> {tmp_path}/args\n"
                    f"echo \"$PYTORCH_NO_CUDA_MEMORY_CACHING\" >> {tmp_path}/env\n"
                    f"if [ \"$2\" = racecheck ]; then cat {SAMPLES}/racecheck_race.txt; "
                    f"else cat {SAMPLES}/memcheck_oob.txt; fi\n")
    tool.chmod(0o755)
    return str(tool)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the repeat run would use the GPU")
def test_sanitize_plumbing(tmp_path):
    result = sanitize_kernel(PROBLEM, KERNEL, tmp_path / "cache", "9.0",
                             tool=stand_in(tmp_path), timeout_s=120)
    assert [r.tool for r in result.reports] == ["memcheck", "racecheck"]
    assert result.reports[0].errors == 3 and result.reports[1].errors == 1
    assert result.failed
    args = (tmp_path / "args").read_text().splitlines()
    assert args[0].startswith("--tool memcheck --print-limit 20 ")
    assert f"-m evokernel.gate.target {PROBLEM} {KERNEL} --mode once" in args[0]
    assert args[1].startswith("--tool racecheck ")
    assert (tmp_path / "env").read_text().split() == ["1", "1"]   # no caching allocator
    assert result.determinism is None                 # no GPU here: the repeat run fails
    assert result.determinism_note


def test_sanitize_without_compute_sanitizer(tmp_path, monkeypatch):
    monkeypatch.setattr("evokernel.cli.extra_checks.find_sanitizer", lambda: None)
    monkeypatch.setattr("evokernel.cli.extra_checks._run",
                        lambda cmd, out, timeout_s, env=None: (0, "", {
                            "ok": True, "determinism": {"runs": 5, "identical": True}}))
    result = sanitize_kernel(PROBLEM, KERNEL, tmp_path, "9.0")
    assert [r.note for r in result.reports] == ["no compute-sanitizer found (set "
                                                "EVOKERNEL_COMPUTE_SANITIZER or CUDA_HOME)"] * 2
    assert not result.failed and result.determinism["identical"]


def test_robustness_reads_the_targets_rows(tmp_path, monkeypatch):
    row = {"variant": "odd leading size", "shapes": "[5, 6]", "mark": "pass",
           "norm_ratio": 1.0, "max_ratio": 2.0, "detail": "n = 5 (was 8); ..."}
    monkeypatch.setattr("evokernel.cli.extra_checks._run",
                        lambda cmd, out, timeout_s, env=None: (0, "", {"ok": True,
                                                                        "rows": [row]}))
    rows = robustness(PROBLEM, KERNEL, tmp_path, "9.0", tolerance=16.0)
    assert [r.mark for r in rows] == ["pass"] and rows[0].shapes == "[5, 6]"
    monkeypatch.setattr("evokernel.cli.extra_checks._run",
                        lambda cmd, out, timeout_s, env=None: (1, "boom", None))
    assert robustness(PROBLEM, KERNEL, tmp_path, "9.0", tolerance=16.0) == \
        "the robustness run ended with status 1 and no result: boom"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a GPU-less host")
def test_export_checks_without_a_gpu_write_nothing(tmp_path, capsys):
    from tests.support.runstores import RECORDED
    out = tmp_path / "op"
    assert main(["export", str(RECORDED), "--op", "softmax", "-o", str(out), "--sanitize"]) == 2
    assert capsys.readouterr().err.startswith("evokernel export --op --sanitize: runs the "
                                              "kernel on a CUDA GPU")
    assert not out.exists()
    assert main(["export", str(RECORDED), "-o", str(tmp_path / "k.py"), "--robustness"]) == 2
    assert "--sanitize and --robustness go with --op" in capsys.readouterr().err


def test_check_prints_and_records_the_reports(tmp_path, monkeypatch, capsys):
    """check's part after the gate, with the runs themselves stood in for."""
    import argparse
    import json

    from evokernel.cli import check
    from evokernel.config import EvalConfig
    from evokernel.gate.robust import RobustRow
    from evokernel.gate.sanitize import SanitizeResult, parse_sanitizer
    from evokernel.problem import load_problem
    race = parse_sanitizer((SAMPLES / "racecheck_race.txt").read_text(), "racecheck", 0)
    monkeypatch.setattr("evokernel.cli.extra_checks.sanitize_kernel",
                        lambda *a, **k: SanitizeResult([race], None, "no GPU"))
    monkeypatch.setattr("evokernel.cli.extra_checks.robustness", lambda *a, **k: [
        RobustRow("odd leading size", "[5]", "shape not supported", detail="raised ...")])
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    args = argparse.Namespace(sanitize=True, robustness=True)
    problem = load_problem(PROBLEM)
    failed, data = check.extra_reports(args, problem, KERNEL, EvalConfig())
    out = capsys.readouterr().out
    assert failed and "racecheck:      1 error(s), 1 warning(s)" in out
    assert "odd leading size  shape not supported  inputs [5]: raised ..." in out
    assert data["sanitize"]["failed"] and data["robustness"][0]["mark"] == "shape not supported"
    json.dumps(data)                                   # --json can hold it
    from evokernel.records import Candidate, EvalResult, Reason, Verdict
    r = EvalResult(Candidate(source="x").id, Verdict.ACCEPT, Reason.OK)
    path = tmp_path / "v.json"
    check._write_json(str(path), problem, {}, {KERNEL: "x"}, {KERNEL: []}, {KERNEL: r},
                      {KERNEL: data})
    entry = json.loads(path.read_text())["kernels"][0]
    assert entry["sanitize"]["reports"][0]["errors"] == 1
    assert entry["robustness"][0]["variant"] == "odd leading size"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the repeat run would use the GPU")
def test_a_sanitizer_run_cut_by_its_timeout_says_how_long_and_how_far(tmp_path):
    """A run that prints no summary before its timeout is reported as timed out, with its wall
    time and its last lines (the target's progress), not as a finished run."""
    tool = tmp_path / "compute-sanitizer"
    tool.write_text("#!/bin/sh\necho 'evokernel.gate.target: kernel loaded at 3.0 s' >&2\n"
                    "exec sleep 30\n")
    tool.chmod(0o755)
    result = sanitize_kernel(PROBLEM, KERNEL, tmp_path / "cache", "9.0", tool=str(tool),
                             timeout_s=1)
    for r in result.reports:
        assert r.errors is None and r.status is None and 1 <= r.seconds < 20
        assert "kernel loaded at 3.0 s" in r.tail and "timed out after 1 s" in r.tail
    assert not result.failed
    lines = format_sanitize(result)
    assert lines[0].startswith("memcheck:       did not finish (timed out in ")
    assert lines[1].startswith("  last lines: evokernel.gate.target: kernel loaded at 3.0 s")
