"""A snapshot of evokernel's own loaded modules, so the worker can tell when candidate code
(which runs in the same process) changed the code that gates and times it, and undo it.

Watched, for every loaded ``evokernel.*`` module that is not a package (and ``__main__`` when it
is one, as the GPU worker's ``python -m evokernel.engine.worker`` is):
* each module global (by identity), and the set of global names (a new global can shadow a
  builtin that the module's functions call, such as ``abs``);
* each plain function's ``__code__``, ``__defaults__``, ``__kwdefaults__`` (its keys, and each
  value by identity, since a dict can be changed in place), closure cells and ``__wrapped__``
  function, for module functions and the methods of the module's classes (classmethods,
  staticmethods and properties' functions included);
* each such class's attributes (by identity) and the set of its attribute names (a class-level
  property can shadow an instance attribute);
* the spins of evokernel.timing.spin: ``DeviceSpin._made``'s entries and each spin's attributes.
Values are compared by identity, never with ``==``, which a planted object could answer.

Dunder names are left out: Python itself adds ``__warningregistry__`` to a module's globals when
it issues a warning. evokernel assigns no module globals or class attributes after import (no
``global`` statements; ``DeviceSpin._made`` is filled at worker set-up, before the snapshot).
An in-process check cannot stop code that patches this module or the interpreter itself; the
README's threat model says so.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Callable

_MISSING = object()


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _same(a: Any, b: Any) -> bool:
    """Identity, or for dicts the same keys each holding the identical value (keys are evokernel's
    own strings and tuples); frozensets of names by their members."""
    if a is b:
        return True
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)
    if type(a) is frozenset and type(b) is frozenset:
        return a == b
    return False


def _modules(prefix: str) -> list[tuple[str, Any]]:
    out = []
    for name, mod in sorted(sys.modules.items()):
        spec = getattr(mod, "__spec__", None)
        real = name if name != "__main__" else getattr(spec, "name", None) or ""
        if real.startswith(prefix) and mod is not None and not hasattr(mod, "__path__"):
            out.append((name, mod))
    return out


class ModuleSnapshot:
    """Taken at construction; :meth:`changed` lists what differs and puts it back."""

    def __init__(self, prefix: str = "evokernel.") -> None:
        #: (label, read, restore, saved): read() gives the current value; restore() puts it back.
        self._checks: list[tuple[str, Callable[[], Any], Callable[[], None], Any]] = []
        self._seen: set[int] = set()
        for name, mod in _modules(prefix):
            self._watch_namespace(name, mod, vars(mod))
        spin_mod = sys.modules.get(f"{prefix}timing.spin")
        if spin_mod is not None:
            made = spin_mod.DeviceSpin._made
            saved = dict(made)
            self._add(f"{prefix}timing.spin.DeviceSpin._made", lambda: dict(made),
                      lambda: (made.clear(), made.update(saved)), saved)
            for i, spin in enumerate(saved.values()):
                self._watch_attrs(f"DeviceSpin[{i}]", spin, vars(spin))

    def _add(self, label: str, read: Callable[[], Any], restore: Callable[[], None],
             saved: Any) -> None:
        self._checks.append((label, read, restore, saved))

    def _watch_attrs(self, label: str, owner: Any, namespace: Any) -> None:
        """owner's attributes by identity, and its set of attribute names."""
        names = frozenset(k for k in namespace if not _is_dunder(k))

        def restore_names(owner: Any = owner, names: frozenset[str] = names) -> None:
            for k in set(vars(owner)) - names:
                if not _is_dunder(k):
                    delattr(owner, k)
        self._add(f"{label} (names)", lambda: frozenset(k for k in vars(owner)
                                                        if not _is_dunder(k)),
                  restore_names, names)
        for k in names:
            value = namespace[k]
            self._add(f"{label}.{k}", lambda o=owner, k=k: vars(o).get(k, _MISSING),
                      lambda o=owner, k=k, v=value: setattr(o, k, v), value)

    def _watch_namespace(self, label: str, owner: Any, namespace: Any) -> None:
        self._watch_attrs(label, owner, namespace)
        for k, value in list(namespace.items()):
            if _is_dunder(k):
                continue
            fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            if isinstance(fn, types.FunctionType):
                self._watch_function(f"{label}.{k}", fn)
            elif isinstance(value, property):     # its fget/fset/fdel are read-only
                for a in ("fget", "fset", "fdel"):
                    if isinstance(getattr(value, a), types.FunctionType):
                        self._watch_function(f"{label}.{k}.{a}", getattr(value, a))
            elif isinstance(value, type) and value.__module__ == getattr(owner, "__module__",
                                                                         getattr(owner, "__name__",
                                                                                 "")):
                self._watch_namespace(f"{label}.{k}", value, vars(value))

    def _watch_function(self, label: str, fn: types.FunctionType) -> None:
        if id(fn) in self._seen:          # the same function imported into several modules
            return
        self._seen.add(id(fn))
        for attr in ("__code__", "__defaults__"):     # __closure__ is read-only; its cells below
            self._add(f"{label}.{attr}", lambda a=attr: getattr(fn, a),
                      lambda a=attr, v=getattr(fn, attr): setattr(fn, a, v), getattr(fn, attr))
        kw = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
        self._add(f"{label}.__kwdefaults__",
                  lambda: dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None,
                  lambda: setattr(fn, "__kwdefaults__", dict(kw) if kw is not None else None),
                  kw)
        for i, cell in enumerate(fn.__closure__ or ()):
            try:
                content = cell.cell_contents
            except ValueError:            # an empty cell
                continue
            self._add(f"{label}.__closure__[{i}]", lambda c=cell: c.cell_contents,
                      lambda c=cell, v=content: setattr(c, "cell_contents", v), content)
            if isinstance(content, types.FunctionType):
                self._watch_function(f"{label}.__closure__[{i}]", content)
        wrapped = getattr(fn, "__wrapped__", None)
        self._add(f"{label}.__wrapped__", lambda: getattr(fn, "__wrapped__", None),
                  lambda: setattr(fn, "__wrapped__", wrapped), wrapped)
        if isinstance(wrapped, types.FunctionType):
            self._watch_function(f"{label}.__wrapped__", wrapped)

    def changed(self) -> list[str]:
        """Labels of what differs from the snapshot, each put back as it was. Restoring the
        name sets first removes added attributes before the values are compared. A check that
        raises counts as changed."""
        out = []
        for label, read, restore, saved in self._checks:
            try:
                differs = not _same(read(), saved)
            except Exception:  # noqa: BLE001 - a planted object that breaks the comparison
                differs = True
            if differs:
                out.append(label)
                try:
                    restore()
                except Exception:  # noqa: BLE001 - named anyway; the candidate is rejected
                    pass
        return out
