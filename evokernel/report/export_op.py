"""``evokernel export RUN_DIR --op NAME -o DIR``: a run's best kernel as an installable PyTorch
custom operator package (no GPU needed to write it).

    export_op(run_dir, op, out_dir)        write the package; None when nothing was accepted
    problem_spec(source, filename)         the problem's inputs and output, found on the meta device
    check_op_name(op)                      a valid op name, or ConfigError

The package (DIR)::

    pyproject.toml   evokernel-op-NAME, one package NAME
    README.md        its verdict, what it accepts, the `evokernel check` commands that reproduce it
    example.py       call it, compare it with the reference, inside torch.compile (GPU)
    NAME/__init__.py the op evokernel::NAME (evokernel.report.op_templates.OP_MODULE)
    NAME/kernel.py   the candidate file, unchanged
    NAME/reference.py the problem file, unchanged
    NAME/spec.json   inputs (name, kind, shape, dtype), output (shape, dtype), verdict, audit

The shapes come from running the problem's ``get_inputs``, ``get_init_inputs`` and
``Model.forward`` with ``torch.device("meta")`` as the default device: no memory is allocated
and no kernel runs, so a 4096x65536 problem costs nothing. That runs the problem file (the
user's own, kept in the run folder) in this process.
"""
from __future__ import annotations

import ast
import json
import keyword
import re
from pathlib import Path
from typing import Any

from evokernel.build.sass import audit_text
from evokernel.errors import ConfigError, EvokernelError
from evokernel.report import op_templates

OP_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
#: The gate's default tolerance factor (evokernel.config.GateConfig), used by example.py.
DEFAULT_TOLERANCE = 16.0


def check_op_name(op: str) -> str:
    """``op`` when it can name the operator and its Python package (lower-case letters, digits
    and _, not starting with a digit, not a Python keyword). Raises: ConfigError saying why."""
    if not OP_NAME.match(op) or keyword.iskeyword(op):
        raise ConfigError(f"--op {op!r}: an op name is lower-case letters, digits and _, not "
                          "starting with a digit and not a Python keyword (e.g. softmax)")
    return op


def forward_names(source: str, count: int) -> list[str]:
    """The parameter names of ``Model.forward`` in a problem's source (after ``self``), when
    there are ``count`` plain ones that make valid, distinct names; else x0, x1, ..."""
    fallback = [f"x{i}" for i in range(count)]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return fallback
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "forward":
                    names = [a.arg for a in f.args.args[1:]]
                    ok = (len(names) == count and len(set(names)) == count
                          and all(n.isidentifier() and not keyword.iskeyword(n)
                                  and n not in ("args", "torch") for n in names))
                    return names if ok else fallback
    return fallback


def problem_spec(source: str, filename: str) -> dict[str, Any]:
    """The inputs and the output of a problem, found on the meta device (module docstring).

    Returns: {"inputs": [{"name", "kind": "tensor"|"int"|"float"|"bool", "shape", "dtype"}],
        "output": {"shape", "dtype"}} (shapes as lists of ints, dtypes as "float32").
    Raises: EvokernelError naming ``filename``: the problem fails on the meta device, takes an
        input that is not a tensor or a number, its first input is not a tensor, or it returns
        something other than one tensor.
    """
    import torch

    from evokernel.problem import exec_module

    def meta(step: str, run: Any) -> Any:
        try:
            with torch.device("meta"), torch.no_grad():
                return run()
        except Exception as e:  # the problem's own code: any error is named with the file
            raise EvokernelError(f"{filename}: the problem does not run on the meta device "
                                 f"({step}), so its shapes are unknown ({type(e).__name__}: "
                                 f"{e})") from e
    module = meta("loading it", lambda: exec_module(source, "evokernel_export_problem",
                                                    filename))
    inputs = list(meta("get_inputs()", module.get_inputs))
    names = forward_names(source, len(inputs))
    specs = []
    for i, (name, x) in enumerate(zip(names, inputs)):
        if isinstance(x, torch.Tensor):
            specs.append({"name": name, "kind": "tensor", "shape": list(x.shape),
                          "dtype": str(x.dtype).removeprefix("torch.")})
        elif isinstance(x, (bool, int, float)):
            specs.append({"name": name, "kind": type(x).__name__, "value": x})
        else:
            raise EvokernelError(f"{filename}: input {i} of get_inputs() is a "
                                 f"{type(x).__name__}; an exported op takes tensors and numbers")
    if not specs or specs[0]["kind"] != "tensor":
        raise EvokernelError(f"{filename}: the first input of get_inputs() must be a tensor "
                             "for an exported op (it gives the device)")
    out = meta("Model.forward", lambda: module.Model(*module.get_init_inputs())(*inputs))
    if not isinstance(out, torch.Tensor):
        raise EvokernelError(f"{filename}: Model.forward returns {type(out).__name__}; an "
                             "exported op returns one tensor")
    return {"inputs": specs, "output": {"shape": list(out.shape),
                                         "dtype": str(out.dtype).removeprefix("torch.")}}


