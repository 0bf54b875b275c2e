"""Robust parsing of LLM replies: the candidate's code (a whole module, or SEARCH/REPLACE edits
of its parent), its one-line idea, and lists of ideas.

Nothing here raises on a malformed reply: a reply with no usable code gives None (the operator
then keeps the raw reply as a candidate that the evaluator rejects as ``no_code``), edits that
do not apply give the failing block and why, and a reply with no readable ideas gives [].

Edits (``apply_edits``) are blocks in this form, anywhere in the reply (inside a fenced block
or not), applied in order, each to the result of the ones before::

    <<<<<<< SEARCH
    lines copied exactly from the current kernel
    =======
    the lines that replace them
    >>>>>>> REPLACE

The markers take 5 to 9 ``<``, ``=`` or ``>`` characters. A SEARCH section must match exactly
one place in the text, line for line (trailing whitespace ignored when no exact match exists).
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE_STRICT = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$",
                           re.MULTILINE | re.DOTALL)
_FENCE_LOOSE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_FENCE_OPEN_TO_END = re.compile(r"```[ \t]*(?:python3?|py)?[^\n]*\n(.*)\Z", re.DOTALL)
_DEFINES_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")
_SUMMARY = re.compile(r"^[ \t>*_#-]*(?:idea|summary)[ \t*_]*:[ \t*_]*(?P<text>\S.*?)[ \t*_]*$",
                      re.IGNORECASE | re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:\d{1,3}[.):]|[-*\u2022+])[ \t]+(?P<text>\S.*)$")
_IDEA_FIELD = re.compile(r'"(?:idea|description)"\s*:\s*"(?P<text>(?:[^"\\]|\\.)*)"')
_IDEA_KEYS = ("idea", "description", "text", "title", "summary")


def _fenced_blocks(reply: str) -> list[tuple[str, str]]:
    """(language tag lowercased, body) of every fenced block; line-anchored fences first, the
    loose form (closing fence glued to the code) only when there are none."""
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE_STRICT.finditer(reply)]
    if not blocks:
        blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE_LOOSE.finditer(reply)]
    return blocks


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def _tidy(code: str) -> str:
    return code.strip("\n").rstrip() + "\n"


def extract_code(reply: Any) -> str | None:
    """The candidate module in an LLM reply, or None when there is none.

    Order of preference: the last ```python fenced block that defines ``class ModelNew``; the
    last fenced block of any language that defines it; a fence left unclosed (truncated reply)
    or a bare reply, when the text parses as Python and defines ``ModelNew``.
    Returns: the module source (ending in one newline), or None. Never raises.
    """
    if not isinstance(reply, str) or not reply.strip():
        return None
    blocks = _fenced_blocks(reply)
    defining = [(lang, body) for lang, body in blocks if _DEFINES_MODELNEW.search(body)]
    for preferred in ([b for lang, b in defining if lang in _PYTHON_TAGS],
                      [b for _, b in defining]):
        if preferred:
            return _tidy(preferred[-1])
    m = _FENCE_OPEN_TO_END.search(reply)
    if m and _DEFINES_MODELNEW.search(m.group(1)) and _parses(m.group(1)):
        return _tidy(m.group(1))
    if not blocks and _DEFINES_MODELNEW.search(reply) and _parses(reply):
        return _tidy(reply)
    return None


def _outside_fences(reply: str) -> str:
    return _FENCE_LOOSE.sub("\n", _FENCE_STRICT.sub("\n", reply))


def extract_summary(reply: Any, max_chars: int = 500) -> str | None:
    """The reply's ``Idea: ...`` (or ``Summary: ...``) line outside code blocks, or None.

    Returns: the line's text without markdown emphasis, at most ``max_chars`` characters.
    """
    if not isinstance(reply, str):
        return None
    m = _SUMMARY.search(_outside_fences(reply))
    if not m:
        return None
    text = m.group("text").strip().strip("*_").strip()
    return text[:max_chars] or None


def _idea_from_item(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        text = next((item[k] for k in _IDEA_KEYS if isinstance(item.get(k), str)), None)
        if text is None:
            return None
        category = item.get("category")
        if isinstance(category, str) and category.strip():
            return f"[{category.strip()}] {text}"
        return text
    return None


def _json_ideas(text: str) -> list[str] | None:
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), None)
    if not isinstance(data, list):
        return None
    return [idea for idea in map(_idea_from_item, data) if idea]


def _list_ideas(text: str) -> list[str]:
    """Items of a numbered or bulleted list; indented lines continue the item above."""
    items: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        m = _LIST_ITEM.match(line)
        if m:
            current = [m.group("text")]
            items.append(m.group("text"))
        elif current is not None and line.strip() and line[:1] in " \t":
            current.append(line.strip())
            items[-1] = " ".join(current)
        else:
            current = None
    return items


def _json_string(body: str) -> str:
    """The text of a JSON string literal's body (escapes decoded), or the body as it is."""
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return body


def _clean(idea: str) -> str:
    idea = re.sub(r"\s+", " ", idea).strip()
    idea = re.sub(r"^\*\*(.+?)\*\*:?\s*", r"\1: ", idea)   # **Title**: text -> Title: text
    return idea.strip().rstrip(":").strip()


def _dedupe_key(idea: str) -> str:
    idea = re.sub(r"^\[[^\]]*\]\s*", "", idea)   # category tag
    return re.sub(r"[\W_]+", " ", idea.lower()).strip()


def parse_ideas(reply: Any, k: int) -> list[str]:
    """At most ``k`` distinct ideas from an LLM reply.

    Reads, in order: a JSON list (in a fenced block or bare) of strings or objects with an
    "idea" (and optional "category", kept as a ``[category] `` prefix); "idea" fields salvaged
    from broken JSON; a numbered or bulleted list outside code blocks. Duplicates (ignoring case,
    punctuation and category) are dropped, order kept.
    Returns: up to k idea strings; [] for a reply with none. Never raises on the reply.
    Raises: ValueError if k < 0.
    """
    if k < 0:
        raise ValueError(f"parse_ideas: k must be >= 0, got {k}")
    if k == 0 or not isinstance(reply, str) or not reply.strip():
        return []
    ideas: list[str] | None = None
    candidates = [body for lang, body in _fenced_blocks(reply) if lang in ("json", "")]
    candidates.append(reply)
    start, end = reply.find("["), reply.rfind("]")
    if 0 <= start < end:
        candidates.append(reply[start:end + 1])
    for text in candidates:
        ideas = _json_ideas(text.strip())
        if ideas:
            break
    if not ideas:
        ideas = [_json_string(m.group("text")) for m in _IDEA_FIELD.finditer(reply)]
    if not ideas:
        ideas = _list_ideas(_outside_fences(reply))
    out: list[str] = []
    seen: set[str] = set()
    for idea in ideas:
        idea = _clean(idea)
        key = _dedupe_key(idea)
        if len(key) < 3 or key in seen:
            continue
        seen.add(key)
        out.append(idea)
        if len(out) == k:
            break
    return out


_EDIT_START = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH[ \t]*$")
_EDIT_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_EDIT_END = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE[ \t]*$")


@dataclass(frozen=True)
class EditBlock:
    """One SEARCH/REPLACE block: the lines to find and their replacement, and the reply line
    (1-based) its ``<<<<<<< SEARCH`` marker is on."""

    search: tuple[str, ...]
    replace: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class EditResult:
    """The outcome of applying a reply's edits: ``source`` (the edited module) when every block
    applied, else None and ``failure`` naming the first block that did not and why."""

    source: str | None
    blocks: int
    failure: str = ""


def has_edits(reply: Any) -> bool:
    """Whether the reply holds at least one ``<<<<<<< SEARCH`` marker line."""
    return isinstance(reply, str) and any(_EDIT_START.match(ln) for ln in reply.splitlines())


def parse_edits(reply: str) -> tuple[list[EditBlock], str]:
    """The SEARCH/REPLACE blocks of a reply, and "" or what is malformed (which block, which
    reply line, what is missing). Stops at the first malformed block."""
    blocks: list[EditBlock] = []
    lines = reply.splitlines()
    i = 0
    while i < len(lines):
        if _EDIT_END.match(lines[i]):
            return blocks, (f"block {len(blocks) + 1}: a '>>>>>>> REPLACE' line (reply line "
                            f"{i + 1}) without its '<<<<<<< SEARCH'")
        if not _EDIT_START.match(lines[i]):
            i += 1
            continue
        n, start = len(blocks) + 1, i
        div = next((j for j in range(i + 1, len(lines)) if _EDIT_DIVIDER.match(lines[j])
                    or _EDIT_START.match(lines[j]) or _EDIT_END.match(lines[j])), None)
        if div is None or not _EDIT_DIVIDER.match(lines[div]):
            return blocks, (f"block {n} (reply line {start + 1}): no '=======' line between "
                            "'<<<<<<< SEARCH' and '>>>>>>> REPLACE'")
        end = next((j for j in range(div + 1, len(lines)) if _EDIT_END.match(lines[j])
                    or _EDIT_START.match(lines[j])), None)
        if end is None or not _EDIT_END.match(lines[end]):
            return blocks, (f"block {n} (reply line {start + 1}): no '>>>>>>> REPLACE' line "
                            "after its '======='")
        search = tuple(lines[start + 1:div])
        if not any(ln.strip() for ln in search):
            return blocks, (f"block {n} (reply line {start + 1}): its SEARCH section is empty, "
                            "so it names no place in the kernel")
        blocks.append(EditBlock(search, tuple(lines[div + 1:end]), start + 1))
        i = end + 1
    return blocks, ""


def _places(lines: list[str], search: tuple[str, ...], strip: bool) -> list[int]:
    key = (lambda x: x.rstrip()) if strip else (lambda x: x)
    want = [key(x) for x in search]
    n = len(want)
    return [i for i in range(len(lines) - n + 1)
            if key(lines[i]) == want[0] and [key(x) for x in lines[i:i + n]] == want]


def _first_line(block: EditBlock) -> str:
    first = next(ln for ln in block.search if ln.strip()).strip()
    return first if len(first) <= 80 else first[:77] + "..."


def apply_edits(reply: str, parent_source: str) -> EditResult:
    """Apply a reply's SEARCH/REPLACE blocks to ``parent_source``, in order.

    Returns: EditResult with the edited source (ending in one newline); or with source None and
        ``failure`` saying which block did not apply: malformed (no divider, no end marker,
        empty SEARCH, a stray end marker), its SEARCH text found nowhere, or found in several
        places (with their line numbers). A reply with no block fails as "no SEARCH/REPLACE
        block". Never raises on the reply.
    """
    blocks, malformed = parse_edits(reply)
    if malformed:
        return EditResult(None, len(blocks), malformed)
    if not blocks:
        return EditResult(None, 0, "no SEARCH/REPLACE block in the reply")
    lines = parent_source.splitlines()
    for n, block in enumerate(blocks, 1):
        where = f"block {n} of {len(blocks)} (reply line {block.line}, SEARCH starting " \
                f"{_first_line(block)!r})"
        places = _places(lines, block.search, strip=False) or \
            _places(lines, block.search, strip=True)
        if not places:
            return EditResult(None, len(blocks), f"{where}: its SEARCH text is not in the "
                              "current kernel (after the blocks before it)")
        if len(places) > 1:
            at = ", ".join(str(i + 1) for i in places[:6])
            return EditResult(None, len(blocks), f"{where}: its SEARCH text matches "
                              f"{len(places)} places (lines {at}); it must match exactly one")
        i = places[0]
        lines[i:i + len(block.search)] = list(block.replace)
    return EditResult("\n".join(lines).rstrip("\n") + "\n", len(blocks))


def code_from_reply(reply: Any, base_source: str | None = None) -> tuple[str | None, str]:
    """The candidate module a reply gives, and "" or why its edits did not apply.

    With ``base_source`` (the kernel the request asked to edit) and SEARCH/REPLACE blocks in
    the reply, the blocks decide: applied to ``base_source`` they give the module, and a block
    that does not apply gives (None, its failure). Otherwise the reply's whole module
    (``extract_code``), or (None, "") when it holds none.
    """
    if base_source is not None and has_edits(reply):
        outcome = apply_edits(reply, base_source)
        return outcome.source, outcome.failure
    return extract_code(reply), ""
