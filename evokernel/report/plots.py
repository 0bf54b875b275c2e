"""The report's plots, drawn with matplotlib's Agg canvas (no pyplot, no display, no global
backend switch): speedup per generation, every candidate, and the best kernel's lineage tree.

Each function writes one PNG and returns its path (``*_figure`` returns the figure instead).
Sizes are fixed in pixels (``*_PX``) so a report looks the same for every run; the lineage figure
grows with the number of generations in the lineage (``lineage_px``). Speedups are over eager
PyTorch (x, reference_ms / candidate_ms); every speedup axis includes 1x, PyTorch eager, and
marks it. Each operator has the same colour in every run (``operator_color``).
"""
from __future__ import annotations

import textwrap
import zlib
from collections import Counter
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from evokernel.runs.view import Entry, RunView

DPI = 100
SPEEDUP_PX = (1200, 700)       # width, height of speedup_per_generation.png
CANDIDATES_PX = (1200, 700)    # width, height of candidates.png
#: The colour of each of evokernel's operators, the same in every run and report.
OPERATOR_COLORS = {"seed": "0.25", "idea": "tab:blue", "tune": "tab:orange",
                   "crossover": "tab:green", "repair": "tab:purple", "port": "tab:brown",
                   "check": "tab:cyan"}
#: Colours for other operators (a user's), chosen by a hash of the name: stable across runs.
OTHER_COLORS = ("tab:pink", "tab:olive", "tab:gray", "goldenrod", "teal", "navy",
                "darkkhaki", "slateblue")


def lineage_px(layers: int) -> tuple[int, int]:
    """Pixel size of lineage.png for a lineage spanning ``layers`` generations."""
    return 1200, 160 + 140 * max(1, layers)


def _figure(px: tuple[int, int]) -> Figure:
    fig = Figure(figsize=(px[0] / DPI, px[1] / DPI), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)          # no bbox_inches="tight": the pixel size stays fixed
    return path


def _title(view: RunView, what: str) -> str:
    return f"{view.problem}: {what}  ({view.device.get('device', '?')}, run {view.run_dir.name})"


def operator_color(name: str) -> str:
    """The colour of operator ``name``: OPERATOR_COLORS', else one of OTHER_COLORS picked by
    the name's CRC-32, so that it does not depend on the run."""
    return OPERATOR_COLORS.get(name) or OTHER_COLORS[zlib.crc32(name.encode()) %
                                                     len(OTHER_COLORS)]


def operator_colors(view: RunView) -> dict[str, str]:
    """The colour of each operator of the run (in order of first use)."""
    return {n: operator_color(n) for n in dict.fromkeys(e.candidate.operator
                                                         for e in view.entries)}


def speedup_range(values: list[float]) -> tuple[float, float]:
    """(low, high) of the speedups ``values`` and 1x (PyTorch eager), which every axis shows."""
    return min(values + [1.0]), max(values + [1.0])


def _reference_lines(ax, view: RunView) -> None:
    """Dotted lines at the seed kernel's speedup and at 1x (PyTorch eager)."""
    seed = view.seed
    if seed is not None and seed.speedup:
        ax.axhline(seed.speedup, color="0.45", ls=":", lw=1.2, label="seed kernel")
    ax.axhline(1.0, color="tab:red", ls="--", lw=1.0, alpha=0.6, label="PyTorch eager (1x)")


def speedup_per_generation(view: RunView, path: Path) -> Path:
    """Write ``speedup_figure(view)`` to ``path``."""
    return _save(speedup_figure(view), path)


def speedup_figure(view: RunView) -> Figure:
    """Best-so-far, best and median speedup of each generation's accepted offspring, with
    valid/proposed counts under each generation. A generation's best is a filled dot drawn over
    its median, a hollow square, so both show when they coincide (one candidate)."""
    fig = _figure(SPEEDUP_PX)
    ax = fig.add_subplot()
    rows = view.generations
    gens = [g.generation for g in rows]
    so_far = [(g.generation, g.best_so_far) for g in rows if g.best_so_far is not None]
    best = [(g.generation, g.best) for g in rows if g.best is not None]
    median = [(g.generation, g.median) for g in rows if g.median is not None]
    values = [v for _, v in so_far + best + median]
    if so_far:
        ax.step(*zip(*so_far), where="post", color="tab:blue", lw=2.5, label="best so far")
        prev = None
        for g, v in so_far:
            if prev is None or v > prev:
                ax.annotate(f"{v:.3f}x", (g, v), textcoords="offset points", xytext=(4, 7),
                            color="tab:blue", fontsize=10, fontweight="bold")
            prev = v
    if median:
        ax.plot(*zip(*median), "s--", color="tab:orange", mfc="none", mew=1.8, ms=12, lw=1.2,
                zorder=3, label="median of generation (accepted)")
    if best:
        ax.plot(*zip(*best), "o", color="tab:green", ms=7, zorder=4, label="best of generation")
    lo, hi = speedup_range(values)
    _reference_lines(ax, view)
    pad = max(0.05 * (hi - lo), 0.02 * hi, 1e-3)
    ax.set_ylim(lo - 3 * pad, hi + 3 * pad)
    for g in rows:
        waiting = g.proposed - g.evaluated
        ax.annotate(f"{g.accepted}/{g.proposed} valid" + (f", {waiting} pending" if waiting
                                                           else ""),
                    (g.generation, 0), xytext=(0, 4),
                    textcoords="offset points", xycoords=("data", "axes fraction"),
                    ha="center", fontsize=9, color="0.35")
    ax.set_xticks(gens or [0])
    ax.set_xlim(min(gens or [0]) - 0.5, max(gens or [0]) + 0.5)
    ax.set_xlabel("generation (0 = seed kernel)")
    ax.set_ylabel("speedup over PyTorch eager (x)")
    ax.set_title(_title(view, "speedup per generation"))
    ax.grid(alpha=0.3)
    if not values:
        ax.text(0.5, 0.5, "no accepted kernel yet", transform=ax.transAxes, ha="center")
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    return fig


