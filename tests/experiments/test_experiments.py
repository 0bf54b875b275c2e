"""The experiment scripts end to end on the CPU: the scripted LLM (litellm's mock_response) and
the fake evaluator (evokernel/demo/fake_evaluator.py), so their logic is tested without a GPU."""
import json
import sys
from pathlib import Path

import pytest

from tests.support.scripts import load_experiment

common = load_experiment("common")
ablation_branching = load_experiment("ablation_branching")
headline = load_experiment("headline")
from evokernel.demo.fake_evaluator import FakeEvaluator  # noqa: E402
from evokernel.demo.scripted_llm import BROKEN  # noqa: E402

from evokernel.problem import load_problem  # noqa: E402
from evokernel.records import Candidate  # noqa: E402
from evokernel.runs.store import RunStore  # noqa: E402

FAKE = ["--mock", "--evaluator", "fake"]


@pytest.fixture(autouse=True)
def keep_logging(monkeypatch):
    monkeypatch.setattr(common, "configure_logging", lambda verbose: None)


def test_fake_evaluator_is_deterministic_and_names_failures():
    problem = load_problem("softmax")
    ev = FakeEvaluator(problem)
    seed = Candidate(source=problem.seed_source)
    a, b = ev.evaluate([seed]), FakeEvaluator(problem).evaluate([seed])
    assert a == b and a[0].accepted and a[0].reference_ms == 1.064 and a[0].compile_ms == 0.872
    assert a[0].pct_of_floor is not None and a[0].speedup > 0
    broken = Candidate(source=problem.seed_source.replace('r"""', 'r"""\n' + BROKEN, 1))
    no_code = Candidate(source="Sorry, no kernel today.")
    assert [r.reason.value for r in ev.evaluate([broken, no_code])] == ["build_error", "no_code"]


def test_headline_runs_every_problem_and_writes_the_table(tmp_path, capsys):
    argv = FAKE + ["--problems", "softmax,matmul", "--generations", "2", "--population", "2",
                   "--offspring", "2", "--ideas", "2", "--implementations", "1",
                   "--run-root", str(tmp_path)]
    summary = headline.main(argv)
    rows = summary["problems"]
    assert [r["problem"] for r in rows] == ["softmax", "matmul"]
    for r in rows:
        store = RunStore(r["run_dir"])
        assert r["generations"] == 2 and r["stopped"] == "completed"
        assert r["speedup_vs_eager"] == pytest.approx(store.best()[1].speedup)
        assert r["speedup_vs_compile"] == pytest.approx(
            r["compile_ms"] / r["kernel_ms"]) and r["pct_of_floor"] > 100
        assert r["tokens"] > 0 and r["llm_calls"] > 0 and r["candidates"] > 1
        assert {c.operator for c in store.candidates().values()} & {"idea", "crossover"}
    md = (tmp_path / "summary.md").read_text()
    assert "| softmax |" in md and "| matmul |" in md and "best vs torch.compile" in md
    assert "NOT measurements" in md
    assert json.loads((tmp_path / "summary.json").read_text())["problems"] == \
        json.loads(json.dumps(rows, default=str))
    # A second call resumes the finished runs: nothing new is sent or evaluated.
    again = headline.main(argv)["problems"]
    assert [(r["best_id"], r["tokens"], r["candidates"]) for r in again] == \
        [(r["best_id"], r["tokens"], r["candidates"]) for r in rows]
    with pytest.raises(SystemExit):
        headline.main(FAKE + ["--problems", "nope", "--run-root", str(tmp_path / "x")])


