"""evokernel.engine.ncu: the ncu command, its CSV parsed, and every way a profile is unavailable.
The CSV is a hand-written sample of ncu's documented format, not a recording
(tests/fixtures/ncu/README.md); a fake ncu executable stands in for Nsight Compute on the CPU."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from evokernel.engine.ncu import (METRICS, ProfileUnavailable, ncu_command, parse_ncu_csv,
                                  profile_candidate)
from evokernel.records import EvalResult, KernelProfile, Reason, Verdict

SAMPLE = Path(__file__).parents[1] / "fixtures" / "ncu" / "softmax_sample.csv"
SOFTMAX = "void softmax_rows_kernel<256>(const float *, float *, int, int)"


def test_parse_merges_launches_weighted_by_duration():
    softmax, scale = parse_ncu_csv(SAMPLE.read_text())
    assert softmax.name == SOFTMAX and softmax.launches == 2
    assert softmax.duration_us == pytest.approx(412.384 + 187.616)       # "412,384" ns
    w0, w1 = 412.384 / 600.0, 187.616 / 600.0
    assert softmax.dram_throughput_pct == pytest.approx(81.37 * w0 + 79.63 * w1)
    assert softmax.achieved_occupancy_pct == pytest.approx(88.40 * w0 + 86.10 * w1)
    assert softmax.l2_hit_rate_pct == pytest.approx(12.05 * w0 + 14.95 * w1)
    assert scale == KernelProfile("scale_kernel(float *, float, int)", 1, 9.856, 44.20, 47.52,
                                  10.31, 50.00)


def test_parse_finds_columns_by_name_and_skips_noise():
    text = ('some program output\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"0","k","gpu__time_duration.sum","usecond","2.5"\n'
            '"0","k","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","n/a"\n'
            '"0","k","launch__grid_size","","132"\n"0","k"\n==PROF== done\n')
    (k,) = parse_ncu_csv(text)
    assert k.duration_us == 2.5 and k.sm_throughput_pct is None and k.dram_throughput_pct is None
    assert parse_ncu_csv("==PROF== No kernels were profiled.\n") == ()
    assert parse_ncu_csv('"ID","Kernel Name"\n"0","k"\n') == ()          # no metric columns


def test_command_keeps_clocks_and_profiles_only_the_marked_call(tmp_path):
    cmd = ncu_command("ncu", tmp_path / "r.csv", ["python", "-m", "x"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert "--csv" in cmd and cmd[cmd.index("--metrics") + 1].split(",") == list(METRICS)
    assert cmd[-3:] == ["python", "-m", "x"]


def fake_ncu(tmp_path: Path, mode: str) -> Path:
    """An executable that records its arguments and behaves like ncu in ``mode``."""
    script = tmp_path / "ncu"
    script.write_text(f"""#!{sys.executable}
import json, sys
args = sys.argv[1:]
open({str(tmp_path / "args.json")!r}, "w").write(json.dumps(args))
log = args[args.index("--log-file") + 1]
mode = {mode!r}
if mode == "ok":
    open(log, "w").write(open({str(SAMPLE)!r}).read())
elif mode == "perm":
    open(log, "w").write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to "
                         "access NVIDIA GPU Performance Counters on the target device 0.\\n")
    sys.exit(1)
elif mode == "none":
    open(log, "w").write("==PROF== Disconnected\\n==WARNING== No kernels were profiled.\\n")
elif mode == "hang":
    import time; print("==PROF== Connected to process 4242", flush=True); time.sleep(30)
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_profile_candidate_runs_ncu_on_the_target(tmp_path):
    got = profile_candidate("# problem\n", "# candidate\n", tmp_path / "work", tmp_path / "cache",
                            "9.0", ncu=str(fake_ncu(tmp_path, "ok")))
    assert [k.name for k in got] == [SOFTMAX, "scale_kernel(float *, float, int)"]
    args = json.loads((tmp_path / "args.json").read_text())
    target = args[args.index("--log-file") + 2:]
    assert target[1:] == ["-m", "evokernel.engine.ncu_target", str(tmp_path / "work"),
                          str(tmp_path / "cache"), "9.0"]
    assert (tmp_path / "work" / "candidate.py").read_text() == "# candidate\n"
    assert (tmp_path / "work" / "problem.py").read_text() == "# problem\n"


@pytest.mark.parametrize("mode, words", [
    ("perm", "performance counters (ERR_NVGPUCTRPERM)"),
    ("none", "0 profiled kernels"),
])
def test_unavailable_profiles_say_why(tmp_path, mode, words):
    with pytest.raises(ProfileUnavailable, match=words.replace("(", r"\(").replace(")", r"\)")):
        profile_candidate("", "", tmp_path / "w", tmp_path, "9.0",
                          ncu=str(fake_ncu(tmp_path, mode)))


def test_missing_ncu_and_timeout(tmp_path):
    with pytest.raises(ProfileUnavailable, match="ncu not found"):
        profile_candidate("", "", tmp_path / "w", tmp_path, "9.0", ncu=str(tmp_path / "nope"))
    with pytest.raises(ProfileUnavailable, match="did not finish in 1 s") as e:
        profile_candidate("", "", tmp_path / "w", tmp_path, "9.0", timeout_s=1,
                          ncu=str(fake_ncu(tmp_path, "hang")))
    assert "Connected to process 4242" in str(e.value)          # where it stopped, for a hang
    assert "Connected" in (tmp_path / "w" / "target_output.log").read_text()


def test_profile_round_trips_through_the_result_record():
    r = EvalResult(candidate_id="c", verdict=Verdict.ACCEPT, reason=Reason.OK,
                   profile=parse_ncu_csv(SAMPLE.read_text()))
    assert EvalResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


@pytest.mark.gpu
def test_real_ncu_on_the_h200(tmp_path):
    """On the H200: ncu profiles the softmax seed kernel. Its kernels' DRAM throughput must be
    a real percentage and its duration positive; the CSV it wrote replaces the sample."""
    from evokernel.build.builder import Builder, device_arch
    from evokernel.problem import load_problem
    from evokernel.records import Candidate
    from evokernel.sandbox import worker_env
    prob = load_problem("softmax")
    arch = device_arch()
    cand = Candidate(prob.seed_source)
    assert Builder(tmp_path / "cache", arch=arch, timeout_s=600).build(cand).ok
    env = dict(worker_env(), CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    # Bounded well inside the stage's limit: its first H200 run (2026-12-02, 140a55c) had not
    # finished after about 8 minutes and held up every GPU test after it.
    got = profile_candidate(prob.source, cand.source, tmp_path / "work", tmp_path / "cache",
                            arch, env=env, timeout_s=240)
    assert got and all(k.duration_us and k.duration_us > 0 for k in got)
    assert all(k.dram_throughput_pct is not None and 0 < k.dram_throughput_pct <= 100
               for k in got)
    print((tmp_path / "work" / "ncu.csv").read_text())
