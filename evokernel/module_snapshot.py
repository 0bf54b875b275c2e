"""A snapshot of evokernel's own loaded modules, so the worker can tell when candidate code
(which runs in the same process) changed the code that gates and times it, and undo it.

Watched, for every loaded ``evokernel.*`` module that is not a package:
* each module global (by identity), and the set of global names (a new global can shadow a
  builtin that the module's functions call, such as ``abs``);
* each plain function's ``__code__``, ``__defaults__`` and ``__kwdefaults__`` (the last by value,
  since a dict can be changed in place), for module functions and the methods of the module's
  classes, classmethods and staticmethods included;
* each such class's attributes (by identity) and the set of its attribute names (a class-level
  property can shadow an instance attribute);
* the spins of evokernel.device_spin: ``DeviceSpin._made``'s entries and each spin's attributes.

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


class ModuleSnapshot:
    """Taken at construction; :meth:`changed` lists what differs and puts it back."""

    def __init__(self, prefix: str = "evokernel.") -> None:
        #: (label, read, restore): read() gives the current value; restore() puts it back.
        self._checks: list[tuple[str, Callable[[], Any], Callable[[], None], Any, bool]] = []
        for name, mod in sorted(sys.modules.items()):
            if name.startswith(prefix) and mod is not None and not hasattr(mod, "__path__"):
                self._watch_namespace(name, mod, vars(mod))
        spin_mod = sys.modules.get(f"{prefix}device_spin")
        if spin_mod is not None:
            made = spin_mod.DeviceSpin._made
            saved = dict(made)
            self._add(f"{prefix}device_spin.DeviceSpin._made", lambda: dict(made),
                      lambda: (made.clear(), made.update(saved)), saved, by_value=True)
            for i, spin in enumerate(saved.values()):
                self._watch_attrs(f"DeviceSpin[{i}]", spin, vars(spin))

    def _add(self, label: str, read: Callable[[], Any], restore: Callable[[], None], saved: Any,
             by_value: bool = False) -> None:
        self._checks.append((label, read, restore, saved, by_value))

    def _watch_attrs(self, label: str, owner: Any, namespace: Any) -> None:
        """owner's attributes by identity, and its set of attribute names."""
        names = frozenset(k for k in namespace if not _is_dunder(k))

        def restore_names(owner: Any = owner, names: frozenset[str] = names) -> None:
            for k in set(vars(owner)) - names:
                if not _is_dunder(k):
                    delattr(owner, k)
        self._add(f"{label} (names)", lambda: frozenset(k for k in vars(owner)
                                                        if not _is_dunder(k)),
                  restore_names, names, by_value=True)
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
            elif isinstance(value, type) and value.__module__ == getattr(owner, "__name__", ""):
                self._watch_namespace(f"{label}.{k}", value, vars(value))

    def _watch_function(self, label: str, fn: types.FunctionType) -> None:
        for attr in ("__code__", "__defaults__"):
            self._add(f"{label}.{attr}", lambda a=attr: getattr(fn, a),
                      lambda a=attr, v=getattr(fn, attr): setattr(fn, a, v), getattr(fn, attr))
        kw = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
        self._add(f"{label}.__kwdefaults__",
                  lambda: dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None,
                  lambda: setattr(fn, "__kwdefaults__", dict(kw) if kw is not None else None),
                  kw, by_value=True)

    def changed(self) -> list[str]:
        """Labels of what differs from the snapshot, each put back as it was. Restoring the
        name sets first removes added attributes before the values are compared."""
        out = []
        for label, read, restore, saved, by_value in self._checks:
            now = read()
            if (now != saved) if by_value else (now is not saved):
                out.append(label)
                restore()
        return out