def _signature(inputs: list[dict[str, Any]]) -> tuple[str, str]:
    """(the op's annotated parameters, its argument tuple's text) for the templates."""
    kinds = {"tensor": "torch.Tensor", "int": "int", "float": "float", "bool": "bool"}
    params = ", ".join(f"{i['name']}: {kinds[i['kind']]}" for i in inputs)
    return params, "".join(f"{i['name']}, " for i in inputs).rstrip(" ")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _verdict_lines(res: Any, device: dict[str, Any]) -> list[str]:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.4f} ms"
    lines = [f"- {res.verdict.value} ({res.reason.value}): {res.detail or '-'}",
             f"- speedup {res.speedup:.3f}x over PyTorch eager ({ms(res.reference_ms)} -> "
             f"{ms(res.candidate_ms)})" + (f", {res.compile_speedup:.3f}x over torch.compile"
                                           if res.compile_speedup else ""),
             f"- error ratios (candidate error / PyTorch FP32 error): norm "
             f"{_num(res.norm_error_ratio)}, max "
             f"{_num(res.max_error_ratio)}, bound "
             f"{_num(res.tolerance_factor)}"]
    if device:
        lines.append(f"- measured on {device.get('device', '?')}, torch {device.get('torch', '?')}"
                     f", CUDA {device.get('cuda', '?')}")
    return lines


def export_op(run_dir: str | Path, op: str, out_dir: str | Path) -> Path | None:
    """Write the best accepted kernel of ``run_dir`` as the package ``out_dir`` (module
    docstring). Returns: ``out_dir``, or None when the run accepted no kernel.
    Raises: ConfigError for a bad op name, a run folder that cannot be read, or an
        ``out_dir`` that exists and is not empty; EvokernelError naming the problem file
        when its shapes cannot be found (problem_spec)."""
    from evokernel.runs.store import RunStore
    check_op_name(op)
    out, run_dir = Path(out_dir), Path(run_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: exists and is not an empty folder; choose a new -o")
    store = RunStore(run_dir, read_only=True)
    try:
        best = store.best()
        meta = store.meta()
    finally:
        store.close()
    if best is None:
        return None
    cand, res = best
    problem_file = run_dir / "problem.py"
    if not problem_file.is_file():
        raise ConfigError(f"{problem_file}: missing; the run folder keeps its problem there")
    problem_source = problem_file.read_text(encoding="utf-8")
    spec = problem_spec(problem_source, str(problem_file))
    problem = meta.get("problem", {}).get("name", "problem")
    device = meta.get("device") if isinstance(meta.get("device"), dict) else {}
    spec.update(op=f"evokernel::{op}", problem=problem, run=str(run_dir.resolve()),
                candidate=cand.id, result=res.to_dict(), device=device)
    params, args = _signature(spec["inputs"])
    package = out / op
    package.mkdir(parents=True, exist_ok=True)
    (package / "kernel.py").write_text(cand.source, encoding="utf-8")
    (package / "reference.py").write_text(problem_source, encoding="utf-8")
    (package / "spec.json").write_text(json.dumps(spec, indent=1) + "\n")
    (package / "__init__.py").write_text(op_templates.OP_MODULE.substitute(
        op=op, run=run_dir.name, params=params, args=args))
    tolerance = res.tolerance_factor or DEFAULT_TOLERANCE
    (out / "example.py").write_text(op_templates.EXAMPLE.substitute(op=op, tolerance=tolerance))
    (out / "pyproject.toml").write_text(op_templates.PYPROJECT.substitute(op=op, problem=problem))
    shapes = "\n".join(f"- `{i['name']}`: " + (f"{i['dtype']} {i['shape']} on a CUDA device"
                                                if i["kind"] == "tensor" else f"a {i['kind']}")
                       for i in spec["inputs"])
    shapes += (f"\n- returns {spec['output']['dtype']} {spec['output']['shape']}")
    (out / "README.md").write_text(op_templates.README.substitute(
        op=op, problem=problem, run=run_dir.name, candidate=cand.id,
        verdict="\n".join(_verdict_lines(res, device)), shapes=shapes, audit=audit_text(res.precision_audit, res.flags)
        or "not recorded in the run (check the kernel again to audit it)"))
    return out
