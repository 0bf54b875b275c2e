"""scripts/pack_batch_views.sh: re-packing keeps the views packed before (a fresh clone holds
them only in the archive: session 12 re-packed one and dropped 33 earlier views), adds the loose
ones, and a folder with none loose is said and the next folder still packed."""
import subprocess
import tarfile

from tests.support.scripts import ROOT

SCRIPT = ROOT / "scripts" / "pack_batch_views.sh"


def pack(*folders):
    return subprocess.run(["bash", str(SCRIPT), *map(str, folders)], capture_output=True,
                          text=True, check=True).stdout


def names(folder):
    with tarfile.open(folder / "views.tar.xz") as tar:
        return sorted(tar.getnames())


def test_a_repack_keeps_the_packed_views_and_adds_the_loose_ones(tmp_path):
    a, b = tmp_path / "a-batch", tmp_path / "b-batch"
    for folder in (a, b):
        (folder / "requests").mkdir(parents=True)
    (a / "requests" / "r1.md").write_text("first view\n")
    (a / "a-g001-r01.jsonl").write_text("{}\n")
    pack(a)
    assert names(a) == ["a-g001-r01.jsonl", "requests/r1.md"]
    (a / "requests" / "r1.md").unlink()                      # as in a fresh clone
    (a / "a-g001-r01.jsonl").unlink()
    (a / "requests" / "r2.md").write_text("second view\n")
    (b / "requests" / "r9.md").write_text("b's view\n")
    empty = tmp_path / "empty-batch"
    (empty / "requests").mkdir(parents=True)
    out = pack(a, empty, b)
    assert names(a) == ["a-g001-r01.jsonl", "requests/r1.md", "requests/r2.md"]
    assert "3 files (1 loose)" in out and f"{empty}: no views to pack" in out
    assert names(b) == ["requests/r9.md"]
    with tarfile.open(a / "views.tar.xz") as tar:
        assert tar.extractfile("requests/r1.md").read() == b"first view\n"
