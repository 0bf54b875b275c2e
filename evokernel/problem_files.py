"""A problem set and its candidate files, as `evokernel suite` and the bench's suite phase
name them (the command line and evokernel.bench both read it; neither imports the other).

    suite_problems(specs)              the problems named by folders, files or built-in names
    candidate_files(problems, kernels) each problem's candidate file (None: it has none)

A problem's candidate is, in order: the file named in a JSON mapping ``{"problem": "path.py"}``,
the file ``<name>.py`` in a candidates folder, or the problem's own seed kernel
(``seeds/<name>.py`` beside it).
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from loguru import logger

from evokernel.errors import EvokernelError, ProblemError
from evokernel.problem import Problem, load_each, load_problem, load_problems


def suite_problems(specs: Sequence[str],
                   malformed: dict[Path, ProblemError] | None = None) -> list[Problem]:
    """Every problem named by ``specs`` (folders, files or built-in names), in order, once.

    Args:
        malformed: None (every malformed file is an error), or a dict that gets each malformed
            problem file (path -> its ProblemError) while the good ones are returned.
    Raises:
        ProblemError: a name that is no file, folder or built-in problem, a folder without
            problem files, two problems of one name, or (``malformed`` None) a malformed
            problem (every one named).
    """
    problems: dict[Path, Problem] = {}
    for spec in specs:
        if malformed is None:
            batch = load_problems(spec) if Path(spec).is_dir() else [load_problem(spec)]
        else:
            batch = []
            for path, loaded in load_each(spec):
                if isinstance(loaded, ProblemError):
                    malformed.setdefault(path, loaded)
                else:
                    batch.append(loaded)
        for p in batch:
            problems.setdefault(p.path, p)
    by_name: dict[str, Path] = {}
    for p in problems.values():
        if by_name.setdefault(p.name, p.path) != p.path:
            raise ProblemError(f"two problems are named {p.name!r}: {by_name[p.name]} and "
                               f"{p.path}; a suite's rows and kernels go by name (rename one)")
    return list(problems.values())


def candidate_files(problems: Sequence[Problem], kernels: str | None) -> dict[str, Path | None]:
    """Each problem's candidate file (None: it has none, not even a seed kernel).

    Args:
        kernels: None (seed kernels), a folder of ``<problem name>.py`` files, or a JSON file
            mapping problem names to kernel paths (relative paths are from the JSON's folder).
    Raises:
        EvokernelError: ``kernels`` names nothing usable.
    """
    mapping: dict[str, Path] = {}
    if kernels is not None:
        k = Path(kernels)
        if k.is_file() and k.suffix == ".json":
            mapping = _mapping(k)
            unknown = sorted(set(mapping) - {p.name for p in problems})
            if unknown:
                logger.warning("{}: no problem of this set is named {} (the set: {})", k,
                               ", ".join(map(repr, unknown)), ", ".join(p.name for p in problems))
        elif not k.is_dir():
            raise EvokernelError(f"{k}: not a folder of candidates or a JSON mapping")
    out: dict[str, Path | None] = {}
    for p in problems:
        if kernels is None:
            seed = p.path.parent / "seeds" / p.path.name
            out[p.name] = seed if p.seed_source is not None and seed.is_file() else None
        elif mapping:
            out[p.name] = mapping.get(p.name)
        else:
            f = Path(kernels) / f"{p.name}.py"
            out[p.name] = f if f.is_file() else None
    return out


def _mapping(path: Path) -> dict[str, Path]:
    """The JSON mapping at ``path``, each kernel path taken from the JSON's folder.

    Raises:
        EvokernelError: not a JSON object, or an entry whose value is not a non-empty path
            string (the file and the entry named)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        twice = sorted(k for k, n in Counter(k for k, _ in items).items() if n > 1)
        if twice:
            raise ValueError(f"{', '.join(map(repr, twice))} named twice")
        return dict(items)
    try:
        raw = json.loads(path.read_text(), object_pairs_hook=pairs)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise EvokernelError(f"{path}: not a JSON object of problem -> kernel file ({e})") from e
    if not isinstance(raw, dict):
        raise EvokernelError(f"{path}: not a JSON object of problem -> kernel file")
    bad = [name for name, value in raw.items() if not (isinstance(value, str) and value.strip())]
    if bad:
        raise EvokernelError(f"{path}: {', '.join(repr(b) for b in bad)}: the kernel file must be a "
                             f"path (a non-empty string), got "
                             f"{', '.join(json.dumps(raw[b]) for b in bad)}")
    return {name: path.parent / value for name, value in raw.items()}