def candidates(view: RunView, path: Path) -> Path:
    """Write ``candidates_figure(view)`` to ``path``."""
    return _save(candidates_figure(view), path)


def candidates_figure(view: RunView) -> Figure:
    """Every candidate: generation (spread within it) against speedup, coloured by operator,
    the best as a star; rejected candidates as crosses in a strip below, labelled with their
    reason, and pending ones as hollow circles there."""
    fig = _figure(CANDIDATES_PX)
    top, strip = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": (6, 1)})
    colors = operator_colors(view)
    ok = [e.speedup for e in view.entries if e.speedup]
    lo, hi = speedup_range(ok)
    span = max(hi - lo, 0.05 * hi, 1e-3)
    by_gen: dict[int, list[Entry]] = {}
    for e in view.entries:
        by_gen.setdefault(e.candidate.generation, []).append(e)
    gens = sorted(set(by_gen) | {g.generation for g in view.generations}) or [0]
    failures = sum(e.result is not None and not e.result.accepted for e in view.entries)
    for g, members in by_gen.items():
        for i, e in enumerate(members):
            x = g + (0.0 if len(members) == 1 else -0.3 + 0.6 * i / (len(members) - 1))
            _candidate_marker(top, strip, view, e, x, colors[e.candidate.operator],
                              label_reason=failures <= 8, last=x > gens[-1] - 0.2 and
                              len(gens) > 1)
        reasons = Counter(e.result.reason.value for e in members
                          if e.result is not None and not e.result.accepted)
        if failures > 8 and reasons:      # many: one count per reason under each generation
            strip.text(g, 0.45, "\n".join(f"{n} {r}" for r, n in reasons.most_common(3)),
                       ha="center", va="top", fontsize=7, color="tab:red", linespacing=1.1)
    _reference_lines(top, view)
    _candidates_legend(top, view, colors)
    top.set_ylim(lo - 0.15 * span, hi + 0.3 * span)
    if not ok:
        top.text(0.5, 0.5, "no accepted kernel yet", transform=top.transAxes, ha="center")
    top.set_ylabel("speedup over PyTorch eager (x)")
    waiting = sum(e.result is None for e in view.entries)
    top.set_title(_title(view, f"every candidate ({len(view.entries)}: {len(ok)} accepted, "
                               f"{failures} rejected" + (f", {waiting} pending)" if waiting
                                                          else ")")))
    top.grid(alpha=0.3)
    _strip_axes(strip, gens, failures, waiting)
    fig.tight_layout()
    return fig


def _candidate_marker(top, strip, view: RunView, e: Entry, x: float, color: str, *,
                      label_reason: bool, last: bool) -> None:
    """One candidate's marker: on ``top`` when accepted (a star for the best), in ``strip``
    when rejected (a cross, with its reason when ``label_reason``) or pending (a hollow
    circle)."""
    if e.result is None:
        strip.plot(x, 0.5, "o", mfc="none", mec=color, ms=9, mew=2)
    elif not e.result.accepted:
        strip.plot(x, 0.7, "x", color=color, ms=10, mew=2.5)
        if label_reason:
            strip.annotate(e.result.reason.value, (x, 0.7), xytext=(0, -12),
                           textcoords="offset points", ha="center", va="top", fontsize=8,
                           color="tab:red")
    elif view.best is not None and e.id == view.best.id:
        top.plot(x, e.speedup, "*", color=color, ms=20, mec="black", zorder=4)
        top.annotate(f"best {e.speedup:.3f}x", (x, e.speedup), xytext=(-10 if last else 10, 8),
                     textcoords="offset points", ha="right" if last else "left", fontsize=10,
                     fontweight="bold")
    else:
        top.plot(x, e.speedup, "o", color=color, ms=8, alpha=0.9, zorder=3)