def test_ablation_runs_four_arms_under_the_same_budget(tmp_path):
    budget = 300            # litellm's mock replies count 30 tokens a call: about 10 calls
    data = ablation_branching.main(["softmax", *FAKE, "--budget-tokens", str(budget),
                                    "--k", "2", "--m", "2", "--population", "2",
                                    "--offspring", "2", "--seeds", "0,1",
                                    "--run-root", str(tmp_path)])
    rows = data["arms"]
    assert {(r["arm"], r["seed"]) for r in rows} == {(a, s) for a in ablation_branching.ARMS
                                                      for s in (0, 1)}
    arms = {r["arm"]: r for r in rows if r["seed"] == 0}
    for r in rows:
        assert r["stopped"] == "budget"
        assert budget <= r["tokens"] <= budget + 16 * 30     # at most one generation's calls over
        gens = r["per_generation"]
        assert [g["generation"] for g in gens] == list(range(len(gens)))
        best = [g["best_speedup"] for g in gens]
        assert best == sorted(best) and best[-1] == pytest.approx(r["best_speedup"])
        assert all(g["tokens"] is not None for g in gens)
        assert [b for _, b in r["best_so_far"]] == best
    stores = {a: RunStore(r["run_dir"]) for a, r in arms.items()}
    cands = {a: st.candidates() for a, st in stores.items()}
    # best_of_n: every sample is written for the seed kernel, which stays the only parent
    seed_id = next(c.id for c in cands["best_of_n"].values() if c.operator == "seed")
    assert all(c.parent_ids == (seed_id,) for c in cands["best_of_n"].values()
               if c.operator == "idea")
    assert all(g["population"] == [seed_id] for g in stores["best_of_n"].generations())
    # sequential: one idea and one implementation per generation, so more, smaller generations
    seq = [c for c in cands["sequential"].values() if c.operator == "idea"]
    assert all(sum(c.generation == g for c in seq) <= 1 for g in range(arms["sequential"]
                                                                         ["generations"] + 1))
    assert arms["sequential"]["generations"] > arms["branching"]["generations"]
    # branching: the best two kernels so far are the next seeds (DEAP's selBest)
    results = stores["branching"].results()
    for g in stores["branching"].generations():
        so_far = sorted((results[c.id].speedup for c in cands["branching"].values()
                         if c.generation <= g["generation"] and results[c.id].accepted),
                        reverse=True)
        assert sorted((results[i].speedup for i in g["population"]), reverse=True) == \
            pytest.approx(so_far[:2])
    for arm in ("best_of_n", "sequential", "branching"):
        assert {c.operator for c in cands[arm].values()} <= {"seed", "idea", "repair"}
    assert "tune" in {c.operator for c in cands["evokernel"].values()}   # the default operators
    report = (tmp_path / "ablation.md").read_text()
    for arm in ablation_branching.ARMS:
        assert f"| {arm} | 0 |" in report and f"| {arm} | 1 |" in report
    assert "NOT measurements" in report and "not a model's ideas" in report
    assert (tmp_path / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "ablation.json").read_text())["budget_tokens"] == budget
    with pytest.raises(SystemExit):
        ablation_branching.main(["softmax", "--evaluator", "fake", "--budget-tokens", "10"])
    with pytest.raises(SystemExit):
        ablation_branching.main(["softmax", *FAKE, "--budget-tokens", "10", "--arms", "nope"])


def test_ablation_curves_are_running_maxima_and_their_mean_a_step_function():
    points = [{"tokens": 0, "best_speedup": 1.0}, {"tokens": 60, "best_speedup": 0.5},
              {"tokens": 90, "best_speedup": 2.0}]
    curve = ablation_branching.best_so_far(points)
    assert curve == [(0, 1.0), (60, 1.0), (90, 2.0)]
    other = [(30, 3.0)]
    assert ablation_branching.mean_curve([curve, other], [0, 30, 90]) == [0.5, 2.0, 2.5]
    assert ablation_branching.mean_curve([], [0]) == []


def test_a_generation_that_passes_the_budget_does_not_count_within_it():
    # the budget is checked between generations: gen 2 ended at 412k, past a 300k budget
    curve = [(0, 16.3), (113_914, 37.3), (412_405, 38.6)]
    assert ablation_branching.best_at(curve, 300_000) == 37.3
    assert ablation_branching.best_at(curve, 412_405) == 38.6
    assert ablation_branching.best_at([(5, 2.0)], 4) == 0.0


# --report-only: every label comes from what the runs stored; runs that disagree with each other
# or with the flags given are refused (one line, exit status 2, nothing written).
REPORT_ARMS = ["--arms", "sequential,branching", "--seeds", "0,1"]


