"""`evokernel suite`: fast_p and the geometric mean against hand-computed values, the table from
the committed H200 check files, candidate lookup, and execution with stand-in evaluators."""
import json
import math
from pathlib import Path

import pytest
import torch
from loguru import logger

from evokernel.cli.main import main
from evokernel.config import EvalConfig, RunConfig
from evokernel.errors import EvokernelError
from evokernel.problem import load_problem
from evokernel.records import EvalResult, Reason, Verdict
from evokernel.report.suite import (SuiteRow, aggregates, fast_p, geomean_speedup, missing_row,
                             rows_from_checks, to_markdown)
from evokernel.cli.suite import candidate_files, check_all, search_all, suite_problems

H200 = Path(__file__).resolve().parents[2] / "results" / "h200-2026-11-30"


def row(name, correct, kernel_ms, eager_ms=3.0, compile_ms=None):
    return SuiteRow(problem=name, kernel=f"{name}.py", correct=correct,
                    reason="ok" if correct else "wrong_function", eager_ms=eager_ms,
                    compile_ms=compile_ms, kernel_ms=kernel_ms, floor_ms=0.5)


# Five problems. Speedups vs eager (3.0 ms / kernel ms): A 3.0/1.2 = 2.5, B 3.0/2.5 = 1.2,
# C 3.0/3.75 = 0.8, D would be 3.0 but is rejected, E has no candidate.
# Vs compile (compile ms / kernel ms): A 1.8/1.2 = 1.5, B none measured, C 6.0/3.75 = 1.6.
ROWS = [row("A", True, 1.2, compile_ms=1.8), row("B", True, 2.5),
        row("C", True, 3.75, compile_ms=6.0), row("D", False, 1.0, compile_ms=9.0),
        missing_row("E", "no candidate")]


def test_fast_p_by_hand():
    assert fast_p(ROWS, 0) == pytest.approx(3 / 5)          # correct: A, B, C
    assert fast_p(ROWS, 1) == pytest.approx(2 / 5)          # 2.5, 1.2
    assert fast_p(ROWS, 1.5) == pytest.approx(1 / 5)        # 2.5
    assert fast_p(ROWS, 2) == pytest.approx(1 / 5)
    assert fast_p(ROWS, 2.5) == 0.0                         # strictly faster than p
    assert fast_p(ROWS, 1, "compile") == pytest.approx(2 / 5)    # A 1.5, C 1.6; B unknown
    assert fast_p(ROWS, 1.5, "compile") == pytest.approx(1 / 5)  # only C: 1.5 is not > 1.5


def test_geomean_is_over_correct_kernels_only():
    assert geomean_speedup(ROWS) == pytest.approx((2.5 * 1.2 * 0.8) ** (1 / 3))  # 1.3389
    assert geomean_speedup(ROWS) == pytest.approx(1.33887, abs=1e-5)
    assert geomean_speedup(ROWS, "compile") == pytest.approx(math.sqrt(1.5 * 1.6))
    assert geomean_speedup([missing_row("E", "x")]) is None


def test_aggregates_and_errors():
    agg = aggregates(ROWS)
    assert agg["problems"] == 5 and agg["correct"] == 3
    assert agg["fast_p"] == pytest.approx({"0": 0.6, "1": 0.4, "1.5": 0.2, "2": 0.2})
    assert agg["correct_without_compile_ms"] == 1
    assert ROWS[0].pct_of_floor == pytest.approx(240.0)     # 1.2 ms over a 0.5 ms floor
    assert ROWS[3].speedup is None                           # rejected: no speedup
    with pytest.raises(ValueError, match="empty"):
        fast_p([], 1)
    with pytest.raises(ValueError, match="baseline"):
        fast_p(ROWS, 1, "tf32")


def test_markdown_table():
    md = to_markdown(ROWS, "hand")
    assert "| A | A.py | yes | ok | 3.0000 | 1.8000 | 1.2000 | 2.500 | 1.500 | 240 |" in md
    assert "| E | - | no | no candidate |" in md
    assert "| fast_1.5 | 0.20 (1/5) | 0.20 (1/5) |" in md
    assert "| geometric-mean speedup of correct kernels | 1.339 | 1.549 |" in md


