"""`evokernel run --strategy` on the CPU, the way the frontier-LLM runs are made: the batch LLM
mode writes requests, the scripted LLM answers them as reply files (`evokernel llm import`), and
`run --resume` goes on with the strategy stored in the run's config.json. The GPU check and the
CUDA evaluator are replaced by the demo's fake evaluator (its numbers are not measurements)."""
import json

import pytest

from evokernel.cli import main as cli
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.batch import write_replies
from evokernel.runs.store import RunStore
from tests.cli.test_llm_cli import no_gpu_needed  # noqa: F401  (a fixture)
from tests.support.scripts import load_experiment

RUN = ["run", "softmax", "--model", "openai/frontier-stand-in", "--no-compile-baseline"]


def answer_until_done(run_dir, folder, capsys, rounds=12):
    """Answer each written round with the scripted LLM, import it and resume, until the run
    stops for another reason than the batch mode; returns every resume's output."""
    outs = []
    for _ in range(rounds):
        write_replies(folder, scripted_reply, answered_by="evokernel.demo.scripted_llm",
                      scripted=True)
        assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
        capsys.readouterr()
        assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) in (0, 1)
        outs.append(capsys.readouterr().out)
        if "(llm_batch)" not in outs[-1]:
            return outs
    raise AssertionError(f"still waiting after {rounds} rounds")


def test_run_strategy_sequential_in_the_batch_mode_and_resumed(
        tmp_path, no_gpu_needed, capsys):  # noqa: F811
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--strategy", "sequential", "--generations", "3", "--population", "3",
                           "--ideas", "2", "--run-dir", str(run_dir),
                           "--llm-batch", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "evokernel: strategy sequential: 1 idea x 1 implementation of the best kernel" in out
    assert "(--population 3, --ideas 2 not used: the strategy fixes them)" in out
    assert "(llm_batch)" in out
    search = json.loads((run_dir / "config.json").read_text())["search"]
    assert (search["strategy"], search["population_size"], search["offspring_per_generation"],
            search["ideas_per_call"], search["implementations_per_idea"],
            search["crossover_prob"]) == ("sequential", 1, 1, 1, 1, 0.0)
    outs = answer_until_done(run_dir, folder, capsys)
    assert all("evokernel: strategy sequential" in o for o in outs)   # restored on resume
    assert "(completed)" in outs[-1]
    store = RunStore(run_dir, read_only=True)
    gens, cands, calls = store.generations(), store.candidates(), store.llm_calls()
    assert store.config().search.strategy == "sequential"
    store.close()
    assert [g["generation"] for g in gens] == [0, 1, 2, 3]
    assert all(len(g["population"]) == 1 for g in gens)
    ideas = [c for c in cands.values() if c.operator == "idea"]
    assert ideas and all(sum(c.generation == g for c in ideas) <= 1 for g in (1, 2, 3))
    assert {c.operator for c in cands.values()} <= {"seed", "idea", "repair"}
    assert sum(c["purpose"] == "ideas" and not c["cached"] for c in calls) == 3
    assert cli.main(["show", str(run_dir)]) == 0
    assert "strategy" in capsys.readouterr().out


def test_a_resume_keeps_its_strategy_and_refuses_another(tmp_path, no_gpu_needed,  # noqa: F811
                                                         capsys):
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--strategy", "best_of_n", "--generations", "1", "--offspring", "2",
                           "--run-dir", str(run_dir), "--llm-batch", str(folder)]) == 0
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder),
                     "--strategy", "branching"]) == 2
    assert "drop --strategy" in capsys.readouterr().err
    answer_until_done(run_dir, folder, capsys)
    store = RunStore(run_dir, read_only=True)
    seed_id = next(c.id for c in store.candidates().values() if c.operator == "seed")
    assert [g["population"] for g in store.generations()] == [[seed_id], [seed_id]]
    assert store.config().search.strategy == "best_of_n"
    store.close()


def test_a_baseline_needs_a_model_and_a_bad_strategy_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["run", "softmax", "--strategy", "branching",
                     "--run-dir", str(tmp_path / "r")]) == 2
    assert "--strategy branching makes its children with the LLM's idea mutation: give --model" \
        in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    with pytest.raises(SystemExit):
        cli.main(["run", "softmax", "--strategy", "beam"])
    assert "invalid choice: 'beam'" in capsys.readouterr().err


