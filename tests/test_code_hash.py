"""scripts/code_hash.sh, the label the GPU tests' ledger keys passes by: the same for a copy of
the code with other results or docs, different when a code file changes."""
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("evokernel", "operators", "problems", "tests", "scripts", "experiments",
         "pyproject.toml")


def code_hash(root: Path) -> str:
    out = subprocess.run(["bash", str(root / "scripts" / "code_hash.sh")], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert len(out) == 16 and int(out, 16) >= 0
    return out


def test_results_and_docs_keep_the_hash_and_code_changes_it(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".sandbox-test-*")
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, copy / part, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(src, copy / part)
    first = code_hash(copy)
    assert code_hash(copy) == first
    (copy / "results").mkdir()
    (copy / "results" / "new.md").write_text("a result\n")
    (copy / "README.md").write_text("docs\n")
    (copy / "tests" / "__pycache__").mkdir(exist_ok=True)
    (copy / "tests" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert code_hash(copy) == first
    (copy / "evokernel" / "records.py").write_text(
        (copy / "evokernel" / "records.py").read_text() + "# changed\n")
    assert code_hash(copy) != first