def test_table_from_the_committed_h200_checks():
    rows = rows_from_checks(H200)
    assert [r.problem for r in rows] == ["conv2d", "conv2d_relu_maxpool", "layernorm",
                                         "matmul", "softmax"]
    matmul = rows[3]
    assert matmul.kernel == "problems/seeds/matmul.py" and matmul.correct  # not the fp16 cheat
    speeds = {}
    for f in H200.glob("check_*.json"):
        k = json.loads(f.read_text())["kernels"][0]
        speeds[k["kernel"]] = k["reference_ms"] / k["candidate_ms"]
    assert {r.kernel: r.speedup for r in rows} == pytest.approx(speeds)
    agg = aggregates(rows)
    assert agg["fast_p"] == pytest.approx({"0": 1.0, "1": 0.2, "1.5": 0.2, "2": 0.2})
    assert agg["geomean_speedup"] == pytest.approx(
        math.prod(speeds.values()) ** (1 / 5))            # about 0.609
    assert agg["correct_without_compile_ms"] == 1          # layernorm re-run without compile


def test_cli_suite_from_checks(tmp_path, capsys):
    out = tmp_path / "seeds"
    assert main(["suite", "--from-checks", str(H200), "-o", str(out), "--title", "seeds",
                 "softmax", "matmul"]) == 0
    data = json.loads((tmp_path / "seeds.json").read_text())
    assert data["aggregates"]["problems"] == 5 and len(data["rows"]) == 5
    assert "| fast_1 | 0.20 (1/5) |" in (tmp_path / "seeds.md").read_text()
    assert "written:" in capsys.readouterr().out


def test_cli_suite_from_checks_counts_unchecked_problems(tmp_path):
    folder = tmp_path / "checks"
    folder.mkdir()
    (folder / "check_softmax.json").write_text((H200 / "check_softmax.json").read_text())
    assert main(["suite", "--from-checks", str(folder), "-o", str(tmp_path / "s"),
                 "softmax", "layernorm"]) == 0
    data = json.loads((tmp_path / "s.json").read_text())
    assert [r["problem"] for r in data["rows"]] == ["softmax", "layernorm"]
    assert data["rows"][1]["reason"] == "no check file"
    assert data["aggregates"]["fast_p"]["0"] == 0.5


@pytest.mark.parametrize("flags", [["--eval-timeout", "60"], ["--search"],
                                   ["--tolerance-factor", "16", "--gate-seeds", "0"]])
def test_cli_suite_from_checks_refuses_flags_it_would_ignore(flags, tmp_path, capsys):
    # the checks were made with their own flags; a table "with" these would claim what no run did
    out = tmp_path / "s"
    assert main(["suite", "--from-checks", str(H200), "-o", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert "would be ignored" in err and flags[0] in err and str(H200) in err
    assert not (tmp_path / "s.md").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
@pytest.mark.parametrize("extra", [[], ["--search"]])
def test_cli_suite_without_gpu_says_so(extra, capsys, tmp_path):
    assert main(["suite", "softmax", "-o", str(tmp_path / "s")] + extra) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "suite --from-checks" in err
    assert not (tmp_path / "s.md").exists()


def test_candidate_files_seed_folder_and_mapping(tmp_path):
    problems = suite_problems(["softmax", "matmul"])
    seeds = candidate_files(problems, None)
    assert seeds["softmax"].name == "softmax.py" and seeds["softmax"].parent.name == "seeds"
    (tmp_path / "softmax.py").write_text("class ModelNew: pass\n")
    folder = candidate_files(problems, str(tmp_path))
    assert folder == {"softmax": tmp_path / "softmax.py", "matmul": None}
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"matmul": "softmax.py"}))
    assert candidate_files(problems, str(mapping)) == {"softmax": None,
                                                       "matmul": tmp_path / "softmax.py"}


