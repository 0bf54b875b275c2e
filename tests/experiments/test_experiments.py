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
