"""`evokernel`'s exit statuses for what goes wrong outside a command's own logic: a user's path
that does not exist, SIGTERM (clean-up as for Ctrl-C, not orphaned builds), Ctrl-C."""
import os
import signal
import subprocess
import sys
import time

from evokernel.cli import main as cli


def test_a_missing_output_folder_is_one_line_and_status_2(capsys):
    rc = cli.main(["report", "tests/fixtures/run_mock_llm", "-o", "/proc/no/such/dir"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("evokernel: /proc/no"), err


def test_ctrl_c_hints_resume_only_for_run(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt
    parser = cli.build_parser()
    args = parser.parse_args(["show", "tests/fixtures/run_mock_llm"])
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {
        "parse_args": lambda self, argv: args})())
    args.func = interrupted
    assert cli.main([]) == 130
    assert capsys.readouterr().err.strip() == "evokernel: interrupted"


def test_main_in_process_gives_the_callers_sigterm_handler_back(capsys):
    """main() called from Python (a test run, a notebook) installs its SIGTERM handler only for
    the command: on the H200 a `timeout` that stopped pytest later was turned into evokernel's
    Terminated inside an unrelated test."""
    def mine(signum, frame):
        pass
    before = signal.signal(signal.SIGTERM, mine)
    try:
        assert cli.main(["show", "tests/fixtures/run_mock_llm"]) == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    capsys.readouterr()


def test_sigterm_unwinds_like_ctrl_c_and_exits_143(tmp_path):
    """A child that sleeps inside a command: SIGTERM raises Terminated in the main thread, so
    `finally` blocks (which stop build and worker processes) run."""
    code = ("import time, sys\nfrom evokernel.cli import main as cli\n"
            "def slow(args):\n"
            "    try:\n        time.sleep(60)\n"
            f"    finally:\n        open({str(tmp_path / 'cleaned')!r}, 'w').close()\n"
            "p = cli.build_parser()\nargs = p.parse_args(['show', 'x'])\nargs.func = slow\n"
            "cli.build_parser = lambda: type('P', (), {'parse_args': lambda s, a: args})()\n"
            "sys.exit(cli.main([]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                            cwd=os.getcwd())
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143 and "evokernel: terminated" in err, err
    assert (tmp_path / "cleaned").exists()


def test_export_never_writes_into_the_run_it_reads(tmp_path, capsys):
    import shutil
    run = tmp_path / "run"
    shutil.copytree("tests/fixtures/run_mock_llm", run)
    before = (run / "run.sqlite").read_bytes()
    for target in (run / "run.sqlite", run / "problem.py", run):
        assert cli.main(["export", str(run), "-o", str(target)]) == 2
        assert "inside the run folder" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("mine")
    assert cli.main(["export", str(run), "-o", str(tmp_path / "notes.txt")]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (run / "run.sqlite").read_bytes() == before
    assert cli.main(["export", str(run), "-o", str(tmp_path / "best.py")]) == 0
