"""experiments/frontier_table.py on the CPU: a target judged on the run's figure and on
do_bench's, the stand-in warnings carried into the table, the store left as it was, and a folder
that is not a run named with exit status 2."""
import json

import pytest

from evokernel.config import RunConfig
from evokernel.problem import Problem
from evokernel.records import EvalResult, Reason, Verdict
from evokernel.runs.store import RunStore
from tests.support.runstores import files_state, kernel
from tests.support.scripts import load_experiment

table = load_experiment("frontier_table")


def softmax_run(run_dir, device="NVIDIA H200", compile_ms=1.5, run_compile_ms=None):
    """A softmax run whose best kernel is 2.0x eager and 1.5x torch.compile (``compile_ms``:
    its results' torch.compile baseline; ``run_compile_ms``: the run's, in its device meta)."""
    prob = Problem(name="softmax", path=run_dir.parent / "softmax.py", source="# reference\n")
    store = RunStore.create(run_dir, RunConfig(problem="softmax", run_dir=str(run_dir)), prob)
    store.set_meta("device", {"device": device, **(
        {"compile_ms": run_compile_ms} if run_compile_ms else {})})
    seed = kernel("seed", "seed kernel (round-0 port)", operator="seed")
    best = kernel("b", "[memory] one pass with an online max\nsecond line", (seed,),
                  generation=1)
    for c, ms in ((seed, 1.6), (best, 1.0)):
        store.add_candidate(c)
        store.add_result(EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                                    reference_ms=2.0, compile_ms=compile_ms, candidate_ms=ms,
                                    floor_ms=0.5, norm_error_ratio=1.5, max_error_ratio=2.5,
                                    tolerance_factor=16.0))
    store.end_generation(0, [seed.id], seed.id, 1.25, 1, 1)
    store.end_generation(1, [best.id, seed.id], best.id, 2.0, 1, 2)
    store.close()
    return best


def test_the_row_of_a_run_and_its_target(tmp_path):
    best = softmax_run(tmp_path / "softmax")
    before = files_state(tmp_path / "softmax")
    r = table.row(tmp_path / "softmax")
    assert files_state(tmp_path / "softmax") == before
    b = r["best"]
    assert (b["id"], b["vs_eager"], b["vs_compile"], b["pct_of_floor"]) == (best.id, 2.0, 1.5,
                                                                            200.0)
    assert (b["norm_ratio"], b["max_ratio"], b["idea"]) == (1.5, 2.5,
                                                           "[memory] one pass with an online max")
    assert (r["target"], r["met"], r["warnings"], r["marks"]) == (
        ">= 1.4x torch.compile", "met by the run's timing only", [], [])
    assert r["crfm_l40s_pct"] == 111.8 and r["do_bench"] is None


def test_vs_compile_falls_back_to_the_runs_baseline_as_show_does(tmp_path):
    """A result timed without its own torch.compile baseline (a run resumed before the first
    was cached) is set against the run's, in the table as in `show`; none at all: not
    measured, never 0."""
    from evokernel.runs.view import compile_speedup, kernel_text, load_run
    softmax_run(tmp_path / "a", compile_ms=None, run_compile_ms=1.5)
    b = table.row(tmp_path / "a")["best"]
    assert (b["vs_compile"], b["compile_ms"]) == (1.5, 1.5)
    view = load_run(tmp_path / "a")
    assert compile_speedup(view, view.best) == 1.5
    assert "1.500x vs torch.compile" in kernel_text(view, view.best)
    softmax_run(tmp_path / "b", compile_ms=None)
    r = table.row(tmp_path / "b")
    assert (r["best"]["vs_compile"], r["best"]["compile_ms"]) == (None, None)
    assert r["met"] == "not measured"


def test_do_bench_below_the_target_makes_it_missed(tmp_path):
    best = softmax_run(tmp_path / "softmax")
    (tmp_path / "softmax" / "do_bench.json").write_text(json.dumps(
        {"candidate_id": best.id, "speedup_vs_eager": 1.9, "speedup_vs_compile": 1.39}))
    r = table.row(tmp_path / "softmax")
    assert r["met"] == "missed" and r["do_bench"]["speedup_vs_compile"] == 1.39
    assert "1.900x / 1.390x" in table.markdown([r])


def test_a_timing_of_another_kernel_or_run_is_refused(tmp_path):
    best = softmax_run(tmp_path / "softmax")
    bench = tmp_path / "softmax" / "do_bench.json"
    for data, said in (({"candidate_id": "0ld", "speedup_vs_eager": 3.0}, "times kernel 0ld"),
                       ({"run_dir": "elsewhere", "speedup_vs_eager": 3.0}, "another run"),
                       ([1, 2], "not a do_bench result"),
                       ({"candidate_id": best.id, "speedup_vs_eager": "fast"}, "not a number")):
        bench.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=said):
            table.row(tmp_path / "softmax")
    bench.write_text("{")
    with pytest.raises(ValueError, match="not a do_bench JSON file"):
        table.row(tmp_path / "softmax")
    bench.write_text(json.dumps({"run_dir": str(tmp_path / "softmax"), "speedup_vs_eager": 2.0,
                                 "speedup_vs_compile": 1.45}))
    assert table.row(tmp_path / "softmax")["met"] == "met"      # an older file, this run


