"""Problems in KernelBench format, and the modules that candidates and problems are run as.

A problem file defines ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``.
Loading is static (the file is parsed, not run), so a malformed file fails fast on the CPU with
an error that names the file and what is missing or of the wrong kind (a Model that is not an
nn.Module class, or has no forward). The file runs only inside evaluation workers, so an error
raised when it runs (a failed import, a get_inputs() that returns the wrong thing) shows in the
worker's set-up, on the GPU machine.

Optional module-level names a problem may set (literals only):
    DISTRIBUTIONS = ("problem", "offset", ...)   # input distributions that apply to it
"""
from __future__ import annotations

import ast
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from evokernel.errors import ProblemError

_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _builtin_dir() -> Path:
    import evokernel.problems as pkg  # installed as a package (pyproject maps problems/)
    return Path(pkg.__file__).resolve().parent


@dataclass(frozen=True)
class Problem:
    """A reference problem.

    Attributes:
        name: the file's stem, e.g. "softmax".
        path: the problem file.
        source: its text.
        seed_source: text of its seed kernel (``seeds/<name>.py`` beside it, or
            ``seeds/nvrtc/<name>.py`` for the NVRTC form), or None.
        distributions: the input distributions it declares, or None for the gate's default.
    """

    name: str
    path: Path
    source: str
    seed_source: str | None = None
    distributions: tuple[str, ...] | None = None


def builtin_names() -> list[str]:
    """Names of the built-in problems (``evokernel run NAME`` accepts these)."""
    d = _builtin_dir()
    return sorted(p.stem for p in d.glob("*.py") if p.name != "__init__.py")


def load_problem(spec: str | Path, seed: str | Path | None = None, *,
                 form: str = "load_inline") -> Problem:
    """Load one problem from a built-in name or a KernelBench-format file path.

    Args:
        spec: a built-in name ("softmax") or a path to a ``.py`` file.
        seed: optional path to a seed kernel file; default ``seeds/<stem>.py`` beside the file.
        form: the candidate form the seed should have (SearchConfig.candidate_form): "nvrtc"
            takes ``seeds/nvrtc/<stem>.py`` when there is one (else ``seeds/<stem>.py``);
            "load_inline" and "any" take ``seeds/<stem>.py``. Ignored when ``seed`` is given.
    Raises:
        ProblemError: no such file or name, the file is a folder, or the file is malformed.
    """
    path = Path(spec)
    if not path.exists() and path.suffix != ".py" and "/" not in str(spec):
        builtin = _builtin_dir() / f"{spec}.py"
        if builtin.is_file():
            path = builtin
        else:
            raise ProblemError(f"{spec}: no such problem file, and not a built-in problem "
                               f"(built-ins: {', '.join(builtin_names())})")
    if path.is_dir():
        raise ProblemError(f"{path}: is a folder; pass one problem file (a suite takes folders)")
    if not path.is_file():
        raise ProblemError(f"{path}: no such problem file")
    source = _read(path)
    distributions = _validate(path, source, required=_REQUIRED)
    seed_path = Path(seed) if seed else seed_file(path, form)
    seed_source = None
    if seed is not None or seed_path.is_file():
        if not seed_path.is_file():
            raise ProblemError(f"{seed_path}: no such seed kernel file")
        seed_source = _read(seed_path)
        _validate(seed_path, seed_source, required=("ModelNew",))
    return Problem(name=path.stem, path=path.resolve(), source=source, seed_source=seed_source,
                   distributions=distributions)


def seed_file(problem_path: Path, form: str = "load_inline") -> Path:
    """The seed kernel file of a problem for a candidate form (see load_problem); the path of
    the load_inline seed when the form has none (it may not exist either)."""
    seeds = Path(problem_path).parent / "seeds"
    nvrtc = seeds / "nvrtc" / Path(problem_path).name
    return nvrtc if form == "nvrtc" and nvrtc.is_file() else seeds / Path(problem_path).name


def problem_files(folder: str | Path) -> list[Path]:
    """The problem files under ``folder`` (KernelBench's ``level1/...`` layout or ours), sorted,
    without ``__init__.py`` and ``seeds/`` folders."""
    path = Path(folder)
    return sorted(p for p in path.rglob("*.py")
                  if p.name != "__init__.py" and "seeds" not in p.relative_to(path).parts[:-1])


