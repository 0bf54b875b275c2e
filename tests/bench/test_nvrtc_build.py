"""evokernel.bench.nvrtc_build on the CPU: one real cold build of an NVRTC seed is a cold,
successful build whose NVRTC time the worker printed, and the report says the target's verdict.
No timing is asserted (the < 1 s target is a benchmark, results/cpu-2026-12-01-nvrtc-build)."""
from __future__ import annotations

import json

from evokernel.bench import nvrtc_build
from evokernel.bench.plan import seed_source


def test_one_cold_build_is_successful_and_reports_its_nvrtc_time(tmp_path):
    one = nvrtc_build.build_once(seed_source("softmax", "nvrtc"), "9.0", None, tmp_path)
    assert one["ok"] and not one["cache_hit"], one["error"]
    assert 0 < one["nvrtc_s"] < one["build_s"] and 0 < one["cpu_s"]
    assert nvrtc_build.startup_once(tmp_path) > 0


def test_the_command_writes_both_files_and_its_exit_status_is_the_verdict(tmp_path,
                                                                          monkeypatch):
    def fake_run(problems, samples, arch, sandbox_mode):
        return {"when_utc": "2026-12-01 00:00:00", "arch": arch, "sandbox": sandbox_mode,
                "problems": {p: {"build_s": [0.5, 1.5], "cpu_s": [0.4, 0.6],
                                 "nvrtc_s": [0.2, None],
                                 "startup_s": [0.3, 0.4], "median_build_s": 1.0}
                             for p in problems},
                "median_build_s": 1.2, "max_build_s": 1.5, "median_cpu_s": 0.5,
                "median_nvrtc_s": 0.2,
                "median_startup_s": 0.35, "target_s": 1.0, "passed": False}
    monkeypatch.setattr(nvrtc_build, "run", fake_run)
    rc = nvrtc_build.main(["--problems", "softmax,matmul", "--sandbox", "none",
                           "--results-dir", str(tmp_path)])
    assert rc == 1
    md = (tmp_path / "bench_nvrtc_build.md").read_text()
    assert "| matmul | 1.000 | 0.500, 1.500 | 0.400, 0.600 | 0.200, - | 0.300, 0.400 |" in md
    assert "Median CPU time of a build's processes 0.500 s" in md
    assert "Median of all 4 builds: 1.200 s" in md and "NOT under the 1 s target" in md
    assert json.loads((tmp_path / "bench_nvrtc_build.json").read_text())["sandbox"] == "none"
