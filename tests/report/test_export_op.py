"""`evokernel export --op`: the custom operator package, on the CPU. Its files are written (the
recorded run left unchanged), the op module imports without building the kernel, its fake gives
the output's shape and dtype on meta and fake tensors (what torch.compile traces with), and its
input check names the input and what is wrong. Running the kernel needs the H200."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
import uuid

import pytest
import torch

from evokernel.cli.main import main
from evokernel.config import RunConfig
from evokernel.errors import ConfigError, EvokernelError
from evokernel.problem import Problem
from evokernel.report.export_op import check_op_name, export_op, forward_names, problem_spec
from evokernel.runs.store import RunStore
from tests.support.runstores import RECORDED, accepted, files_state, kernel


def import_package(folder, op):
    """Import the exported package ``op`` from ``folder`` (a fresh name each time)."""
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(op)
    finally:
        sys.path.remove(str(folder))


@pytest.fixture
def softmax_package(tmp_path, capsys):
    """The recorded H200 softmax run exported under an op name unique to this test: (folder,
    op name, what export printed)."""
    op = f"softmax_{uuid.uuid4().hex[:8]}"
    before = files_state(RECORDED)
    assert main(["export", str(RECORDED), "--op", op, "-o", str(tmp_path / "pkg")]) == 0
    assert files_state(RECORDED) == before
    return tmp_path / "pkg", op, capsys.readouterr().out


def test_the_package_files(softmax_package):
    out, op, printed = softmax_package
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "example.py",
                                                     "pyproject.toml", op]
    assert sorted(p.name for p in (out / op).iterdir()) == ["__init__.py", "kernel.py",
                                                            "reference.py", "spec.json"]
    best = RunStore(RECORDED, read_only=True).best()[0]
    assert (out / op / "kernel.py").read_text() == best.source
    assert (out / op / "reference.py").read_text() == (RECORDED / "problem.py").read_text()
    spec = json.loads((out / op / "spec.json").read_text())
    assert spec["inputs"] == [{"name": "x", "kind": "tensor", "shape": [4096, 65536],
                               "dtype": "float32"}]
    assert spec["output"] == {"shape": [4096, 65536], "dtype": "float32"}
    assert spec["op"] == f"evokernel::{op}" and spec["candidate"] == best.id
    assert spec["result"]["verdict"] == "accept"
    readme = (out / "README.md").read_text()
    assert f"evokernel check {op}/reference.py {op}/kernel.py" in readme
    assert "--sanitize" in readme and "--robustness" in readme
    assert "float32 [4096, 65536] on a CUDA device" in readme
    ast.parse((out / "example.py").read_text())            # valid Python
    assert "torch.compile(Wrapped(), fullgraph=True)" in (out / "example.py").read_text()
    assert f'packages = ["{op}"]' in (out / "pyproject.toml").read_text()
    assert f"evokernel check {out / op / 'reference.py'} {out / op / 'kernel.py'}" in printed


def test_the_op_imports_and_its_fake_gives_the_output(softmax_package):
    out, op, _ = softmax_package
    pkg = import_package(out, op)
    assert not pkg._MODELS                             # nothing was built by importing it
    x = torch.empty(4096, 65536, device="meta")
    for call in (getattr(torch.ops.evokernel, op), getattr(pkg, op)):
        y = call(x)
        assert y.shape == (4096, 65536) and y.dtype == torch.float32 and y.device.type == "meta"
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():                             # what torch.compile traces with
        f = torch.empty(4096, 65536, device="cuda")
        y = getattr(torch.ops.evokernel, op)(f)
        assert y.shape == (4096, 65536) and y.device.type == "cuda"
    schema = str(getattr(torch.ops.evokernel, op).default._schema)
    assert schema == f"evokernel::{op}(Tensor x) -> Tensor"


def test_the_op_names_what_is_wrong_with_an_input(softmax_package):
    out, op, _ = softmax_package
    pkg = import_package(out, op)
    call = getattr(torch.ops.evokernel, op)
    with pytest.raises(ValueError, match=rf"evokernel::{op}: input 0 \(x\) must have shape "
                                         r"\[4096, 65536\] .* got \[4096, 10\]"):
        call(torch.empty(4096, 10, device="meta"))
    with pytest.raises(TypeError, match=r"input 0 \(x\) must be torch.float32, got "
                                        r"torch.float64"):
        call(torch.empty(4096, 65536, device="meta", dtype=torch.float64))
    with pytest.raises(ValueError, match=r"input 0 \(x\) must be on a CUDA device, got cpu"):
        call(torch.zeros(4096, 65536))
    with pytest.raises(ValueError, match="takes 1 inputs, got 2"):
        pkg.check_inputs(torch.empty(1), torch.empty(1))
    with pytest.raises(TypeError, match="must be a torch.Tensor, got list"):
        pkg.check_inputs([1.0])


SCALED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, 3)

    def forward(self, inp, alpha):
        return self.linear(inp).sum(dim=0) * alpha


def get_inputs():
    return [torch.randn(8, 5), 2.0]


def get_init_inputs():
    return [5]
'''


def make_run(tmp_path, problem_source, *, accept=True):
    run = tmp_path / "run"
    store = RunStore.create(run, RunConfig(run_dir=str(run)),
                            Problem(name="scaled", path=tmp_path / "p.py",
                                    source=problem_source))
    c = kernel("k", "idea")
    store.add_candidate(c)
    if accept:
        store.add_result(accepted(c, 1.0))
    store.close()
    return run


def test_numbers_and_parameters(tmp_path):
    """A forward with a number input, a model with parameters, an output of another shape."""
    op = f"scaled_{uuid.uuid4().hex[:8]}"
    out = export_op(make_run(tmp_path, SCALED), op, tmp_path / "pkg")
    spec = json.loads((out / op / "spec.json").read_text())
    assert [i["kind"] for i in spec["inputs"]] == ["tensor", "float"]
    assert spec["output"] == {"shape": [3], "dtype": "float32"}
    import_package(out, op)
    call = getattr(torch.ops.evokernel, op)
    assert str(call.default._schema) == f"evokernel::{op}(Tensor inp, float alpha) -> Tensor"
    assert call(torch.empty(8, 5, device="meta"), 2.0).shape == (3,)


def test_nothing_accepted_and_bad_requests(tmp_path, capsys):
    run = make_run(tmp_path, SCALED, accept=False)
    assert main(["export", str(run), "--op", "scaled", "-o", str(tmp_path / "o")]) == 1
    assert "no kernel was accepted" in capsys.readouterr().err
    for bad in ("Softmax", "1x", "class", "a-b", ""):
        with pytest.raises(ConfigError, match="an op name is lower-case"):
            check_op_name(bad)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'full'}: exists and is not an empty"):
        export_op(run, "scaled", tmp_path / "full")
    assert main(["export", str(run), "--op", "Bad", "-o", str(tmp_path / "o2")]) == 2


def test_problem_spec_errors_name_the_file():
    tuple_out = SCALED.replace("return self.linear(inp).sum(dim=0) * alpha",
                               "return inp, inp")
    with pytest.raises(EvokernelError, match="p.py: Model.forward returns tuple"):
        problem_spec(tuple_out, "p.py")
    listed = SCALED.replace("return [torch.randn(8, 5), 2.0]", "return [[1, 2], 2.0]")
    with pytest.raises(EvokernelError, match="p.py: input 0 of get_inputs.. is a list"):
        problem_spec(listed, "p.py")
    broken = SCALED.replace("return [5]", "return [5, 6, 7]")
    with pytest.raises(EvokernelError, match=r"p.py: the problem does not run on the meta "
                                             r"device \(Model.forward\).*TypeError"):
        problem_spec(broken, "p.py")


def test_forward_names():
    assert forward_names(SCALED, 2) == ["inp", "alpha"]
    assert forward_names(SCALED, 3) == ["x0", "x1", "x2"]
    assert forward_names("class Model:\n    def forward(self, args): pass\n", 1) == ["x0"]
    assert forward_names("not python (", 1) == ["x0"]


def test_the_examples_error_ratio_is_the_gates(softmax_package):
    """example.py's comparison: PyTorch's own FP32 error gives 1 (or less, at the floor), an
    FP16 result thousands."""
    out, op, _ = softmax_package
    sys.path.insert(0, str(out))
    try:
        spec = importlib.util.spec_from_file_location(f"example_{op}", out / "example.py")
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
    finally:
        sys.path.remove(str(out))
    truth = torch.randn(4096, dtype=torch.float64) * 3
    fp32 = truth.float()
    assert example.error_ratio(fp32, fp32, truth) <= 1.0
    assert example.error_ratio(truth.half().float(), fp32, truth) > 1000
    assert isinstance(example.Wrapped(), torch.nn.Module)
