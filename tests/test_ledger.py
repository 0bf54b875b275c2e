"""tests/conftest.py's ledger (EVOKERNEL_TEST_LEDGER): outcomes appended as tests end, and tests
whose last outcome at the same commit is a pass deselected on the next run; another commit's
passes count for nothing, a failed teardown undoes its call's pass, and a ledger that cannot be
used is reported and ignored (every test runs)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = '''import os
import pytest

def test_a(): pass

def test_b(): assert os.environ.get("B_OK") == "1"

@pytest.fixture
def fussy():
    yield
    assert os.environ.get("T_OK") == "1"

def test_c(fussy): pass

@pytest.mark.parametrize("x", ["p,q"])
def test_d(x): pass
'''


def _run(tmp_path, ledger, commit, env_extra=None):
    test = tmp_path / "test_sample.py"
    test.write_text(SAMPLE)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = {"PATH": "/usr/bin:/bin", "EVOKERNEL_TEST_LEDGER": str(ledger),
           "EVOKERNEL_TEST_COMMIT": commit, **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(test)], cwd=tmp_path, env=env, capture_output=True, text=True)
    return proc.stdout + proc.stderr


def test_the_ledger_resumes_at_the_same_commit_only(tmp_path):
    ledger = tmp_path / "ledger.csv"
    out = _run(tmp_path, ledger, "c1")
    assert "1 failed, 3 passed, 1 error" in out, out
    rows = [ln.rsplit(",", 2)[0].split(",", 2) + ln.rsplit(",", 2)[1:]
            for ln in ledger.read_text().splitlines()]        # time, commit, node, outcome, s
    assert all(r[0].endswith("Z") and "T" in r[0] and r[1] == "c1" for r in rows)
    assert [(r[2].split("::")[1], r[3]) for r in rows] == [
        ("test_a", "passed"), ("test_b", "failed"), ("test_c", "passed"), ("test_c", "failed"),
        ("test_d[p,q]", "passed")]
    kept = Path(str(ledger) + ".failures.txt").read_text()      # written as each test ended
    assert kept.count("==== ") == 2 and "test_b (call) failed" in kept, kept
    assert "test_c (teardown) failed" in kept and "assert None == '1'" in kept, kept
    out = _run(tmp_path, ledger, "c1", {"B_OK": "1", "T_OK": "1"})
    assert "2 passed, 2 deselected" in out, out         # test_b and test_c (teardown) again
    out = _run(tmp_path, ledger, "c1")
    assert "4 deselected" in out, out
    out = _run(tmp_path, ledger, "c2", {"B_OK": "1", "T_OK": "1"})
    assert "4 passed" in out and "deselected" not in out, out   # another commit: all


def test_a_ledger_that_cannot_be_used_is_named_and_ignored(tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    out = _run(tmp_path, folder, "c1", {"B_OK": "1", "T_OK": "1"})
    assert "4 passed" in out and f"cannot read {folder}" in out, out
    garbled = tmp_path / "garbled.csv"
    garbled.write_bytes(b"\xff\xfe,c1,x,passed\n")
    out = _run(tmp_path, garbled, "c1", {"B_OK": "1", "T_OK": "1"})
    assert "4 passed" in out and f"cannot read {garbled}" in out, out
    bad_rows = tmp_path / "bad.csv"
    bad_rows.write_text(",c1,test_sample.py::test_a,passed,0.0\n"          # no time
                        "t,c1,test_sample.py::test_b,maybe,0.0\n")           # no such outcome
    out = _run(tmp_path, bad_rows, "c1", {"B_OK": "1", "T_OK": "1"})
    assert "4 passed" in out and "deselected" not in out, out
