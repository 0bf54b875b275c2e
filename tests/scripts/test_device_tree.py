"""scripts/device_tree.sh: slim leaves every results/ folder but the kept ones out of what a
device call sends, refuses commits while slimmed (one would delete the results from main), and
restore puts the index and .git/info/exclude back exactly."""
import shutil
import subprocess

from tests.support.scripts import ROOT

SCRIPT = ROOT / "scripts" / "device_tree.sh"


def git(repo, *args, check=True):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=check)


def tree(repo, *args):
    return subprocess.run(["bash", "scripts/device_tree.sh", *args], cwd=repo,
                          capture_output=True, text=True)


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    for path in ("code.py", "results/old/a.txt", "results/abl/run/run.sqlite",
                 "results/abl/run-batch/replies/r.txt", "results/keep/k.txt"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(path)
    (repo / "scripts").mkdir()
    shutil.copy(SCRIPT, repo / "scripts" / "device_tree.sh")
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "all")
    return repo


def test_slim_keeps_only_the_named_results_and_restore_undoes_it(tmp_path):
    repo = make_repo(tmp_path)
    shutil.rmtree(repo / ".git/hooks")                  # a clone may have none (this one had)
    exclude = (repo / ".git/info/exclude").read_text()
    before = git(repo, "ls-files").stdout
    out = tree(repo, "slim", "--no-batch", "results/abl", "results/keep")
    assert out.returncode == 0, out.stderr
    sent = set(git(repo, "ls-files").stdout.split()) | set(
        git(repo, "ls-files", "--others", "--exclude-standard").stdout.split())
    assert sent == {"code.py", "scripts/device_tree.sh", "results/abl/run/run.sqlite",
                    "results/keep/k.txt"}
    assert (repo / "results/old/a.txt").exists()                 # left on disk, not deleted
    refused = git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                  "--allow-empty", "-m", "x", check=False)
    assert refused.returncode != 0 and "slimmed" in refused.stderr
    assert tree(repo, "slim", "results/keep").returncode == 2    # twice: refused
    assert tree(repo, "restore").returncode == 0
    assert git(repo, "ls-files").stdout == before
    assert (repo / ".git/info/exclude").read_text() == exclude
    assert git(repo, "status", "--porcelain").stdout == ""
    assert not (repo / ".git/hooks/pre-commit").exists()


def test_bad_input_is_named_and_changes_nothing(tmp_path):
    repo = make_repo(tmp_path)
    for args, said in ((["slim"], "name the results/ paths"),
                       (["slim", "code.py"], "not a path under results/"),
                       (["slim", "results/nope"], "no such path"),
                       (["restore"], "not slimmed")):
        out = tree(repo, *args)
        assert out.returncode == 2 and said in out.stderr, (args, out.stderr)
        assert git(repo, "status", "--porcelain").stdout == ""
    assert "MiB (limit 64 MiB)" in tree(repo, "size").stdout