@pytest.fixture(scope="module")
def ablation_runs(tmp_path_factory):
    """Two arms x two seeds made with the scripted LLM and the fake evaluator, in the shape of
    non-default flags (k=2, m=1, population 2, 2 generations, budget 5000)."""
    root = tmp_path_factory.mktemp("ablation")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "configure_logging", lambda verbose: None)
        ablation_branching.main(["softmax", *FAKE, "--budget-tokens", "5000", "--k", "2",
                                 "--m", "1", "--population", "2", "--offspring", "2",
                                 "--max-generations", "2", *REPORT_ARMS, "--run-root", str(root)])
    return root


def copy_runs(src, dst):
    import shutil
    shutil.copytree(src, dst)
    return dst


def report_only(root, *flags, capsys=None):
    """The script's exit status (common.run_script) and its stderr."""
    argv = [*flags, "--report-only", "--run-root", str(root)]
    if capsys is not None:
        capsys.readouterr()
    status = common.run_script("ablation_branching", lambda: ablation_branching.main(argv))
    return status, capsys.readouterr().err.strip() if capsys is not None else ""


def test_report_only_of_scripted_fake_runs_says_so(ablation_runs, tmp_path, capsys):
    """A1: runs of --mock --evaluator fake, reported without those flags: the report is the one
    the runs were made with (evaluator fake, scripted replies, the caveat), not `cuda`."""
    root = copy_runs(ablation_runs, tmp_path / "r")
    made = (root / "ablation.md").read_text()
    (root / "ablation.md").unlink()
    assert report_only(root, *REPORT_ARMS, capsys=capsys) == (0, "")
    md = (root / "ablation.md").read_text()
    assert md == made
    assert "evaluator: fake (" in md and "evaluator: cuda" not in md
    assert "NOT measurements" in md and "not a model's ideas" in md
    assert "openai/scripted-mock (scripted replies: litellm mock_response" in md
    data = json.loads((root / "ablation.json").read_text())
    assert data["evaluator"] == "fake" and data["scripted"] is True
    assert "fake evaluator: speedups are NOT measurements" in data["caveat"]
    assert "scripted LLM replies" in data["caveat"] and data["budget_tokens"] == 5000
    # the flags that say the same are accepted
    assert report_only(root, "softmax", *FAKE, "--budget-tokens", "5000", "--k", "2", "--m", "1",
                       "--population", "2", "--max-generations", "2", *REPORT_ARMS,
                       capsys=capsys) == (0, "")


def test_a_run_past_its_budget_with_candidates_to_evaluate_is_not_finished(ablation_runs,
                                                                            tmp_path):
    # the budget stops only a generation not yet begun: a run whose imported replies passed it
    # still has that generation's candidates to evaluate (the ablation, 2026-12-03)
    from evokernel.records import Candidate
    from evokernel.runs.store import RunStore
    run = next(p.parent for p in copy_runs(ablation_runs, tmp_path / "r").rglob("run.sqlite"))
    before = ablation_branching.stored_stop(run)
    assert before in ablation_branching.FINISHED
    store = RunStore(run)
    try:
        store.add_candidate(Candidate(source="# made, not evaluated\n", operator="idea",
                                      generation=3))
    finally:
        store.close()
    assert ablation_branching.stored_stop(run) == "needs_gpu"
    assert "needs_gpu" in ablation_branching.NOT_FINISHED
    row = ablation_branching.summarize("sequential", 0, run, run / "none.jsonl", "needs_gpu")
    assert row["waiting"] == 1 and row["candidates"] == row["waiting"] + len(
        RunStore(run, read_only=True).results())


def test_a_run_without_token_records_has_no_reading_within_budget():
    rows = [{"arm": "sequential", "seed": s, "best_speedup": 2.0, "best_within_budget": None,
             "tokens": 0, "llm_requests": 0, "llm_calls": 0, "candidates": 1, "accepted": 1,
             "waiting": 0, "distinct_ideas": 0, "generations": 1, "stopped": "budget",
             "finished": True, "per_generation": []} for s in (0, 1)]
    labels = {"caveat": "", "evaluator": "fake", "device": None, "problem": "softmax",
              "llm": "m", "budget_tokens": 10, "seeds": [0, 1], "settings": {},
              "not_finished": False}
    md = ablation_branching.markdown(rows, labels)
    assert "| sequential | 0 | 2.000x | - |" in md and "| 2.000-2.000x | - |" in md


