"""Loading the experiment scripts (experiments/*.py) as modules, by path, for the tests that call
their functions; a script's own ``import common`` finds the module loaded here first."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"


def load_experiment(name: str) -> ModuleType:
    """experiments/<name>.py as module ``name`` (registered in sys.modules, loaded once)."""
    if name in sys.modules:
        return sys.modules[name]
    if name != "common":
        load_experiment("common")
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
