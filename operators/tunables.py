"""Tunable constants marked in kernel source, for the LLM-free tune operator.

Syntax: a constant definition followed, on the same line, by ``// tune:`` and the values to try,
separated by spaces or commas. Both C++ constants and macros work::

    constexpr int BLOCK = 256;          // tune: 64 128 256 512 1024
    #define ROWS_PER_BLOCK 4            // tune: 1 2 4 8

The current value need not be in the list. Values are kept as text and substituted verbatim, so
``2.0f`` stays ``2.0f``. The LLM prompt teaches this syntax (evokernel.operators.prompts).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_TUNE = re.compile(
    r"^(?P<head>.*?\b(?P<name>[A-Za-z_]\w*)\s*(?:=\s*)?)"
    r"(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fFuUlL]*)"
    r"(?P<tail>\s*;?\s*)//\s*tune:\s*(?P<choices>[^\n]+?)\s*$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Tunable:
    """One marked constant: its name, current value, the values to try, and its 1-based line."""

    name: str
    value: str
    choices: tuple[str, ...]
    line: int


def find_tunables(source: str) -> list[Tunable]:
    """All marked constants in ``source``, in order. A name marked twice is reported once."""
    found: dict[str, Tunable] = {}
    for m in _TUNE.finditer(source):
        choices = tuple(c for c in re.split(r"[,\s]+", m["choices"]) if c)
        if m["name"] not in found and choices:
            line = source.count("\n", 0, m.start()) + 1
            found[m["name"]] = Tunable(m["name"], m["value"], choices, line)
    return list(found.values())


def set_tunables(source: str, values: dict[str, str]) -> str:
    """Return ``source`` with each named constant set to its new value.

    Raises:
        ValueError: a name is not a marked constant in ``source``.
    """
    known = {t.name for t in find_tunables(source)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"not tunable in this source: {sorted(unknown)}")

    def sub(m: re.Match[str]) -> str:
        new = values.get(m["name"])
        if new is None:
            return m.group(0)
        return f"{m['head']}{new}{m['tail']}// tune: {m['choices']}"

    return _TUNE.sub(sub, source)
