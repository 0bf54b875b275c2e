"""The layout docs/architecture.md promises, checked on the source: every package is installed,
packages import only packages below them in STAGE_ORDER, modules import no circle, and no module
reaches another module's private names. Pure AST work, no imports of the code under test."""
from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source folders and the package each installs as (pyproject's package-dir).
SOURCES = {"evokernel": ROOT / "evokernel", "evokernel.operators": ROOT / "operators",
           "evokernel.problems": ROOT / "problems"}

#: The top-level names under evokernel, lowest first: each may import its own layer and those
#: before it, never a later one (docs/architecture.md, "Where each stage lives").
STAGE_ORDER = (
    {"errors", "config", "jsonfile", "records", "precision"},
    {"problems", "problem", "problem_probe", "problem_files"},
    {"sandbox"},
    # nvrtc and build share a layer: nvrtc keys and publishes its cubins with build's cache,
    # and build compiles an NVRTC candidate ahead with nvrtc's compiler.
    {"build", "problem_run", "nvrtc"},
    {"timing"},
    {"gate"},
    {"engine", "cluster"},
    {"runs"},
    {"llm"},
    {"operators"},
    {"search"},
    {"report"},
    {"bench", "demo"},
    {"cli"},
    {"__main__"},
)
LAYER = {name: i for i, names in enumerate(STAGE_ORDER) for name in names}


def _modules() -> dict[str, Path]:
    """Every module's dotted name -> its file (a package's is its __init__.py)."""
    out = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            if "seeds" in path.relative_to(folder).parts[:-1] and package.endswith("problems"):
                continue              # seed kernels are data, loaded by path
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for each import in the file, anywhere in it
    (a function's lazy import counts: it is still a dependency)."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            taken = [a.name for a in node.names]
            found.append((module, taken, node.lineno))
            # `from evokernel.gate import trace` imports the module evokernel.gate.trace
            found += [(f"{module}.{t}", [], node.lineno) for t in taken
                      if f"{module}.{t}" in MODULES]
    return [f for f in found if f[0] == "evokernel" or f[0].startswith("evokernel.")]


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_is_installed():
    """A non-editable install (a wheel) holds only the packages pyproject lists."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert packages - listed == set(), "packages missing from pyproject's [tool.setuptools]"


def test_every_top_level_name_has_a_layer():
    tops = {_top(m) for m in MODULES} - {""}
    assert tops - set(LAYER) == set(), "add new top-level modules to STAGE_ORDER"


def test_packages_import_only_earlier_stages():
    wrong = []
    for name, path in MODULES.items():
        mine = _top(name)
        for module, _, line in _imports(name, path):
            theirs = _top(module)
            if theirs and mine and LAYER[theirs] > LAYER[mine]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({mine}) imports {module}")
    assert wrong == []


def test_no_import_circles():
    graph = defaultdict(set)
    for name, path in MODULES.items():
        for module, _, _ in _imports(name, path):
            if module in MODULES and module != name:   # a parent package counts: its __init__ runs
                graph[name].add(module)
    # Tarjan's strongly connected components (Tarjan 1972, SIAM J. Comput. 1(2)), iteratively.
    index, low, on_stack, stack, circles, counter = {}, {}, set(), [], [], [0]
    for start in sorted(MODULES):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    assert circles == []


def test_no_private_names_across_modules():
    """`from x import _name` and `x._name` on an imported evokernel module, where x is another
    module: a private name is that module's own business."""
    wrong = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = {}
        for module, taken, line in _imports(name, path):
            owner_package = module.rsplit(".", 1)[0] if module in MODULES else module
            for t in taken:
                if t.startswith("_") and not (t.startswith("__") and t.endswith("__")):
                    if module != name and not name.startswith(owner_package + "._"):
                        wrong.append(f"{path.relative_to(ROOT)}:{line} takes {module}.{t}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    aliases[a.asname or a.name] = a.name
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        aliases[a.asname] = a.name
        imported_modules = {alias for alias, real in aliases.items()
                            if any(m.endswith("." + real) or m == real for m in MODULES)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported_modules and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} reads "
                             f"{node.value.id}.{node.attr}")
    assert wrong == []


#: The house's sizes (issue 13): a module of about 400 lines, a function of about 60 lines of
#: code (its docstring not counted: a long argument list documented is not a long function).
MODULE_LINES, FUNCTION_CODE_LINES = 400, 60

#: Longer ones, each with its stated reason.
LONGER = {
    "evokernel.engine.evaluator.CudaEvaluator.__init__":
        "the set-up order is the contract: builder, workers, the wait for a free GPU, then the "
        "workers' start with nothing else running; split, the order would be read in pieces",
    "evokernel.engine.evaluator.CudaEvaluator.evaluate":
        "the build pool and the GPU threads share one queue and one result map; its closures "
        "(emit, done, gpu_loop, build_one) are the pieces",
    "evokernel.bench.run.run_bench":
        "a script-like sequence of the bench's phases, each a call; kept in one place so the "
        "report's order is the run's",
    "evokernel.bench.fidelity.fidelity_phase":
        "one measurement protocol (both methods on the same sets, in the same process, "
        "interleaved) that must be read whole to be trusted",
}


def _code_lines(node: ast.AST) -> int:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and len(body) > 1:
        body = body[1:]
    return node.end_lineno - body[0].lineno + 1


def _functions(tree: ast.AST, prefix: str):
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}.{node.name}", node
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}.{node.name}")


def test_modules_and_functions_are_small_or_say_why():
    long_modules = [f"{p.relative_to(ROOT)}: {n} lines" for p in MODULES.values()
                    if (n := len(p.read_text().splitlines())) > MODULE_LINES]
    long_functions = [f"{name}: {_code_lines(node)} lines"
                      for module, path in MODULES.items()
                      for name, node in _functions(ast.parse(path.read_text()), module)
                      if _code_lines(node) > FUNCTION_CODE_LINES and name not in LONGER]
    assert long_modules == [] and long_functions == []
    assert set(LONGER) <= {n for m, p in MODULES.items()
                           for n, _ in _functions(ast.parse(p.read_text()), m)}, \
        "a LONGER entry names a function that no longer exists"
