"""Flags given with their default value count as given (options.given_options): `run --resume`
refuses them as it refuses any other run flag (they would be ignored), and a strategy's first
line names them when it replaces them (a tester's finding: `--generations 3`, the default, was
taken and ignored on a resume; `--implementations 2` was missing from the line)."""
from evokernel.cli import main as cli
from tests.cli.test_llm_cli import no_gpu_needed  # noqa: F401  (a fixture)

RUN = ["run", "softmax", "--model", "openai/frontier-stand-in", "--no-compile-baseline"]


def test_a_resume_refuses_run_flags_given_with_their_default_value(tmp_path, no_gpu_needed,
                                                                   capsys):  # noqa: F811
    run_dir, folder = tmp_path / "run", tmp_path / "batch"
    assert cli.main(RUN + ["--generations", "2", "--run-dir", str(run_dir),
                           "--llm-batch", str(folder)]) == 0
    capsys.readouterr()
    for flag in (["--generations", "3"], ["--strategy", "evokernel"], ["--ideas", "3"],
                 ["softmax"]):
        assert cli.main(["run", "--resume", str(run_dir), "--llm-batch", str(folder),
                         *flag]) == 2
        said = "PROBLEM" if flag == ["softmax"] else flag[0]
        assert f"drop {said} (or start a new run)" in capsys.readouterr().err
    assert cli.main(["-v", "run", "--resume", str(run_dir), "--llm-batch", str(folder)]) == 0


def test_the_strategy_line_names_replaced_flags_given_with_their_default_value(
        tmp_path, no_gpu_needed, capsys):  # noqa: F811
    assert cli.main(RUN + ["--strategy", "sequential", "--implementations", "2", "--ideas", "1",
                           "--run-dir", str(tmp_path / "r"),
                           "--llm-batch", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "(--implementations 2 not used: the strategy fixes it)" in out  # --ideas 1 = its own


def test_migrants_are_checked_against_the_population_the_strategy_sets(tmp_path, no_gpu_needed,
                                                                        capsys):  # noqa: F811
    """sequential fixes the population to 1: --migrants 6 is refused against that population,
    not the default --population 4, and --population 8 (not used) does not let --migrants 2
    through."""
    for extra in (["--migrants", "6"], ["--migrants", "2", "--population", "8"]):
        assert cli.main(RUN + ["--strategy", "sequential", *extra,
                               "--run-dir", str(tmp_path / "r"),
                               "--llm-batch", str(tmp_path / "b")]) == 2
        err = capsys.readouterr().err
        assert f"population_size=1], got {extra[1]}" in err and "population_size=4" not in err
    assert not (tmp_path / "r").exists()
    assert cli.main(RUN + ["--strategy", "sequential", "--migrants", "1", "--population", "0",
                           "--run-dir", str(tmp_path / "r"),
                           "--llm-batch", str(tmp_path / "b")]) == 0
    assert "(--population 0 not used: the strategy fixes it)" in capsys.readouterr().out
