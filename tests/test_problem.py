"""Problem loading: built-ins, KernelBench files and folders, and errors that name the file."""
import pytest

from evokernel.errors import ProblemError
from evokernel.problem import builtin_names, load_problem, load_problems

GOOD = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8, 8)]

def get_init_inputs():
    return []
'''


def test_builtins_load_with_seed_kernels():
    names = builtin_names()
    assert set(names) == {"matmul", "conv2d", "softmax", "layernorm", "conv2d_relu_maxpool"}
    for name in names:
        p = load_problem(name)
        assert p.name == name and "class Model" in p.source
        assert p.seed_source is not None and "class ModelNew" in p.seed_source
        assert "// tune:" in p.seed_source


def test_kernelbench_file_and_folder(tmp_path):
    level = tmp_path / "level1"
    level.mkdir()
    (level / "1_relu.py").write_text(GOOD)
    (level / "2_relu.py").write_text(GOOD.replace("relu", "tanh"))
    (level / "__init__.py").write_text("")
    p = load_problem(level / "1_relu.py")
    assert p.name == "1_relu" and p.seed_source is None and p.distributions is None
    assert [q.name for q in load_problems(tmp_path)] == ["1_relu", "2_relu"]


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("def get_inputs", "def get_input"), r"no get_inputs\(\)"),
    (GOOD.replace("def get_init_inputs", "def init"), r"no get_init_inputs\(\)"),
    (GOOD.replace("class Model", "class Net"), r"no class Model"),
    (GOOD.replace("return [torch.randn(8, 8)]", "return [torch.randn(8, 8)"), r":9: syntax"),
    (GOOD + "DISTRIBUTIONS = ('problem', 'gaussian_blur')\n", r"unknown \['gaussian_blur'\]"),
])
def test_malformed_file_names_file_and_fault(tmp_path, text, message):
    f = tmp_path / "bad.py"
    f.write_text(text)
    with pytest.raises(ProblemError, match=message) as e:
        load_problem(f)
    assert str(f) in str(e.value)


def test_folder_lists_every_malformed_file(tmp_path):
    (tmp_path / "ok.py").write_text(GOOD)
    (tmp_path / "bad1.py").write_text("x = 1\n")
    (tmp_path / "bad2.py").write_text(GOOD.replace("get_inputs", "inputs"))
    with pytest.raises(ProblemError) as e:
        load_problems(tmp_path)
    assert "bad1.py" in str(e.value) and "bad2.py" in str(e.value) and "ok.py" not in str(e.value)


def test_declared_distributions_and_seed_beside_file(tmp_path):
    (tmp_path / "seeds").mkdir()
    (tmp_path / "p.py").write_text(GOOD + "DISTRIBUTIONS = ('problem', 'small_scale')\n")
    (tmp_path / "seeds" / "p.py").write_text("import torch\nclass ModelNew(torch.nn.Module):\n"
                                             "    def forward(self, x):\n        return x\n")
    p = load_problem(tmp_path / "p.py")
    assert p.distributions == ("problem", "small_scale") and "ModelNew" in p.seed_source
    assert [q.name for q in load_problems(tmp_path)] == ["p"]     # seeds/ is not a problem


@pytest.mark.parametrize("model, message", [
    ("class Model:\n    def forward(self, x):\n        return x\n",
     "class Model must derive from torch.nn.Module"),
    ("def Model():\n    pass\n", "Model must be a class deriving from torch.nn.Module"),
    ("import torch.nn as nn\nclass Model(nn.Module):\n    pass\n", "class Model has no forward"),
])
def test_a_model_of_the_wrong_kind_is_named(tmp_path, model, message):
    path = tmp_path / "bad.py"
    path.write_text(model + "def get_inputs():\n    return []\n"
                    "def get_init_inputs():\n    return []\n")
    with pytest.raises(ProblemError, match=f"bad.py: {message}"):
        load_problem(path)


def test_a_model_deriving_through_the_files_own_or_imported_classes_passes(tmp_path):
    tail = "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n"
    (tmp_path / "own.py").write_text(
        "import torch.nn as nn\nclass Base(nn.Module):\n    def forward(self, x):\n"
        "        return x\nclass Model(Base):\n    pass\n" + tail)
    (tmp_path / "imported.py").write_text(
        "from somewhere import Base\nclass Model(Base):\n    pass\n" + tail)
    assert [load_problem(tmp_path / f).name for f in ("own.py", "imported.py")] == [
        "own", "imported"]


def test_unknown_name_and_missing_paths(tmp_path):
    with pytest.raises(ProblemError, match="built-ins: .*softmax"):
        load_problem("sofmax")
    with pytest.raises(ProblemError, match="no such problem file"):
        load_problem(tmp_path / "nope.py")
    with pytest.raises(ProblemError, match="is a folder"):
        load_problem(tmp_path)
    (tmp_path / "p.py").write_text(GOOD)
    with pytest.raises(ProblemError, match="no such seed kernel"):
        load_problem(tmp_path / "p.py", seed=tmp_path / "missing.py")
    with pytest.raises(ProblemError, match="no problem files"):
        load_problems(tmp_path / "empty") if (tmp_path / "empty").mkdir() is None else None


@pytest.mark.parametrize("value", ["5", "None", "'problem'"])
def test_distributions_must_be_a_tuple_of_names(tmp_path, value):
    f = tmp_path / "p.py"
    f.write_text(GOOD + f"DISTRIBUTIONS = {value}\n")
    with pytest.raises(ProblemError, match="DISTRIBUTIONS must be"):
        load_problem(f)