def _candidates_legend(top, view: RunView, colors: dict[str, str]) -> None:
    handles = [Line2D([], [], marker="o", ls="", color=c, label=op) for op, c in colors.items()]
    handles += [Line2D([], [], marker="*", ls="", color="0.3", ms=14, label="best"),
                Line2D([], [], marker="x", ls="", color="0.3", mew=2.5, label="rejected")]
    if any(e.result is None for e in view.entries):
        handles.append(Line2D([], [], marker="o", ls="", mfc="none", mec="0.3",
                              label="pending"))
    handles += top.get_legend_handles_labels()[0]
    top.legend(handles=handles, loc="upper left", fontsize=9, ncol=2)


def _strip_axes(strip, gens: list[int], failures: int, pending: int) -> None:
    strip.set_ylim(0, 1)
    strip.set_yticks([])
    strip.set_ylabel("rejected\n/ pending" if pending else "rejected", rotation=0, ha="right",
                     va="center", color="tab:red")
    strip.set_facecolor((1.0, 0.95, 0.95))
    if not failures and not pending:
        strip.text(0.5, 0.5, "no candidate rejected", transform=strip.transAxes, ha="center",
                   va="center", color="0.4", fontsize=9)
    strip.set_xticks(gens)
    strip.set_xlim(gens[0] - 0.5, gens[-1] + 0.5)
    strip.set_xlabel("generation (candidates spread within each)")
    strip.grid(axis="x", alpha=0.3)


def lineage(view: RunView, path: Path) -> Path:
    """The best kernel's lineage as a tree, seed at the top, one row per generation: the chain
    of first parents down the middle, each crossover's other parent beside it (dashed arrow).
    Each box gives generation, operator, id, speedup and the idea (wrapped); each solid arrow is
    labelled with the child's speedup over its parent's."""
    chain, partners = view.lineage_tree()
    nodes = chain + partners
    layers = sorted({e.candidate.generation for e in nodes})
    fig = _figure(lineage_px(len(layers)))
    ax = fig.add_axes((0.0, 0.0, 1.0, 0.94))
    ax.set_axis_off()
    scripted = " (ideas from scripted replies, not a model's)" if view.llm_usage.get("scripted") \
        else ""
    fig.suptitle(_title(view, "lineage of the best kernel" + scripted), fontsize=12)
    if not nodes:
        ax.text(0.5, 0.5, "no accepted kernel yet", ha="center", va="center", fontsize=14)
        return _save(fig, path)
    colors = operator_colors(view)
    row = {g: 1 - (i + 0.5) / len(layers) for i, g in enumerate(layers)}
    pos = {e.id: (0.5, row[e.candidate.generation]) for e in chain}
    side: dict[int, int] = {}
    for e in partners:          # right of the chain, then left, per layer (labels go left)
        k = side[e.candidate.generation] = side.get(e.candidate.generation, -1) + 1
        pos[e.id] = (0.82 if k % 2 == 0 else 0.18, row[e.candidate.generation])
    by_id = {e.id: e for e in nodes}
    for e in chain:
        for k, parent in enumerate(e.candidate.parent_ids):
            if parent not in pos:
                continue
            ax.annotate("", xy=pos[e.id], xytext=pos[parent],
                        arrowprops=dict(arrowstyle="-|>", color="0.4", lw=1.5,
                                        ls="--" if k else "-", shrinkA=24, shrinkB=24))
            before, after = by_id[parent].speedup, e.speedup
            if k == 0 and before and after:   # what this step gave: child / parent speedup
                ax.text(0.49, (pos[parent][1] + pos[e.id][1]) / 2, f"×{after / before:.3f}",
                        fontsize=10, va="center", ha="right",
                        color="tab:green" if after > before else "tab:red")
    best = view.best
    for e in nodes:
        r = e.result
        speed = f"{e.speedup:.3f}x" if r is not None and r.accepted else e.status
        idea = textwrap.shorten(e.idea_line, width=120, placeholder="…")
        role = " (partner)" if e.id not in {c.id for c in chain} else ""
        text = (f"gen {e.candidate.generation} · {e.candidate.operator} · {e.id[:8]} · "
                f"{speed}{role}\n" + "\n".join(textwrap.wrap(idea, 44)))
        is_best = best is not None and e.id == best.id
        ax.text(*pos[e.id], text, ha="center", va="center", fontsize=10,
                fontweight="bold" if is_best else "normal",
                bbox=dict(boxstyle="round,pad=0.5", fc="white", lw=3 if is_best else 1.5,
                          ec=colors.get(e.candidate.operator, "0.3")))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return _save(fig, path)
