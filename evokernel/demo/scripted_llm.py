"""A scripted stand-in for an LLM, served through litellm's ``mock_response`` (or the fake OpenAI
server) so a search with the LLM operators runs end to end with no provider and no network (CI
and GPU dry runs). Its ideas are a fixed list written for this script: they are never a model's.

The script reads the prompt the operators built (evokernel.operators.prompts; it keys on the
headings "# Current kernel", "# Parent A", "# Rejected kernel", on "Propose K DISTINCT ideas",
on the idea after "implement this optimization idea:", on "implementation J of M" / "sample J of
N", on the assigned category and the ideas already taken, and on the edit request line) and
answers as a (mediocre) kernel engineer:

- an ideas request gets K ideas from IDEAS as a JSON block: those of the assigned category
  first, none already taken in the generation;
- an implementation or crossover request gets the kernel from the prompt with one ``// tune:``
  constant changed: the whole module, or, when the prompt asks for SEARCH/REPLACE edits, one
  block that changes the constant's line. Some ideas have a fate on their first sample: a CUDA
  compile error (an ``#error`` line before the tunable), or no code (a reply without code; in
  edit form, a SEARCH block that matches nothing), so failures are exercised and recorded;
- a repair request gets the rejected kernel with the injected compile error removed (as one
  SEARCH/REPLACE block when edits are asked for);
- a port request gets the kernel of the prompt's reference section, if it holds one.
Replies are a deterministic function of the prompt's kernel, idea and sample (not of the rest
of its wording), so runs replay exactly.
"""
from __future__ import annotations

import hashlib
import json
import re

from evokernel.operators.tunables import find_tunables, set_tunables

BROKEN = "#error injected by the scripted LLM\n"
_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
#: (idea, category, fate of its first sample: "ok", "broken" or "no_code"). Written for this
#: script; they are not a model's ideas.
IDEAS = [
    ("Stage each row through shared memory once and reuse it for every pass.", "memory", "ok"),
    ("Use float4 vectorized loads and stores on 16-byte aligned rows.", "dtypes", "no_code"),
    ("Give each warp several rows so more independent loads are in flight.", "parallelism",
     "ok"),
    ("Unroll the inner loop by 4 with independent accumulators.", "control_flow", "broken"),
    ("Replace shared-memory tree reductions with warp shuffles.", "compute", "broken"),
    ("Overlap the next tile's global loads with this tile's math (double buffering).", "async",
     "broken"),
    ("Reduce each row group in one thread-block cluster through distributed shared memory.",
     "parallelism", "no_code"),
    ("Keep the row in registers between the max, sum and normalize passes.", "memory", "ok"),
]
_FATE = {idea: fate for idea, _, fate in IDEAS}
_EDIT_REQUEST = "Reply with SEARCH/REPLACE blocks"


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _kernel_after(prompt: str, heading: str) -> str | None:
    at = prompt.find(heading)
    m = _BLOCK.search(prompt, at if at >= 0 else 0)
    return m.group(1) + "\n" if m else None


def _sample(prompt: str) -> int:
    """The 0-based sample the prompt names ("implementation J of M", "sample J of N"), else 0."""
    m = re.search(r"implementation (\d+) of \d+ of this idea|sample (\d+) of \d+", prompt)
    return int(m.group(1) or m.group(2)) - 1 if m else 0


def _vary(source: str, h: int) -> str:
    tunables = find_tunables(source)
    if not tunables:
        return source
    t = tunables[h % len(tunables)]
    choices = [c for c in t.choices if c != t.value] or list(t.choices)
    return set_tunables(source, {t.name: choices[(h // 7) % len(choices)]})


def _break(source: str) -> str:
    """``source`` with the BROKEN line at the start of its CUDA code: right after the triple
    quote that opens the string holding the first ``// tune:`` line (marked constants live in
    the CUDA source; a module docstring before it is skipped), else after the first one."""
    at = source.find("// tune:")
    quote = source.rfind('"""', 0, at) if at >= 0 else source.find('"""')
    if quote < 0:
        return source
    return source[:quote + 3] + "\n" + BROKEN + source[quote + 3:]


def _answer(idea: str, source: str) -> str:
    return f"Idea: {idea}\n\n```python\n{source}```\n"


def _edit(idea: str, search: str, replace: str) -> str:
    return (f"Idea: {idea}\n\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}"
            ">>>>>>> REPLACE\n```\n")


def _ideas(prompt: str) -> str:
    k = int(re.search(r"Propose (\d+) DISTINCT", prompt).group(1))
    category = re.search(r"idea category assigned to this call: `(\w+)`", prompt)
    taken = prompt[prompt.find("ideas already taken in this generation"):] \
        if "ideas already taken in this generation" in prompt else ""
    start = _digest(_kernel_after(prompt, "# Current kernel") or prompt) % len(IDEAS)
    ordered = IDEAS[start:] + IDEAS[:start]
    if category:
        ordered = sorted(ordered, key=lambda x: x[1] != category.group(1))
    picked = [(i, c) for i, c, _ in ordered if i not in taken][:k]
    return "```json\n" + json.dumps([{"idea": i, "category": c} for i, c in picked]) + "\n```"


def _repair(prompt: str) -> str:
    source = _kernel_after(prompt, "# Rejected kernel") or ""
    if _EDIT_REQUEST in prompt and BROKEN in source:
        return _edit("remove the line that broke the build", BROKEN, "")
    return _answer("remove the line that broke the build", source.replace(BROKEN, ""))


def _change(prompt: str, idea: str, source: str, fate: str, h: int) -> str:
    """The reply that changes ``source`` (one tunable varied; broken when fated)."""
    varied = _vary(source, h)
    if _EDIT_REQUEST in prompt:
        old = next((a for a, b in zip(source.splitlines(True), varied.splitlines(True))
                    if a != b), None)
        if old is None:
            return "I see nothing to change in this kernel."
        new = next(b for a, b in zip(source.splitlines(True), varied.splitlines(True)) if a != b)
        if fate == "no_code":                       # a SEARCH text that is not in the kernel
            return _edit(idea, old.rstrip("\n") + "  // as I remember it\n", new)
        return _edit(idea, old, (BROKEN if fate == "broken" else "") + new)
    if fate == "no_code":
        return "I would restructure the reduction, but I need to see the profiler output first."
    return _answer(idea, _break(varied) if fate == "broken" else varied)


def scripted_reply(messages: list[dict]) -> str:
    """The reply to the prompt in ``messages`` (evokernel.operators.prompts' requests)."""
    prompt = messages[-1]["content"]
    if "DISTINCT ideas" in prompt:
        return _ideas(prompt)
    if "# Rejected kernel" in prompt:
        return _repair(prompt)
    heading = next((x for x in ("# Current kernel", "# Parent A") if x in prompt), "# Reference")
    source = _kernel_after(prompt, heading)
    if source is None or "ModelNew" not in source:
        return "I cannot write this kernel without a starting point."
    m = re.search(r"implement this optimization idea:\n> (.*)", prompt)
    idea = m.group(1).strip() if m else "merge the parents' tunables"
    plain = re.sub(r"^\[[^\]]*\]\s*", "", idea)
    j = _sample(prompt)
    h = _digest(f"{source}\x1f{idea}\x1f{j}")
    fate = _FATE.get(plain, "broken" if h % 4 == 3 else "ok") if j == 0 else "ok"
    return _change(prompt, idea, source, fate, h)
