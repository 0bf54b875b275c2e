"""A kernel (candidate) file's own faults, found by reading it, before any build or GPU.

    kernel_faults(path, source) -> list[Fault]

Errors (the file cannot pass, so it is never sent to a build or a GPU):
    - a Python syntax error (its line);
    - no ``ModelNew`` at module level, or a ``ModelNew`` that is not an ``nn.Module`` class with
      a ``forward`` (evokernel.problem.definition_fault);
    - no known way of building GPU code: the file uses none of the calls of FORMS
      (evokernel.build.forms: ``torch.utils.cpp_extension.load_inline`` or
      ``evokernel.nvrtc.compile_kernels``).
Warnings (the precision gate decides, on the GPU): every lower-precision or fast-math construct
that the source scan finds (evokernel.gate.scan), with the line it is on.

A new candidate form is one more ``CandidateForm`` in evokernel.build.forms.FORMS, named by the
calls that mark it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from evokernel.build.forms import FORMS, CandidateForm, form_of
from evokernel.gate.scan import scan_source, strip_comments
from evokernel.problem import definition_fault
from evokernel.records import Reason

__all__ = ["FORMS", "CandidateForm", "Fault", "LOWER_PRECISION", "form_of", "kernel_faults",
           "scan_warnings"]


#: Scan families whose use lowers an FP32 reference's precision (evokernel.gate.scan).
LOWER_PRECISION = ("fp16", "bf16", "fp8", "tf32", "mathmode", "autocast")


@dataclass(frozen=True)
class Fault:
    """One fault of a kernel file.

    line: 1-based line in the file, or None when the fault is the whole file's.
    severity: "error" (the file cannot pass; not built or gated) or "warning" (the gate
        decides on the GPU).
    reason: the Reason an error is recorded with (``check --json``); None for a warning.
    """

    path: Path
    line: int | None
    message: str
    severity: str = "error"
    reason: Reason | None = Reason.NO_CODE

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.severity}: {self.message}"


def kernel_faults(path: Path, source: str) -> list[Fault]:
    """Every fault of the kernel file ``path`` with text ``source``, errors first.

    Returns an empty list for a file that may go on to be built.
    """
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        return [Fault(path, e.lineno, f"syntax error: {e.msg}", reason=Reason.BUILD_ERROR)]
    errors: list[Fault] = []
    defined = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    if "ModelNew" not in defined:
        errors.append(Fault(path, None, "no class ModelNew at module level (a candidate file "
                                        "defines ModelNew(nn.Module) with the reference "
                                        "Model's constructor and forward)"))
    else:
        message = definition_fault(tree, "ModelNew")
        if message is not None:
            line = next((n.lineno for n in tree.body if isinstance(n, ast.ClassDef)
                         and n.name == "ModelNew"), None)
            errors.append(Fault(path, line, message))
    if form_of(tree) is None:
        ways = "; or ".join(f"{f.how} ({f.name})" for f in FORMS)
        errors.append(Fault(path, None, f"no GPU code is built: a candidate file {ways}"))
    return errors + scan_warnings(path, source)


def scan_warnings(path: Path, source: str) -> list[Fault]:
    """The source scan's findings (evokernel.gate.scan) as warnings, each on the first line
    (comments ignored) that holds its token."""
    lines = strip_comments(source).splitlines()
    out = []
    for flag in scan_source(source):
        family, _, token = flag.partition(":")
        line = next((i for i, text in enumerate(lines, 1) if token and token in text), None)
        if family in LOWER_PRECISION:
            what = (f"{family} ({token}): lower precision than the FP32 reference; the gate "
                    "rejects it unless the result keeps FP32 accuracy")
        else:
            what = (f"{family} ({token}): changes the rounding of some operations; the gate "
                    "decides")
        out.append(Fault(path, line, what, severity="warning", reason=None))
    return out
