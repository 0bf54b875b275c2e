"""tests/conftest.py's ledger (EVOKERNEL_TEST_LEDGER): outcomes appended as tests end, and tests
that passed at the same commit deselected on the next run; another commit's passes count for
nothing."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path, ledger, commit, env_extra=None):
    test = tmp_path / "test_sample.py"
    test.write_text("import os\n"
                    "def test_a(): pass\n"
                    "def test_b(): assert os.environ.get('B_OK') == '1'\n")
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = {"PATH": "/usr/bin:/bin", "EVOKERNEL_TEST_LEDGER": str(ledger),
           "EVOKERNEL_TEST_COMMIT": commit, **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(test)], cwd=tmp_path, env=env, capture_output=True, text=True)
    return proc.stdout


def test_the_ledger_resumes_at_the_same_commit_only(tmp_path):
    ledger = tmp_path / "ledger.csv"
    out = _run(tmp_path, ledger, "c1")
    assert "1 failed, 1 passed" in out, out
    rows = [ln.split(",") for ln in ledger.read_text().splitlines()]
    assert [(r[1], r[2].split("::")[1], r[3]) for r in rows] == [
        ("c1", "test_a", "passed"), ("c1", "test_b", "failed")]
    out = _run(tmp_path, ledger, "c1", {"B_OK": "1"})
    assert "1 passed, 1 deselected" in out, out                      # only test_b ran again
    out = _run(tmp_path, ledger, "c2", {"B_OK": "1"})
    assert "2 passed" in out and "deselected" not in out, out        # another commit: both
