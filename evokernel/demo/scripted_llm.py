"""A scripted stand-in for an LLM, served through litellm's ``mock_response`` so a search with
the LLM operators runs end to end with no provider and no network (CI and GPU dry runs).

The script reads the prompt the operators built and answers as a (mediocre) kernel engineer:
- an ideas request gets k ideas as a JSON block;
- an implementation, crossover or port request gets the kernel from the prompt with its
  ``// tune:`` constants changed; one reply in four has a CUDA compile error (an ``#error`` line
  at the start of the CUDA source), and one in six has no code at all, so failures are
  exercised and recorded;
- a repair request gets the rejected kernel with the injected compile error removed.
Replies are a deterministic function of the prompt, so runs replay exactly.
"""
from __future__ import annotations

import hashlib
import json
import re

from evokernel.operators.tunables import find_tunables, set_tunables

BROKEN = "#error injected by the scripted LLM\n"
_BLOCK = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
IDEAS = [
    ("Stage each row through shared memory once and reuse it for every pass.", "memory"),
    ("Use float4 vectorized loads and stores on 16-byte aligned rows.", "memory"),
    ("Give each warp several rows so more independent loads are in flight.", "parallelism"),
    ("Unroll the inner loop by 4 with independent accumulators.", "loops"),
    ("Replace shared-memory tree reductions with warp shuffles.", "compute"),
    ("Overlap the next tile's global loads with this tile's math (double buffering).", "async"),
]


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _kernel_after(prompt: str, heading: str) -> str | None:
    at = prompt.find(heading)
    m = _BLOCK.search(prompt, at if at >= 0 else 0)
    return m.group(1) + "\n" if m else None


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


def scripted_reply(messages: list[dict]) -> str:
    """The reply to the prompt in ``messages`` (the operators' prompts, evokernel.operators.prompts)."""
    prompt = messages[-1]["content"]
    h = _digest(prompt)
    if "DISTINCT ideas" in prompt:
        k = int(re.search(r"Propose (\d+) DISTINCT", prompt).group(1))
        picked = [IDEAS[(h + i) % len(IDEAS)] for i in range(k)]
        return "```json\n" + json.dumps([{"idea": i, "category": c} for i, c in picked]) + "\n```"
    if "# Rejected kernel" in prompt:
        source = _kernel_after(prompt, "# Rejected kernel") or ""
        return _answer("remove the line that broke the build", source.replace(BROKEN, ""))
    if h % 6 == 5:
        return "I would restructure the reduction, but I need to see the profiler output first."
    heading = next((x for x in ("# Current kernel", "# Parent A") if x in prompt), "# Reference")
    source = _kernel_after(prompt, heading)
    if source is None or "ModelNew" not in source:
        return "I cannot write this kernel without a starting point."
    source = _vary(source, h)
    if h % 4 == 3:
        source = _break(source)
    idea = next((line[2:] for line in prompt.splitlines() if line.startswith("> ")),
                "merge the parents' tunables")
    return _answer(idea, source)