def test_an_ablation_run_goes_on_through_evokernel_run_resume(tmp_path, no_gpu_needed,  # noqa: F811
                                                               capsys, monkeypatch):
    """A run folder of experiments/ablation_branching.py is an ordinary run: `evokernel run
    --resume RUN_DIR --llm-batch DIR` continues it with its arm, and --report-only reports on
    it afterwards."""
    common = load_experiment("common")
    ablation = load_experiment("ablation_branching")
    monkeypatch.setattr(common, "configure_logging", lambda verbose: None)
    flags = ["softmax", "--mock", "--evaluator", "fake", "--budget-tokens", "100000",
             "--arms", "sequential", "--seeds", "0", "--run-root", str(tmp_path)]
    first = ablation.main(flags + ["--max-generations", "1"])["arms"][0]
    assert first["stopped"] == "completed" and first["generations"] == 1
    run_dir, folder = tmp_path / "sequential-s0", tmp_path / "sequential-s0-batch"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["search"]["strategy"] == "sequential"
    config["search"]["generations"] = 3                  # two more generations to make
    (run_dir / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) == 0
    assert "(llm_batch)" in capsys.readouterr().out
    assert "(completed)" in answer_until_done(run_dir, folder, capsys)[-1]
    store = RunStore(run_dir, read_only=True)
    gens, cands = store.generations(), store.candidates()
    store.close()
    assert [g["generation"] for g in gens] == [0, 1, 2, 3]
    assert all(len(g["population"]) == 1 for g in gens)
    assert {c.operator for c in cands.values()} <= {"seed", "idea", "repair"}
    row = ablation.main(flags + ["--report-only"])["arms"][0]
    assert (row["arm"], row["strategy"], row["generations"], row["stopped"]) == \
        ("sequential", "sequential", 3, "completed")
    assert [g["generation"] for g in row["per_generation"]] == [0, 1, 2, 3]
    assert all(g["tokens"] is not None for g in row["per_generation"])   # from the Logbook
    assert row["tokens"] > first["tokens"]
    with pytest.raises(Exception, match="a run of search.strategy 'sequential', not "
                                        "'best_of_n'"):
        (tmp_path / "best_of_n-s0").symlink_to(run_dir)
        ablation.main(flags[:-6] + ["--arms", "best_of_n", "--seeds", "0", "--run-root",
                                    str(tmp_path), "--report-only"])


def test_ablation_report_only_marks_a_run_that_waits_for_replies(
        tmp_path, no_gpu_needed, capsys, monkeypatch):  # noqa: F811
    """Arms started with `evokernel run --strategy ARM --llm-batch` (not the script's default
    shape, nor its flags): --report-only takes the budget and each arm's settings from the runs,
    and marks a run that still waits for replies in the table, the means and the text."""
    common = load_experiment("common")
    ablation = load_experiment("ablation_branching")
    monkeypatch.setattr(common, "configure_logging", lambda verbose: None)
    for arm in ("sequential", "branching"):
        assert cli.main(RUN + ["--strategy", arm, "--seed", "0", "--generations", "2",
                               "--population", "2", "--ideas", "2", "--implementations", "1",
                               "--max-tokens", "100000", "--run-dir", str(tmp_path / f"{arm}-s0"),
                               "--llm-batch", str(tmp_path / f"{arm}-s0-batch")]) == 0
    answer_until_done(tmp_path / "sequential-s0", tmp_path / "sequential-s0-batch", capsys)
    run_dir, folder = tmp_path / "branching-s0", tmp_path / "branching-s0-batch"
    write_replies(folder, scripted_reply, answered_by="evokernel.demo.scripted_llm",
                  scripted=True)                       # one round answered, the next waits
    assert cli.main(["llm", "import", str(folder), str(run_dir)]) == 0
    assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder)]) in (0, 1)
    assert "(llm_batch)" in capsys.readouterr().out
    data = ablation.main(["--report-only", "--run-root", str(tmp_path), "--arms",
                          "sequential,branching", "--seeds", "0"])
    rows = {r["arm"]: r for r in data["arms"]}
    assert (rows["sequential"]["stopped"], rows["branching"]["stopped"]) == \
        ("completed", "llm_batch")
    assert data["not_finished"] == ["branching-s0"] and data["budget_tokens"] == 100000
    md = (tmp_path / "ablation.md").read_text()
    assert "token budget per arm: 100000;" in md and "evaluator: fake" in md
    assert "openai/frontier-stand-in" in md and "not a model's ideas" in md
    assert "- branching: 2 kept x k=2 ideas x m=1 implementations; at most 2 generations" in md
    assert "NOT FINISHED: branching-s0 (llm_batch: waits for LLM replies" in md
    assert "(llm_batch: NOT FINISHED) |" in md and "| branching *(1 of 1 not finished) |" in md
    assert "- branching seed 0 (NOT FINISHED: llm_batch):" in md
    assert "| sequential | 0 |" in md and "| sequential |" in md.split("mean best speedup")[1]
