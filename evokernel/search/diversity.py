"""Keeping a generation's requests apart: assigned idea categories, and near-duplicate ideas
dropped across the generation's concurrent calls.

The similarity rule. An idea is reduced to a set of words: lowercased, its ``[category]`` tag
removed, split into words and numbers (``16-byte`` is ``16`` and ``byte``; ``1.5`` and ``64x64``
stay one token), common English words dropped (STOPWORDS), and a plural ``s`` cut from words of
more than three letters (``shuffles`` is ``shuffle``). Two ideas are near-duplicates when the
Jaccard index of their word sets, |A & B| / |A | B| (P. Jaccard 1912; A. Broder's
"resemblance", 1997), is at least SIMILARITY_THRESHOLD, 0.6. For example:

- "Replace the shared-memory reduction with warp shuffles" / "Use warp shuffles instead of the
  shared memory reduction": 1.0, duplicates;
- "Use float4 vectorized loads and stores on 16-byte aligned rows" / "float4 vectorized loads
  on aligned rows": 0.62, duplicates (the second adds nothing);
- "Unroll the inner loop by 4" / "... by 8": 0.6, duplicates: ideas that differ in one constant
  are the tune operator's work, not two LLM implementations';
- "Give each warp several rows so more independent loads are in flight" / "Assign several rows
  to each warp to keep more loads in flight": 0.56, both kept (the rule errs towards keeping);
- "Tile the matrix in 64x64 shared-memory tiles" / "Tile the matrix in 128x128 shared-memory
  tiles with cp.async double buffering": 0.4, both kept.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

#: Ideas whose word sets have a Jaccard index at least this high are near-duplicates.
SIMILARITY_THRESHOLD = 0.6

#: Words that carry no technique: dropped before comparing.
STOPWORDS = frozenset("""
a an and are as at be by each for from in into is it its of on or per so than that the their
then this to use using via when where which while with instead replace rather make more fewer
""".split())

_TAG = re.compile(r"^\s*\[[^\]]*\]\s*")
_WORD = re.compile(r"\d+x\d+|\d+(?:\.\d+)?|[a-z][a-z0-9_]*")


def idea_words(idea: str) -> frozenset[str]:
    """The word set an idea is compared by (see the module docstring)."""
    words = set()
    for w in _WORD.findall(_TAG.sub("", idea).lower()):
        if w in STOPWORDS:
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss") and not w[0].isdigit():
            w = w[:-1]
        words.add(w)
    return frozenset(words)


def similarity(a: str, b: str) -> float:
    """The Jaccard index of the two ideas' word sets, in [0, 1]; 1.0 for two ideas with no
    words at all (both empty after reduction), 0.0 when only one is empty."""
    wa, wb = idea_words(a), idea_words(b)
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


def near_duplicate(idea: str, others: Iterable[str],
                   threshold: float = SIMILARITY_THRESHOLD) -> str | None:
    """The first of ``others`` that ``idea`` nearly duplicates, or None.

    Raises: ValueError when ``threshold`` is not in (0, 1].
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"near_duplicate: threshold must be in (0, 1], got {threshold}")
    mine = idea_words(idea)
    for other in others:
        theirs = idea_words(other)
        union = mine | theirs
        score = len(mine & theirs) / len(union) if union else 1.0
        if score >= threshold:
            return other
    return None


def drop_near_duplicates(ideas_by_call: Sequence[Sequence[str]],
                         taken_by_call: Sequence[Sequence[str]],
                         threshold: float = SIMILARITY_THRESHOLD
                         ) -> tuple[list[list[str]], list[tuple[int, str, str]]]:
    """Drop each idea that nearly duplicates one kept from an earlier call of the generation
    (or earlier in the same call), or one in its own call's ``taken_by_call`` entry (ideas
    already spent on that call's parent).

    Calls are taken in their index order, not in the order their replies came back, so the
    result does not depend on how the concurrent calls raced.

    Args:
        ideas_by_call: each call's ideas, in call-index order.
        taken_by_call: for each call, ideas it must not repeat (same length as ideas_by_call).
    Returns: (kept ideas per call, and the drops as (call index, dropped idea, the idea it
        duplicates)).
    Raises: ValueError when the two sequences differ in length.
    """
    if len(ideas_by_call) != len(taken_by_call):
        raise ValueError(f"drop_near_duplicates: {len(ideas_by_call)} calls' ideas but "
                         f"{len(taken_by_call)} taken lists")
    kept_all: list[str] = []
    kept: list[list[str]] = []
    dropped: list[tuple[int, str, str]] = []
    for i, (ideas, taken) in enumerate(zip(ideas_by_call, taken_by_call)):
        mine: list[str] = []
        for idea in ideas:
            twin = near_duplicate(idea, [*kept_all, *taken], threshold)
            if twin is not None:
                dropped.append((i, idea, twin))
                continue
            mine.append(idea)
            kept_all.append(idea)
        kept.append(mine)
    return kept, dropped


def rotate_categories(keys: Sequence[str], n: int, start: int) -> list[str]:
    """``n`` categories taken in turn from ``keys``, beginning at ``start`` (mod len(keys)):
    with n <= len(keys) no two are the same.

    Raises: ValueError for no keys or a negative n.
    """
    if not keys or n < 0:
        raise ValueError(f"rotate_categories: need keys and n >= 0 (got {len(keys)} keys, n={n})")
    return [keys[(start + i) % len(keys)] for i in range(n)]
