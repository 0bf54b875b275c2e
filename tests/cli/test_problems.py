"""`evokernel problems [PATH] [--run]`: every file gets a line, good or bad; --run runs each
set-up in a process of its own, on the meta device or the CPU, with a time limit, and names what
fails."""
import pytest

from evokernel.cli.main import main
from evokernel.problem import builtin_names, load_problem
from evokernel.problem_run import run_setups

HEAD = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
FILES = {
    "good": HEAD + "def get_inputs():\n    return [torch.randn(16, 64), 3]\n\n"
                   "def get_init_inputs():\n    return []\n",
    "big": HEAD + "def get_inputs():\n    return [torch.randn(65536, 65536)]\n\n"
                  "def get_init_inputs():\n    return []\n",
    "item": "import torch\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
            "        super().__init__()\n        self.k = int(torch.tensor(3).item())\n\n"
            "    def forward(self, x):\n        return x\n\ndef get_inputs():\n"
            "    return [torch.randn(2, 3)]\n\ndef get_init_inputs():\n    return []\n",
    "needs_pkg": "import torch\nimport not_a_package_anywhere\n" + HEAD[13:]
                 + "def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n",
    "raises": HEAD + "def get_inputs():\n    x = torch.randn(4)\n    return [x[10]]\n\n"
                     "def get_init_inputs():\n    return []\n",
    "wrong_kind": HEAD + "def get_inputs():\n    return torch.randn(4)\n\n"
                         "def get_init_inputs():\n    return []\n",
    "hangs": "import time\n" + HEAD + "def get_inputs():\n    while True:\n        time.sleep(1)\n\n"
             "def get_init_inputs():\n    return []\n",
    "gpu": HEAD + "def get_inputs():\n    return [torch.randn(4).cuda()]\n\n"
                  "def get_init_inputs():\n    return []\n",
    "prints": "import os\nprint('hello from the problem')\nos.write(1, b'raw\\n')\n" + HEAD
              + "def get_inputs():\n    return [torch.ones(2)]\n\ndef get_init_inputs():\n"
                "    return []\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("problems")
    for name, text in FILES.items():
        (root / f"{name}.py").write_text(text)
    (root / "malformed.py").write_text("import torch\n")
    return root


@pytest.fixture(scope="module")
def runs(folder):
    """Every file of ``folder`` but the malformed one, and the built-in problems (by name), in
    one call (one torch import)."""
    paths = sorted(folder.glob("*.py"))
    paths.remove(folder / "malformed.py")
    builtins = [load_problem(n).path for n in builtin_names()]
    got = run_setups(paths + builtins, timeout_s=5.0, jobs=2)
    return {p.stem if p in paths else f"builtin:{p.stem}": r
            for p, r in zip(paths + builtins, got)}


@pytest.mark.parametrize("name, status, stage, device, message", [
    ("good", "ok", "", "cpu", "2 inputs: 16x64 float32, int"),
    ("big", "ok", "", "meta", "1 input: 65536x65536 float32"),
    ("item", "ok", "", "cpu", "1 input: 2x3 float32"),
    ("needs_pkg", "failed", "import", None,
     "line 2: imports 'not_a_package_anywhere', which is not installed here"),
    ("raises", "failed", "get_inputs", "cpu",
     "line 9: get_inputs() raised IndexError: index 10 is out of bounds"),
    ("wrong_kind", "failed", "get_inputs", "cpu", "returned a Tensor, not a list or tuple"),
    ("hangs", "timeout", "run", None, "took over 5 s (killed)"),
    ("gpu", "needs_gpu", "get_inputs", "cpu", "get_inputs() raised"),
    ("prints", "ok", "", "cpu", "1 input: 2 float32"),
])
def test_each_set_up_is_named(runs, name, status, stage, device, message):
    r = runs[name]
    assert (r.status, r.stage, r.device) == (status, stage, device), r
    assert message in r.message, r.message


def test_sizes_come_from_the_meta_device(runs):
    assert runs["big"].input_bytes == 65536 * 65536 * 4 and runs["big"].parameter_bytes == 0
    assert runs["good"].input_bytes == 16 * 64 * 4


def test_a_folder_lists_good_and_bad_files(folder, capsys):
    assert main(["problems", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "good " in out and "  ok  " in out and "malformed     BAD" in out
    assert "10 problem file(s): 9 good, 1 bad (read statically" in out


def test_problems_run_names_what_fails_and_exits_1(tmp_path, capsys):
    for name in ("big", "needs_pkg", "gpu", "prints"):
        (tmp_path / f"{name}.py").write_text(FILES[name])
    (tmp_path / "malformed.py").write_text("import torch\n")
    assert main(["problems", str(tmp_path), "--run"]) == 1
    out = capsys.readouterr().out
    assert "hello" not in out and "raw" not in out             # a problem's prints are dropped
    assert "set-up FAILED: line 2: imports 'not_a_package_anywhere'" in out
    assert "set-up NEEDS A GPU" in out and "malformed     BAD" in out
    assert "on the meta device (too large for the CPU check)" in out
    assert "5 problem file(s): 2 good, 2 bad, 1 whose set-up needs a GPU" in out


def test_the_built_in_problems_set_up(runs):
    built = {k: r for k, r in runs.items() if k.startswith("builtin:")}
    assert len(built) == 5 and all(r.ok for r in built.values()), built
    assert built["builtin:softmax"].device == "meta"               # 1 GiB: over the CPU budget
    assert built["builtin:matmul"].device == "cpu"
    assert built["builtin:layernorm"].parameter_bytes == 2 * 64 * 256 * 256 * 4


def test_bad_run_flags(capsys, folder):
    assert main(["problems", str(folder / "good.py"), "--run", "--jobs", "0"]) == 2
    assert "jobs must be >= 1" in capsys.readouterr().err