@pytest.mark.parametrize("value", [3, None, "", ["a.py"]])
def test_a_mapping_entry_that_is_not_a_path_is_named(tmp_path, value, capsys):
    """A new user's {"relu": 3} gave a TypeError traceback naming neither file nor entry."""
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"matmul": "softmax.py", "softmax": value}))
    with pytest.raises(EvokernelError) as e:
        candidate_files(suite_problems(["softmax", "matmul"]), str(mapping))
    assert str(mapping) in str(e.value) and "'softmax'" in str(e.value), e.value
    assert "'matmul'" not in str(e.value) and json.dumps(value) in str(e.value), e.value
    assert main(["suite", "softmax", "--kernels", str(mapping), "-o", str(tmp_path / "s")]) == 2
    assert "the kernel file must be a path" in capsys.readouterr().err


def test_a_mapping_key_that_names_no_problem_is_warned(tmp_path):
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({"softmaxx": "a.py", "matmul": "b.py"}))
    said = []
    sink = logger.add(lambda m: said.append(m.record["message"]), level="WARNING")
    try:
        files = candidate_files(suite_problems(["softmax", "matmul"]), str(mapping))
    finally:
        logger.remove(sink)
    assert files == {"softmax": None, "matmul": tmp_path / "b.py"}
    assert len(said) == 1 and "'softmaxx'" in said[0] and str(mapping) in said[0], said


class StandIn:
    """An evaluator that accepts each kernel at eager 2 ms / kernel 1 ms (or rejects it)."""

    def __init__(self, problem, config, accept=True):
        self.problem, self.accept = problem, accept
        self.info = {"compile_ms": 4.0, "floor_ms": 0.25}

    def evaluate(self, cands, on_result=None):
        c = cands[0]
        if self.accept:
            return [EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                               reference_ms=2.0, candidate_ms=1.0)]
        return [EvalResult.failure(c.id, Reason.LOWER_PRECISION, "fp16")]

    def close(self):
        pass


def test_check_all_scores_each_problem(tmp_path):
    problems = suite_problems(["softmax", "matmul", "layernorm"])
    files = {"softmax": Path(problems[0].path.parent / "seeds" / "softmax.py"), "matmul": None,
             "layernorm": Path(problems[2].path.parent / "seeds" / "layernorm.py")}
    made = []

    def make(problem, config):
        made.append(problem.name)
        return StandIn(problem, config, accept=problem.name == "softmax")
    rows = check_all(problems, files, EvalConfig(), make_evaluator=make)
    assert made == ["softmax", "layernorm"]                  # no candidate: nothing to run
    assert [(r.problem, r.correct, r.reason) for r in rows] == [
        ("softmax", True, "ok"), ("matmul", False, "no candidate"),
        ("layernorm", False, "lower_precision")]
    assert rows[0].speedup == 2.0 and rows[0].compile_speedup == 4.0
    assert rows[0].pct_of_floor == 400.0
    assert fast_p(rows, 1) == pytest.approx(1 / 3)


def test_check_all_by_default_evaluates_the_set_together(monkeypatch):
    """Without an evaluator factory, check_all hands every problem with a candidate to
    evaluate_problem_set at once and maps its outcomes back to rows, in order."""
    from evokernel.engine import problem_set
    from evokernel.engine.problem_jobs import ProblemOutcome
    problems = suite_problems(["softmax", "matmul", "layernorm", "conv2d"])
    seeds = candidate_files(problems, None)
    files = dict(seeds, matmul=None)
    calls = []

    def together(jobs, config, devices=None):
        calls.append(([j.problem.name for j in jobs], devices))
        out = []
        for j in jobs:
            c = j.candidates[0]
            assert c.source == seeds[j.problem.name].read_text() and c.operator == "check"
            if j.problem.name == "layernorm":
                out.append(ProblemOutcome("layernorm", [], {}, 0,
                                          error="layernorm.py: cannot set up"))
                continue
            r = EvalResult(candidate_id=c.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                           reference_ms=2.0, candidate_ms=1.0)
            out.append(ProblemOutcome(j.problem.name, [r], {"device": "x"}, 0))
        return out
    monkeypatch.setattr(problem_set, "evaluate_problem_set", together)
    rows = check_all(problems, files, EvalConfig(), placement={"devices": [0, 1]})
    assert calls == [(["softmax", "layernorm", "conv2d"], [0, 1])]     # one call, all of them
    assert [(r.problem, r.correct, r.reason) for r in rows] == [
        ("softmax", True, "ok"), ("matmul", False, "no candidate"),
        ("layernorm", False, "error: layernorm.py: cannot set up"), ("conv2d", True, "ok")]
    assert rows[0].speedup == 2.0


