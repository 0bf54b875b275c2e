"""The CLI's argument errors, its no-GPU message, and problem listing."""
import sqlite3
import subprocess
import sys

import pytest
import torch

from evokernel.cli.main import main


def test_no_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    assert "required" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["run", "softmax", "--population", "many"], "invalid int value"),
    (["run", "--frobnicate"], "unrecognized arguments"),
    (["check", "softmax"], "the following arguments are required: KERNEL"),
])
def test_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_bad_problem_names_it(capsys, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n")
    assert main(["check", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "no class Model" in err


def test_missing_kernel_file(capsys, tmp_path):
    assert main(["check", "softmax", str(tmp_path / "k.py")]) == 2
    assert "no such kernel file" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_run_without_gpu_says_what_is_needed_and_what_works(capsys):
    assert main(["run", "softmax", "--generations", "1"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "make test" in err and "evokernel problems" in err


def test_problems_lists_builtins(capsys):
    assert main(["problems"]) == 0
    out = capsys.readouterr().out
    for name in ("matmul", "conv2d", "softmax", "layernorm", "conv2d_relu_maxpool"):
        assert name in out


def test_import_has_no_side_effects():
    code = ("import sys, evokernel; "
            "assert 'litellm' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_resume_refuses_other_flags(capsys, tmp_path):
    assert main(["run", "--resume", str(tmp_path), "--model", "openai/x",
                 "--generations", "9"]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "--generations" in err and "stored config.json" in err


def test_bad_search_arguments_are_reported_before_the_gpu(capsys):
    assert main(["run", "softmax", "--population", "0"]) == 2
    assert "population_size" in capsys.readouterr().err
    assert main(["run", "softmax", "--distributions", "problem,bogus"]) == 2
    assert "bogus" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["check", "softmax", "problems/seeds/softmax.py", "--gate-seeds", "0"], "--gate-seeds"),
    (["check", "softmax", "problems/seeds/softmax.py", "--tolerance", "inf"], "tolerance"),
    (["suite", "softmax", "--search", "--population", "0"], "population_size"),
])
def test_check_and_suite_name_bad_flags_before_the_gpu(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_suite_search_makes_a_search_config_from_its_own_flags():
    from evokernel.cli.main import build_parser
    from evokernel.cli.options import search_config
    args = build_parser().parse_args(["suite", "softmax", "--search", "--generations", "2"])
    config = search_config(args)          # suite has no island or LLM-operator flags
    assert config.generations == 2 and config.islands == 1


def test_unreadable_kernel_files(capsys, tmp_path):
    binary = tmp_path / "k.py"
    binary.write_bytes(b"\xff\xfe\x00binary")
    assert main(["check", "softmax", str(binary)]) == 2
    assert "not a UTF-8 text file" in capsys.readouterr().err
    assert main(["check", "softmax", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    gone = tmp_path / "gone.py"                 # each bad file named, not only the first
    assert main(["check", "softmax", str(gone), str(binary), "--build-only"]) == 2
    err = capsys.readouterr().err
    assert f"{gone}: no such kernel file" in err and f"{binary}: not a UTF-8" in err, err


def _foreign_sqlite(db):
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE songs (title TEXT)")
    con.commit()
    con.close()


@pytest.mark.parametrize("spoil, message", [
    (lambda db: db.write_bytes(b""), "an empty file (0 bytes)"),
    (_foreign_sqlite, "a SQLite file of another program (tables: songs)"),
    (lambda db: db.write_bytes(b"this is not sqlite" * 100), "not a readable run store"),
])
@pytest.mark.parametrize("command", [["show"], ["report", "-o", "REP"], ["export", "-o", "K.py"],
                                     ["run", "--resume"]])
def test_every_reader_refuses_a_store_that_is_not_one(command, spoil, message, capsys, tmp_path):
    """show, report, export and run --resume: one line naming run.sqlite and what it is, exit
    status 2, and nothing written anywhere."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    spoil(run / "run.sqlite")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    argv = [a.replace("REP", str(tmp_path / "rep")).replace("K.py", str(tmp_path / "k.py"))
            for a in command]
    assert main(argv[:1] + [str(run)] + argv[1:] if command[0] != "run"
                else argv + [str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'run.sqlite'}:" in err and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("flag, value", [("--max-cost-usd", "-5"), ("--max-cost-usd", "nan"),
                                         ("--max-tokens", "0")])
def test_nonsense_budgets_are_refused_before_the_gpu(flag, value, capsys):
    assert main(["run", "softmax", "--model", "openai/x", flag, value]) == 2
    assert "must be a positive number" in capsys.readouterr().err


def test_listing_into_a_closed_pipe_is_quiet():
    """`evokernel problems | head -1`: the reader is gone before the listing is written (closed
    here before the interpreter has even started); no BrokenPipeError traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "evokernel", "problems"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def _subparsers():
    import argparse

    from evokernel.cli.main import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_argument_has_one_help_line_with_its_default_once():
    """Each command's positional arguments and flags have a help text; a flag's default is
    written once (no "(default 16) (default: 16.0)"), and it is the config's."""
    from evokernel.config import GateConfig, SearchConfig
    for name, parser in _subparsers().items():
        for action in parser._actions:
            text = action.help or ""
            assert text.strip(), f"{name} {action.dest}: no help text"
            assert text.count("(default") <= 1 and "%(default)" not in text, \
                f"{name} {action.dest}: {text}"
    run = _subparsers()["run"].format_help()
    assert f"(default: {GateConfig().tolerance_factor})" in run.replace("\n", " ")
    assert f"(default: {SearchConfig().population_size})" in " ".join(run.split())


def test_flag_defaults_are_the_configs(monkeypatch):
    """Change a config default and the flag follows it: the CLI reads, never restates."""
    from evokernel.cli import options
    from evokernel.cli.main import build_parser
    from evokernel.config import EvalConfig, SearchConfig
    args = build_parser().parse_args(["run"])
    assert options.search_config(args) == SearchConfig()
    assert options.eval_config(args) == EvalConfig()
    suite = build_parser().parse_args(["suite", "softmax"])
    assert options.search_config(suite) == SearchConfig()


def test_tolerance_is_an_alias_of_tolerance_factor():
    from evokernel.cli.main import build_parser
    for flag in ("--tolerance", "--tolerance-factor"):
        args = build_parser().parse_args(["check", "softmax", "k.py", flag, "8"])
        assert args.tolerance_factor == 8.0


def test_readme_lists_every_command():
    from tests.support.scripts import ROOT
    readme = (ROOT / "README.md").read_text()
    for name in _subparsers():
        assert f"evokernel {name}" in readme, name
    commands = readme[readme.index("## Command line"):readme.index("## Without a GPU")]
    assert "--build-only [--arch 9.0]" in commands and "[--run]" in commands
    assert "evokernel bench [--phases cold,warm,fidelity,sequential,faults,suite]" in commands
    assert "--dask-scheduler" in commands and "--gpus N" in commands
    assert "--evaluator fake" in readme and "not measurements" in readme


def test_eval_timeout_sets_the_config_and_a_timeout_not_above_zero_is_refused():
    import pytest

    from evokernel.cli import options
    from evokernel.cli.main import build_parser
    from evokernel.config import EvalConfig
    from evokernel.errors import ConfigError
    args = build_parser().parse_args(["run", "--eval-timeout", "90"])
    assert options.eval_config(args).eval_timeout_s == 90
    for name in ("eval_timeout_s", "build_timeout_s"):
        for bad in (0, -5, float("nan"), True):
            with pytest.raises(ConfigError, match=f"evaluation.{name} must be"):
                EvalConfig(**{name: bad})
