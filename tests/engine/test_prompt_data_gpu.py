"""On the H200: what the prompts are built from really arrives. The worker's info carries the
GPU sheet, an accepted seed kernel carries its ptxas -v report, the implement prompt renders
both, and ncu (where it may read the counters) gives its metrics. Run with a fresh cache, so
the seed is built (a build made before the report was kept has none)."""
from __future__ import annotations

import random

import pytest

from evokernel.config import EvalConfig
from evokernel.problem import load_problem
from evokernel.records import Candidate


@pytest.mark.gpu
def test_sheet_ptxas_and_prompt_on_the_device(tmp_path):
    from evokernel.engine.evaluator import CudaEvaluator
    from evokernel.engine.ncu import ProfileUnavailable
    from evokernel.operators.base import SearchContext
    from evokernel.operators.prompts import implement_prompt
    problem = load_problem("softmax")
    seed = Candidate(problem.seed_source)
    ev = CudaEvaluator(problem, EvalConfig(cache_dir=str(tmp_path), measure_compile=False))
    try:
        (result,) = ev.evaluate([seed])
        try:
            profile = ev.profile(seed)
        except ProfileUnavailable as e:
            profile = ()
            print(f"ncu: {e}")
    finally:
        ev.close()
    info = ev.info
    print({k: info.get(k) for k in ("device", "sm_count", "registers_per_sm",
                                    "shared_mem_per_sm_kb", "shared_mem_per_block_optin_kb",
                                    "max_threads_per_sm", "l2_mb", "hbm_peak_gbs", "copy_gbs",
                                    "fp32_tflops", "fp32_peak_tflops")})
    assert info["registers_per_sm"] == 65536 and info["max_threads_per_sm"] == 2048
    assert info["shared_mem_per_block_optin_kb"] == 227 and info["clusters"] is True
    assert result.accepted, result.detail
    assert result.resources and all(r.registers > 0 for r in result.resources)
    assert any("softmax" in r.name for r in result.resources)
    ctx = SearchContext(problem=problem, generation=1, rng=random.Random(0),
                        results={seed.id: result}, device=info)
    user = implement_prompt(ctx, seed, "keep rows in registers")[1]["content"]
    print(user[user.find("# GPU"):user.find("# Current kernel")])
    print(user[user.find("## How it does"):user.find("# Ideas tried")])
    assert "65536 32-bit registers" in user and "`ptxas -v` report" in user
    assert str(info["tf32_tflops"]) not in user
    steps = info["setup_steps_s"]                      # where the set-up's time went (issue 16)
    print(steps)
    assert list(steps)[:3] == ["load_wait", "problem_module", "gate_reference"]   # load_wait:
    assert "time_reference" in steps                   # the worker's, before the Session's
    assert {"l2_flusher", "spin_kernel", "trace_kernels"} <= set(steps)
    assert all(v >= 0 for v in steps.values()) and steps["compile_baseline"] < 0.5  # not measured
    assert "setup_steps_s" not in user
    if profile:
        assert all(k.duration_us and k.duration_us > 0 for k in profile)
