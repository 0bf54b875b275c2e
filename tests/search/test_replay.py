"""evokernel.search.replay and `evokernel replay`: a recorded run's kernels are evaluated again,
generation by generation, into a new run directory that `show` reads; no LLM is asked; bad input
is refused by name, and without a GPU nothing is created."""
import pytest

from evokernel.cli import main as cli
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.errors import ConfigError
from evokernel.runs.store import RunStore
from evokernel.search.replay import replay
from tests.search.test_search_llm import run as recorded_run


class Counting(FakeEvaluator):
    """The fake evaluator, counting what it was given (its numbers are not measurements)."""

    def __init__(self, problem):
        super().__init__(problem)
        self.info = {**self.info, "device": "replay machine"}


@pytest.fixture
def recorded(tmp_path):
    """A small recorded search with the scripted LLM (tests.search.test_search_llm)."""
    result = recorded_run(tmp_path, "recorded")[0]
    return result.run_dir


def test_a_replay_evaluates_every_recorded_kernel_again_in_generation_order(recorded, tmp_path):
    src = RunStore(recorded, read_only=True)
    cands, results, gens = src.candidates(), src.results(), src.generations()
    src.close()
    seen = []
    from evokernel.problem import load_problem
    ev = Counting(load_problem(recorded / "problem.py"))
    out = replay(recorded, tmp_path / "again", evaluator=ev,
                 on_generation=lambda g, rows: seen.append(g))
    assert seen == [g["generation"] for g in gens]
    assert sorted(ev.evaluated) == sorted(c for c in cands if c in results)
    assert [r.candidate.generation for r in out.rows] == sorted(
        r.candidate.generation for r in out.rows)
    assert all(r.recorded == results[r.candidate.id] for r in out.rows)
    new = RunStore(out.run_dir, read_only=True)
    assert set(new.results()) == set(ev.evaluated)
    assert [g["population"] for g in new.generations()] == [
        [c for c in g["population"] if c in new.results()] for g in gens]
    meta = new.meta()
    assert meta["replay_of"]["run_dir"] == str(recorded)
    assert meta["replay_of"]["scripted_by"]          # the recorded replies were scripted
    assert meta["device"]["device"] == "replay machine"
    assert new.llm_usage()["calls"] == 0             # nothing was asked of an LLM
    new.close()
    assert (out.run_dir / "best.py").is_file()
    assert (out.run_dir / "llm_cache.sqlite").is_file() == (recorded / "llm_cache.sqlite").is_file()
    assert out.best is not None and "recorded" in out.table()


def test_a_replay_refuses_an_existing_run_dir_and_a_folder_that_is_no_run(recorded, tmp_path):
    from evokernel.problem import load_problem
    ev = Counting(load_problem(recorded / "problem.py"))
    with pytest.raises(ConfigError, match="already holds a run"):
        replay(recorded, recorded, evaluator=ev)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty"):
        replay(tmp_path / "empty", tmp_path / "x", evaluator=ev)
    assert not (tmp_path / "x").exists()


def test_the_command_without_a_gpu_says_so_and_creates_nothing(recorded, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert cli.main(["replay", str(recorded), "--run-dir", str(tmp_path / "r")]) == 2
    assert "GPU" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    assert cli.main(["replay", str(tmp_path / "nothing")]) == 2


def test_show_says_a_replay_is_one_and_of_what(recorded, tmp_path, capsys):
    from evokernel.problem import load_problem
    out = replay(recorded, tmp_path / "again", evaluator=Counting(
        load_problem(recorded / "problem.py")))
    assert cli.main(["show", str(out.run_dir)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "replay of" in text and "built, gated and timed again here" in text


def test_the_command_refuses_a_run_dir_that_is_a_file_not_empty_or_inside_the_record(
        recorded, tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    for bad, words in ((tmp_path / "afile", "a file"), (recorded, "not empty"),
                       (recorded / "sub", "inside the recorded run")):
        assert cli.main(["replay", str(recorded), "--run-dir", str(bad)]) == 2
        assert words in capsys.readouterr().err
    assert not (recorded / "sub").exists()


def test_without_a_gpu_the_command_says_so_in_one_line(recorded, tmp_path, capsys,
                                                      monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert cli.main(["replay", str(recorded), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "replay" in err and "nothing was created" in err