def load_each(spec: str | Path) -> list[tuple[Path, Problem | ProblemError]]:
    """Every problem file named by ``spec`` (a file, a built-in name or a folder) with its
    Problem, or the ProblemError that says what is wrong with it: good and bad files alike.

    Raises:
        ProblemError: ``spec`` names no file, or a folder that holds no problem file.
    """
    path = Path(spec)
    if not path.is_dir():
        try:
            problem = load_problem(spec)
        except ProblemError as e:
            if not path.is_file():
                raise
            return [(path, e)]
        return [(problem.path, problem)]
    files = problem_files(path)
    if not files:
        raise ProblemError(f"{path}: no problem files (*.py) in this folder")
    out: list[tuple[Path, Problem | ProblemError]] = []
    for f in files:
        try:
            out.append((f, load_problem(f)))
        except ProblemError as e:
            out.append((f, e))
    return out


def load_problems(spec: str | Path) -> list[Problem]:
    """Load a problem file, or every problem file under a folder (see ``problem_files``).

    Raises:
        ProblemError: naming every malformed file, or when the folder holds no problem.
    """
    if not Path(spec).is_dir():
        return [load_problem(spec)]
    loaded = load_each(spec)
    errors = [str(p) for _, p in loaded if isinstance(p, ProblemError)]
    if errors:
        raise ProblemError("malformed problem files:\n  " + "\n  ".join(errors))
    return [p for _, p in loaded if isinstance(p, Problem)]


def exec_module(source: str, module_name: str, filename: str) -> types.ModuleType:
    """Run ``source`` as a fresh module registered under ``module_name`` and return it.

    Used only inside evaluation workers: problem and candidate code runs there and nowhere else.
    """
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)
    return module


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(f"{path}: cannot read: {e}") from e


def _validate(path: Path, source: str, required: tuple[str, ...]) -> tuple[str, ...] | None:
    """Check statically that ``source`` defines ``required`` at top level; return its declared
    DISTRIBUTIONS (or None)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise ProblemError(f"{path}:{e.lineno}: syntax error: {e.msg}") from e
    defined: set[str] = set()
    distributions = None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    defined.add(t.id)
                    if t.id == "DISTRIBUTIONS":
                        distributions = _literal_names(path, node.value)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
    missing = [name for name in required if name not in defined]
    if missing:
        what = ", ".join(f"{m}()" if m.startswith("get_") else f"class {m}" for m in missing)
        raise ProblemError(f"{path}: no {what} (a KernelBench-format file defines "
                           f"{', '.join(required)})")
    for name in required:
        _check_shape(path, tree, name)
    return distributions


def _check_shape(path: Path, tree: ast.Module, name: str) -> None:
    message = definition_fault(tree, name)
    if message is not None:
        raise ProblemError(f"{path}: {message}")


def definition_fault(tree: ast.Module, name: str) -> str | None:
    """What is wrong with the top-level definition of ``name`` in a parsed problem or candidate
    file, as far as can be told without running it, or None.

    ``Model``/``ModelNew`` must be a class deriving (through classes of the file) from
    ``Module``, with a ``forward``; ``get_*`` names must be functions. A name that is imported
    or assigned, or a class deriving from an imported class other than Module, is not judged
    (running the file tells). A name that is not defined at all is not judged here either.
    """
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                             ast.AsyncFunctionDef))}
    kind = "class" if name in classes else "function" if name in functions else None
    if name.startswith("get_"):
        return f"{name} must be a function, not a class" if kind == "class" else None
    if kind == "function":
        return f"{name} must be a class deriving from torch.nn.Module, not a function"
    if kind is None:
        return None
    seen: set[str] = set()
    todo, is_module, has_forward, unknown_base = [name], False, False, False
    while todo:
        cls = classes[todo.pop()]
        if cls.name in seen:
            continue
        seen.add(cls.name)
        has_forward |= any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and n.name == "forward" for n in cls.body)
        for base in cls.bases:
            base_name = ast.unparse(base)
            if base_name.split(".")[-1] == "Module":
                is_module = True
            elif base_name in classes:
                todo.append(base_name)
            else:
                unknown_base = True
    if unknown_base:
        return None
    if not is_module:
        return f"class {name} must derive from torch.nn.Module"
    if not has_forward:
        return f"class {name} has no forward()"
    return None


def _literal_names(path: Path, node: ast.expr) -> tuple[str, ...]:
    from evokernel.config import KNOWN_DISTRIBUTIONS
    try:
        value = ast.literal_eval(node)
    except ValueError as e:
        raise ProblemError(f"{path}: DISTRIBUTIONS must be a literal tuple of names") from e
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        raise ProblemError(f"{path}: DISTRIBUTIONS must be a tuple of names")
    unknown = [v for v in value if v not in KNOWN_DISTRIBUTIONS]
    if unknown:
        raise ProblemError(f"{path}: DISTRIBUTIONS names unknown {unknown}; "
                           f"known: {list(KNOWN_DISTRIBUTIONS)}")
    return tuple(value)
