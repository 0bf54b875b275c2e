"""Candidate forms: how a kernel file builds its GPU code, told by what it calls.

    form_of(tree)            the CandidateForm of a parsed module (FORMS order), or None
    form_name(source)        "load_inline", "nvrtc" or None, for source text (never raises)
    nvrtc_calls(source)      the ``compile_kernels`` calls whose arguments are literals

Two forms (FORMS):

* ``load_inline``: a PyTorch C++/CUDA extension built with
  ``torch.utils.cpp_extension.load_inline`` (nvcc, the host compiler, PyTorch's headers);
* ``nvrtc``: CUDA source compiled with NVRTC by ``evokernel.nvrtc.compile_kernels``, its kernels
  launched from Python (evokernel.nvrtc).

A file that calls both is built as ``load_inline`` (its module runs in the build step, and its
NVRTC compiles with it). The build step compiles an NVRTC file ahead without running it: the
arguments of its ``compile_kernels`` calls are read from the syntax tree (string literals,
names bound once at module level to such values, ``+`` of them, f-strings of them, lists and
tuples of them). A call whose arguments need the module to run is left to the GPU worker, which
compiles it when the module is imported (NVRTC takes well under a second).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CandidateForm:
    """A way for a candidate file to build its GPU code, recognized by the names it uses.

    name: the form's name (SearchConfig.candidate_form's values, besides "any").
    uses: function or attribute names whose use marks the form (``load_inline`` matches
        ``load_inline(...)``, ``cpp_extension.load_inline(...)`` and an imported alias).
    how: what a file of this form does, for messages.
    """

    name: str
    uses: tuple[str, ...]
    how: str


FORMS: tuple[CandidateForm, ...] = (
    CandidateForm("load_inline", ("load_inline",),
                  "builds its CUDA with torch.utils.cpp_extension.load_inline(...)"),
    CandidateForm("nvrtc", ("compile_kernels",),
                  "compiles its CUDA with evokernel.nvrtc.compile_kernels(...) (NVRTC)"),
)
FORM_NAMES: tuple[str, ...] = tuple(f.name for f in FORMS)


def used_names(tree: ast.Module) -> set[str]:
    """Names the module refers to, as a plain name or an attribute, with imported aliases
    resolved to the name they import."""
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update(a.name for a in node.names)
    return used


def form_of(tree: ast.Module) -> CandidateForm | None:
    """The first form in FORMS whose names the module uses, or None."""
    used = used_names(tree)
    return next((f for f in FORMS if used & set(f.uses)), None)


def form_name(source: str) -> str | None:
    """The form name of ``source`` (see form_of); None when it uses none or does not parse."""
    try:
        form = form_of(ast.parse(source))
    except (SyntaxError, ValueError):
        return None
    return form.name if form else None


@dataclass(frozen=True)
class NvrtcCall:
    """A ``compile_kernels`` call read from the syntax tree: its CUDA ``source``, kernel
    ``names`` and ``options``, and the file ``line`` it is on."""

    source: str
    names: tuple[str, ...]
    options: tuple[str, ...]
    line: int


class _Unresolved(Exception):
    pass


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Names bound exactly once in the whole module, by a plain module-level assignment."""
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores[node.id] = stores.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for n in node.names:
                stores[n] = stores.get(n, 0) + 2
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and stores[node.targets[0].id] == 1:
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.value is not None and stores[node.target.id] == 1:
            out[node.target.id] = node.value
    return out


def _value(node: ast.expr, consts: dict[str, ast.expr], depth: int = 0) -> Any:
    """The value of a literal expression (see the module docstring). Raises: _Unresolved."""
    if depth > 50:
        raise _Unresolved
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return _value(consts[node.id], consts, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        return tuple(_value(e, consts, depth + 1) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, consts, depth + 1), _value(node.right, consts, depth + 1)
        if isinstance(left, type(right)) and isinstance(left, (str, tuple)):
            return left + right
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                if v.conversion != -1 or v.format_spec is not None:
                    raise _Unresolved
                parts.append(str(_value(v.value, consts, depth + 1)))
            else:
                parts.append(str(_value(v, consts, depth + 1)))
        return "".join(parts)
    raise _Unresolved


def _is_compile_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "compile_kernels") or \
        (isinstance(f, ast.Attribute) and f.attr == "compile_kernels")


def _aliases(tree: ast.Module) -> set[str]:
    """Local names of ``compile_kernels`` imported under another name."""
    return {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            for a in n.names if a.name == "compile_kernels" and a.asname}


def nvrtc_calls(source: str) -> tuple[tuple[NvrtcCall, ...], tuple[int, ...]]:
    """The ``compile_kernels`` calls of ``source`` (an alias of it included), in file order.

    Returns: (the calls whose arguments are literals, the lines of those whose arguments
        need the module to run). Raises: SyntaxError when the source does not parse.
    """
    tree = ast.parse(source)
    consts = _module_constants(tree)
    aliases = _aliases(tree)
    resolved: list[NvrtcCall] = []
    deferred: list[int] = []
    for node in ast.walk(tree):
        if not (_is_compile_call(node) or (isinstance(node, ast.Call) and isinstance(
                node.func, ast.Name) and node.func.id in aliases)):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        src = node.args[0] if node.args else kw.get("source")
        names = node.args[1] if len(node.args) > 1 else kw.get("names")
        options = kw.get("options")
        try:
            if src is None or names is None or len(node.args) > 2 or \
                    any(k.arg is None for k in node.keywords):
                raise _Unresolved
            text, ns = _value(src, consts), _value(names, consts)
            opts = _value(options, consts) if options is not None else ()
            ns = (ns,) if isinstance(ns, str) else ns
            if not isinstance(text, str) or not isinstance(ns, tuple) or not ns \
                    or not all(isinstance(n, str) for n in ns) \
                    or not isinstance(opts, tuple) or not all(isinstance(o, str) for o in opts):
                raise _Unresolved
        except _Unresolved:
            deferred.append(node.lineno)
            continue
        resolved.append(NvrtcCall(text, ns, opts, node.lineno))
    resolved.sort(key=lambda c: c.line)
    return tuple(resolved), tuple(sorted(deferred))