def test_check_all_on_dask_starts_one_local_cluster_for_all(monkeypatch):
    """suite --dask: one local cluster for the whole set, every problem's evaluator on it."""
    pytest.importorskip("distributed", reason="needs the 'dask' extra")
    from evokernel.cluster import connect
    from evokernel.engine import factory
    problems = suite_problems(["softmax", "matmul"])
    files = candidate_files(problems, None)
    started, asked = [], []

    class Cluster:
        scheduler_address = "tcp://127.0.0.1:1"

        def close(self):
            started.append("closed")

    def local_cluster(devices, build_workers):
        started.append(devices)
        return Cluster()

    def make(problem, config, **kw):
        asked.append((problem.name, kw))
        return StandIn(problem, config, accept=True)
    monkeypatch.setattr(connect, "local_cluster", local_cluster)
    monkeypatch.setattr(factory, "require_gpu", lambda message: None)
    monkeypatch.setattr(factory, "make_evaluator", make)
    rows = check_all(problems, files, EvalConfig(), placement={"dask": True, "devices": [0, 1]},
                     one_at_a_time=True)
    assert started == [[0, 1], "closed"]
    assert asked == [("softmax", {"dask": "tcp://127.0.0.1:1"}),
                     ("matmul", {"dask": "tcp://127.0.0.1:1"})]
    assert [r.correct for r in rows] == [True, True]
    from evokernel.cluster import problem_set
    from evokernel.engine.problem_jobs import ProblemOutcome
    sets = []

    def on_dask(jobs, config, address):
        sets.append(([j.problem.name for j in jobs], address))
        return [ProblemOutcome(j.problem.name, [EvalResult(
            candidate_id=j.candidates[0].id, verdict=Verdict.ACCEPT, reason=Reason.OK,
            reference_ms=2.0, candidate_ms=1.0)], {}, "tcp://w") for j in jobs]
    monkeypatch.setattr(problem_set, "evaluate_problem_set_on_dask", on_dask)
    started.clear()
    rows = check_all(problems, files, EvalConfig(), placement={"dask": True})  # together
    assert started[-1] == "closed" and sets == [(["softmax", "matmul"], "tcp://127.0.0.1:1")]
    assert [r.speedup for r in rows] == [2.0, 2.0]


def test_search_all_scores_each_best(tmp_path):
    from tests.support.runstores import build_crossover_run
    problems = [load_problem("softmax"), load_problem("matmul")]
    build_crossover_run(tmp_path / "runs" / "softmax", pending=False)

    class Result:
        def __init__(self, best, path):
            self.best, self.best_path = best, path

    def run(problem, cfg):
        assert cfg.run_dir == str(tmp_path / "runs" / problem.name)
        if problem.name == "matmul":
            return Result(None, None)
        from evokernel.runs.store import RunStore
        return Result(RunStore(cfg.run_dir, read_only=True).best(), Path(cfg.run_dir) / "b.py")
    rows = search_all(problems, RunConfig(), tmp_path / "runs", run=run)
    assert [(r.problem, r.correct, r.reason) for r in rows] == [
        ("softmax", True, "ok"), ("matmul", False, "no kernel accepted")]
    assert rows[0].speedup == 4.0 and rows[0].compile_speedup == 2.0   # compile_ms from meta