def test_report_only_labels_are_the_runs_settings_and_budget(ablation_runs, tmp_path, capsys):
    """A3/A4: the header gives the runs' stored search settings and llm.max_total_tokens, not
    the script's defaults (k=3, m=2, population 4, 50 generations) or its --budget-tokens."""
    root = copy_runs(ablation_runs, tmp_path / "r")
    assert report_only(root, *REPORT_ARMS, capsys=capsys)[0] == 0
    md = (root / "ablation.md").read_text()
    assert "token budget per arm: 5000;" in md
    assert "- sequential: 1 idea x 1 implementation of the best so far per generation; at most 2 " \
           "generations, repair 1" in md
    assert "- branching: 2 kept x k=2 ideas x m=1 implementations; at most 2 generations" in md
    assert "k=3" not in md and "4 kept" not in md and "NOT FINISHED" not in md
    data = json.loads((root / "ablation.json").read_text())
    assert data["settings"]["branching"]["ideas_per_call"] == 2
    assert data["not_finished"] == [] and all(r["finished"] for r in data["arms"])


@pytest.mark.parametrize("flags, words", [
    (["layernorm"], ["'softmax'", "'layernorm'"]),                                    # A2
    (["--evaluator", "cuda"], ["--evaluator cuda", "fake evaluator"]),
    (["--model", "openai/gpt-5"], ["--model openai/gpt-5", "openai/scripted-mock"]),
    (["--budget-tokens", "60000"], ["--budget-tokens 60000", "is 5000"]),
    (["--k", "3"], ["--k asks ideas_per_call=3, the run has 2"]),
    (["--max-generations", "50"], ["--max-generations asks generations=50"]),
    (["--no-repair"], ["--no-repair asks repair_attempts=0"]),
])
def test_report_only_refuses_flags_that_disagree_with_the_runs(ablation_runs, tmp_path, capsys,
                                                               flags, words):
    root = copy_runs(ablation_runs, tmp_path / "r")
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    status, err = report_only(root, *flags, *REPORT_ARMS, capsys=capsys)
    assert status == 2 and len(err.splitlines()) == 1 and err.startswith("ablation_branching: ")
    assert all(w in err for w in words), err
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("edit, words", [
    (lambda c: c["search"].update(ideas_per_call=1), "branching's search settings"),
    (lambda c: c["llm"].update(max_total_tokens=9000), "the token budget"),
    (lambda c: c["llm"].update(model="openai/gpt-5"), "the LLM model"),
    (lambda c: c.update(problem="layernorm"), None),
])
def test_report_only_refuses_runs_that_disagree_with_each_other(ablation_runs, tmp_path, capsys,
                                                                edit, words):
    """A3/A4: one report compares runs made alike: a seed whose stored config differs from the
    other's is refused, naming what differs; nothing is written."""
    root = copy_runs(ablation_runs, tmp_path / "r")
    path = root / "branching-s1" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    if words is None:        # the problem: the stored meta names it too
        store = RunStore(root / "branching-s1")
        store.set_meta("problem", {"name": "layernorm", "path": "problems/layernorm.py"})
        store.close()
        words = "the problem: softmax (sequential-s0, branching-s0, sequential-s1); layernorm"
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    status, err = report_only(root, *REPORT_ARMS, capsys=capsys)
    assert status == 2 and len(err.splitlines()) == 1 and "the runs disagree on" in err, err
    assert words in err and "branching-s1" in err
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == before


