"""The LLM-free tune operator: varies the constants marked ``// tune:`` (evokernel.operators.tunables)."""
from __future__ import annotations

from dataclasses import dataclass

from evokernel.records import Candidate
from evokernel.operators.tunables import find_tunables, set_tunables
from evokernel.operators.base import SearchContext


@dataclass
class TuneMutation:
    """Change ``max_changes`` marked constants of the parent to other listed values.

    Returns up to ``children`` distinct children not seen before; none when the parent has no
    marked constants or every neighbour was already tried.
    """

    children: int = 1
    max_changes: int = 2
    name: str = "tune"

    def __post_init__(self) -> None:
        if self.children < 1 or self.max_changes < 1:
            raise ValueError("TuneMutation: children and max_changes must be >= 1")

    def __call__(self, parent: Candidate, ctx: SearchContext) -> list[Candidate]:
        tunables = [t for t in find_tunables(parent.source)
                    if any(c != t.value for c in t.choices)]
        if not tunables:
            return []
        out: list[Candidate] = []
        seen = set(ctx.seen_ids)
        for _ in range(20 * self.children):
            if len(out) >= self.children:
                break
            picked = ctx.rng.sample(tunables, k=ctx.rng.randint(1, min(self.max_changes,
                                                                        len(tunables))))
            values = {t.name: ctx.rng.choice([c for c in t.choices if c != t.value])
                      for t in picked}
            source = set_tunables(parent.source, values)
            child = ctx.child(source, idea="tune " + ", ".join(f"{k}={v}" for k, v in
                                                               sorted(values.items())),
                              parents=[parent], operator=self.name)
            if child.id not in seen:
                seen.add(child.id)
                out.append(child)
        return out