def test_a_malformed_problem_gets_a_row_and_the_others_go_on(tmp_path, monkeypatch, capsys):
    """A new user's folder with one broken problem file stopped the whole suite: the good
    problems got no verdict. Now the broken one is named, counts as not correct, and the rest
    run."""
    from evokernel.engine import factory, problem_set
    from evokernel.engine.problem_jobs import ProblemOutcome
    folder, kernels = tmp_path / "set", tmp_path / "kernels"
    folder.mkdir()
    kernels.mkdir()
    softmax = suite_problems(["softmax"])[0]
    (folder / "softmax.py").write_text(softmax.path.read_text())
    (folder / "syntax_bad.py").write_text("def get_inputs(:\n")
    (folder / "no_model.py").write_text("def get_inputs():\n    return []\n")
    (kernels / "softmax.py").write_text(candidate_files([softmax], None)["softmax"].read_text())

    def together(jobs, config, devices=None):
        assert [j.problem.name for j in jobs] == ["softmax"]
        return [ProblemOutcome(j.problem.name, [EvalResult(
            candidate_id=j.candidates[0].id, verdict=Verdict.ACCEPT, reason=Reason.OK,
            reference_ms=2.0, candidate_ms=1.0)], {}, 0) for j in jobs]
    monkeypatch.setattr(problem_set, "evaluate_problem_set", together)
    monkeypatch.setattr(factory, "require_gpu", lambda message: None)
    assert main(["suite", str(folder), "--kernels", str(kernels), "-o", str(tmp_path / "s")]) == 0
    rows = {r["problem"]: r for r in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert rows["softmax"]["correct"] is True
    assert not rows["syntax_bad"]["correct"] and not rows["no_model"]["correct"]
    assert rows["syntax_bad"]["reason"].startswith("malformed problem: ") and \
        "syntax_bad.py:1" in rows["syntax_bad"]["reason"], rows
    assert "no class Model" in rows["no_model"]["reason"], rows
    (tmp_path / "only_bad").mkdir()
    (tmp_path / "only_bad" / "no_model.py").write_text("def get_inputs():\n    return []\n")
    assert main(["suite", str(tmp_path / "only_bad"), "-o", str(tmp_path / "t")]) == 2
    assert "every problem file is malformed" in capsys.readouterr().err


def test_from_checks_refuses_two_checks_of_one_problem(tmp_path, capsys):
    """Two check files of softmax made two rows and counted it twice in fast_p."""
    folder = tmp_path / "checks"
    folder.mkdir()
    (folder / "check_softmax.json").write_text((H200 / "check_softmax.json").read_text())
    (folder / "check_softmax_v2.json").write_text((H200 / "check_softmax.json").read_text())
    assert main(["suite", "--from-checks", str(folder), "-o", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "check_softmax_v2.json" in err and "check_softmax.json" in err and \
        "one check file per problem" in err, err
    assert not (tmp_path / "s.md").exists()
    assert main(["suite", "--from-checks", str(folder / "check_softmax.json")]) == 2
    assert "not a folder of check_*.json" in capsys.readouterr().err


def test_an_output_path_it_cannot_write_fails_before_anything_runs(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    (tmp_path / "clash.md").mkdir()
    for args in (["softmax"], ["--from-checks", str(H200)]):
        assert main(["suite", *args, "-o", str(tmp_path / "afile" / "out")]) == 2
        err = capsys.readouterr().err
        assert "cannot make its folder" in err and "needs a CUDA GPU" not in err, err
        for out, said in (("", "not a file name"), (str(tmp_path / "clash"), "is a folder")):
            assert main(["suite", *args, "-o", out]) == 2      # '' was a ValueError traceback
            err = capsys.readouterr().err
            assert said in err and "needs a CUDA GPU" not in err, err


def test_two_problems_of_one_name_are_refused(tmp_path):
    """Rows and kernels go by name: two relu.py files got one candidate and two 'relu' rows."""
    softmax = suite_problems(["softmax"])[0]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "softmax.py").write_text(softmax.path.read_text())
    with pytest.raises(EvokernelError, match="two problems are named 'softmax'"):
        suite_problems(["softmax", str(tmp_path / "a")])
    assert [p.name for p in suite_problems(["softmax", str(softmax.path)])] == ["softmax"]


def test_a_mapping_that_names_a_problem_twice_is_refused(tmp_path):
    """JSON keeps the last of two equal keys: relu silently got the second file."""
    mapping = tmp_path / "map.json"
    mapping.write_text('{"softmax": "a.py", "matmul": "b.py", "softmax": "c.py"}')
    with pytest.raises(EvokernelError, match="'softmax' named twice") as e:
        candidate_files(suite_problems(["softmax", "matmul"]), str(mapping))
    assert str(mapping) in str(e.value)