def test_judge():
    best = {"vs_eager": 2.1, "vs_compile": 0.9}
    assert table.judge("conv2d", best, None) == (">= 2x eager", "met by the run's timing only")
    assert table.judge("conv2d", best, {"speedup_vs_eager": 2.05})[1] == "met"
    assert table.judge("conv2d", best, {"speedup_vs_eager": 1.99})[1] == "missed"
    assert table.judge("layernorm", best, None)[1] == "missed"
    assert table.judge("layernorm", {"vs_eager": 2.1, "vs_compile": None}, None)[1] == \
        "not measured"
    assert table.judge("matmul", None, None)[1] == "no kernel"
    assert table.judge("toy", best, None) == (None, "no target")


def test_a_fake_evaluators_run_is_marked_and_bad_input_named(tmp_path, capsys):
    softmax_run(tmp_path / "softmax", device="fake evaluator (no GPU)")
    assert table.main([str(tmp_path / "softmax"), "--out", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "frontier_table.md").read_text()
    assert "| softmax (FAKE EVALUATOR) |" in md and "not measurements" in md
    assert json.loads((tmp_path / "out" / "frontier_table.json").read_text())[0]["problem"] == \
        "softmax"
    capsys.readouterr()
    assert table.main([str(tmp_path / "out")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert table.main([str(tmp_path / "softmax"), "--do-bench", "x=missing.json"]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "b.json").write_text("{}")
    for argv, said in (([str(tmp_path / "softmax")] * 2, "named twice"),
                       (["--do-bench", f"{tmp_path}/other={tmp_path}/b.json"], "not one of"),
                       (["--do-bench", f"{tmp_path}/softmax={tmp_path}/b.json"] * 2,
                        "already has")):
        runs = argv if argv[0] != "--do-bench" else [str(tmp_path / "softmax"), *argv]
        assert table.main(runs) == 2
        assert said in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.sqlite").write_bytes(b"not a database")
    assert table.main([str(tmp_path / "broken")]) == 2
    assert "not a readable run store" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert table.main([str(tmp_path / "softmax"), "--out", str(tmp_path / "file")]) == 2
    assert "cannot write the table there" in capsys.readouterr().err


def test_below_fp32_instructions_in_the_best_are_named_with_the_best_without(tmp_path):
    """A best kernel whose SASS holds TF32 tensor-core instructions (3xTF32 that meets the FP32
    bound) is accepted by the gate; the table says so and names the best kernel without them."""
    from evokernel.records import PrecisionFinding
    run = tmp_path / "c2rmp"
    prob = Problem(name="conv2d_relu_maxpool", path=tmp_path / "p.py", source="# reference\n")
    store = RunStore.create(run, RunConfig(problem="conv2d_relu_maxpool", run_dir=str(run)), prob)
    store.set_meta("device", {"device": "NVIDIA H200"})
    seed = kernel("seed", "seed kernel (round-0 port)", operator="seed")
    plain = kernel("p", "[memory] vectorise the pool", (seed,), generation=1)
    tc = kernel("t", "[compute] 3xTF32 mma.sync", (plain,), generation=2)
    hmma = PrecisionFinding(kernel="conv_mma(float const*)", opcode="HMMA.1688.F32.TF32",
                            kind="tensor_core", precision="tf32", count=336)
    for c, ms, audit in ((seed, 4.0, ()), (plain, 1.0, ()), (tc, 0.8, (hmma,))):
        store.add_candidate(c)
        store.add_result(EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                                    reference_ms=2.0, compile_ms=1.6, candidate_ms=ms,
                                    floor_ms=0.5, norm_error_ratio=0.5, max_error_ratio=0.4,
                                    tolerance_factor=16.0, precision_audit=audit))
    store.end_generation(0, [seed.id], seed.id, 0.5, 1, 1)
    store.end_generation(1, [plain.id, seed.id], plain.id, 2.0, 1, 2)
    store.end_generation(2, [tc.id, plain.id], tc.id, 2.5, 1, 3)
    store.close()
    r = table.row(run)
    assert r["best"]["id"] == tc.id
    assert r["best"]["below_fp32"] == ["HMMA.1688.F32.TF32 x336 (conv_mma)"]
    assert r["best_without_below_fp32"] == {"id": plain.id, "vs_eager": 2.0, "vs_compile": 1.6}
    md = table.markdown([r])
    assert "HMMA.1688.F32.TF32 x336" in md and f"Best kernel without any: {plain.id}, 2.000x" in md
    # a clean best: nothing said
    softmax_run(tmp_path / "softmax")
    r2 = table.row(tmp_path / "softmax")
    assert r2["best"]["below_fp32"] == [] and r2["best_without_below_fp32"] is None
    assert "below-FP32" not in table.markdown([r2])