def test_report_only_bad_input_is_one_line_and_creates_nothing(ablation_runs, tmp_path, capsys):
    """A5: the default --seeds 0,1,2 (and --arms all) name folders that are not there: the error
    names them, the runs that are, and --seeds/--arms; a mistyped --run-root is not created;
    --seeds a,b and --budget-tokens 0 are usage errors naming the flag."""
    root = copy_runs(ablation_runs, tmp_path / "r")
    (root / "ablation.md").unlink()
    (root / "ablation.json").unlink()
    status, err = report_only(root, capsys=capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert "no run in best_of_n-s0" in err and "sequential-s2" in err
    assert "runs there: branching-s0, branching-s1, sequential-s0, sequential-s1" in err
    assert "--seeds" in err and "--arms" in err
    assert not (root / "ablation.md").exists() and not (root / "ablation.json").exists()
    typo = tmp_path / "no-such-root"
    status, err = report_only(typo, *REPORT_ARMS, capsys=capsys)
    assert status == 2 and "no such folder" in err and not typo.exists()
    for argv, words in [
            (["--report-only", "--run-root", str(root), "--seeds", "a,b"], "--seeds"),
            (["softmax", *FAKE, "--budget-tokens", "0", "--run-root", str(typo)],
             "--budget-tokens must be a positive number"),
            (["softmax", *FAKE, "--run-root", str(typo)], "--budget-tokens is required")]:
        with pytest.raises(SystemExit) as e:
            ablation_branching.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and words in err and "max_total_tokens" not in err
        assert not typo.exists()


def test_headline_through_the_fake_server_and_litellms_http_path(tmp_path):
    argv = ["--mock-server", "--evaluator", "fake", "--problems", "layernorm", "--generations",
            "2", "--population", "2", "--offspring", "2", "--ideas", "2",
            "--implementations", "1", "--run-root", str(tmp_path)]
    row = headline.main(argv)["problems"][0]
    store = RunStore(row["run_dir"])
    calls = store.llm_calls()
    sent = [c for c in calls if not c["cached"]]
    assert sent and all(c["model"] == common.SERVER_MODEL and c["error"] is None for c in sent)
    assert row["tokens"] == 150 * len(sent)             # the fake server's usage per reply
    assert row["speedup_vs_eager"] and row["generations"] == 2
    assert "fake OpenAI server" in (tmp_path / "summary.md").read_text()
    # resumed with a new server (another port): the finished run is summarized again
    assert headline.main(argv)["problems"][0]["tokens"] == row["tokens"]


no_gpu = pytest.mark.skipif(__import__("torch").cuda.is_available(),
                            reason="checks what happens without a GPU")


@no_gpu
@pytest.mark.parametrize("script, argv", [
    ("custom_operator", ["custom_operator.py", "layernorm"]),
    ("mock_llm_search", ["mock_llm_search.py"]),
    ("headline", ["headline.py", "--mock", "--problems", "softmax"]),
    ("headline", ["headline.py", "--mock-server"]),
])
def test_scripts_without_a_gpu_end_with_one_line_and_create_nothing(script, argv, tmp_path,
                                                                    monkeypatch, capsys):
    module = load_experiment(script)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", argv)
    main = (lambda: module.main(argv[1:])) if script == "headline" else module.main
    assert common.run_script(script, main) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"{script}: needs a CUDA GPU")
    assert "nothing was created" in err
    assert list(tmp_path.iterdir()) == []


@no_gpu
def test_a_script_run_without_a_gpu_exits_2(tmp_path):
    import subprocess
    from tests.support.scripts import EXPERIMENTS
    proc = subprocess.run([sys.executable, str(EXPERIMENTS / "headline.py"), "--mock"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("headline: needs a CUDA GPU") and "--evaluator fake" in \
        proc.stderr
    assert list(tmp_path.iterdir()) == []


@no_gpu
def test_the_readme_python_api_snippet_without_a_gpu_creates_nothing(tmp_path, monkeypatch):
    """README's first Python block: Evolution.run() raises NoGPUError (its message one line)
    before any run folder exists."""
    import re

    from evokernel.errors import NoGPUError
    from tests.support.scripts import ROOT
    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NoGPUError) as e:
        exec(compile(snippet, "README.md", "exec"), {})
    assert "\n" not in str(e.value) and "nothing was created" in str(e.value)
    assert list(tmp_path.iterdir()) == []
