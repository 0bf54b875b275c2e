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


def test_migrants_with_a_one_island_strategy_are_named_as_not_used(tmp_path, no_gpu_needed,
                                                                   capsys):  # noqa: F811
    """sequential and best_of_n keep one kernel on one island: nothing migrates, so --migrants
    is reported as not used (as --islands and --population are) and capped at the population,
    whatever --population says; with the default --population 4 a --migrants 6 was refused,
    and --migrants 2 --population 8 was taken silently. branching keeps --population kernels
    on one island, so --migrants over it is capped and named too."""
    for n, (strategy, extra) in enumerate((("sequential", ["--migrants", "6"]),
                                           ("best_of_n", ["--migrants", "2", "--population",
                                                          "8", "--islands", "2"]),
                                           ("branching", ["--migrants", "3", "--population",
                                                          "2"]))):
        assert cli.main(RUN + ["--strategy", strategy, *extra, "--run-dir",
                               str(tmp_path / f"r{n}"), "--llm-batch", str(tmp_path / "b")]) == 0
        out = capsys.readouterr().out
        assert f"--migrants {extra[1]}" in out.split("not used")[0], out
    store_config = (tmp_path / "r0" / "config.json").read_text()
    assert '"migrants": 1' in store_config and '"population_size": 1' in store_config
    assert cli.main(RUN + ["--strategy", "sequential", "--migrants", "1", "--population", "0",
                           "--run-dir", str(tmp_path / "r9"),
                           "--llm-batch", str(tmp_path / "b")]) == 0
    assert "(--population 0 not used: the strategy fixes it)" in capsys.readouterr().out
