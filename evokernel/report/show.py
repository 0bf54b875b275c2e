"""``evokernel show RUN_DIR``: a run's summary, the lineage of its best kernel round by round,
its generations, the search's DEAP Logbook (statistics of the population after each selection)
and its failures by kind, rendered with rich.

Reads the run store read-only (evokernel.runs.view), so it works on a finished run, a copied one,
and one that is still running. Speedups are over eager PyTorch (TF32 off); "% of the memory floor" is
the kernel's time over the memory floor (100% = moving the problem's minimum bytes at the
fastest measured rate, evokernel.timing.floor); the FP32 compute reference is shown beside it.
"""
from __future__ import annotations

from rich import box
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from evokernel.report.labels import answered_by_line, batch_line, llm_line, scripted_note
from evokernel.build.sass import audit_text
from evokernel.search.strategies import describe
from evokernel.runs.view import (RunView, age_text, compile_text, eager_text,
                                 floor_text, fmt_x, kernel_text, lineage_rows, sharing_text)


def _short(text: str, n: int = 72) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _cells(*values: str) -> list[Text]:
    """Plain-text cells: brackets in ideas and ids are not rich markup."""
    return [Text(v) for v in values]


def summary(view: RunView, relative: bool = True) -> Table:
    """The key-value summary: problem, search strategy, state, device, baselines, floor, best,
    seed, counts; the last record's time also as an age when ``relative``."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column(overflow="fold")

    def row(key: str, value: str) -> None:
        t.add_row(*_cells(key, value))
    dev = view.device
    row("problem", view.problem)
    if view.config is not None:
        row("strategy", describe(view.config.search))
    if view.replay_of:
        rec = view.replay_of
        who = ", ".join(rec.get("answered_by") or rec.get("scripted_by") or ["no LLM"])
        row("replay of", f"{rec.get('run_dir', '?')}: its kernels (replies of {who}) built, "
                         f"gated and timed again here; recorded on "
                         f"{(rec.get('device') or {}).get('device', '?')}")
    row("state", f"{view.state}; last record {age_text(view.last_write_s, relative)}")
    row("device", f"{dev.get('device', '?')} (sm {dev.get('capability', '?')}, "
                  f"{dev.get('sm_count', '?')} SMs), torch {dev.get('torch', '?')}, "
                  f"CUDA {dev.get('cuda', '?')}" if dev else "not recorded yet")
    row("eager ms", eager_text(view))
    row("compile ms", compile_text(view))
    if dev.get("floor_ms"):
        row("floors", floor_text(view))
    shared = sharing_text(view)
    if shared:
        row("GPU shared", shared)
    best, seed = view.best, view.seed
    row("best", "no kernel accepted yet" if best is None else
        f"{kernel_text(view, best)} [{best.id}, generation {best.candidate.generation}, "
        f"{best.candidate.operator}]")
    audit = audit_text(best.result.precision_audit, best.result.flags) \
        if best is not None and best.result is not None else None
    if audit:
        row("SASS audit", audit)
    if seed is not None:
        row("seed kernel", kernel_text(view, seed))
    status = [e.status for e in view.entries]
    n_ok, n_pending = status.count("accepted"), status.count("pending")
    ops = ", ".join(f"{k} {n}" for k, n in sorted(view.operators().items()))
    row("candidates", f"{len(status)}: {n_ok} accepted, {len(status) - n_ok - n_pending} "
                      f"rejected, {n_pending} pending; operators: {ops or '-'}")
    u = view.llm_usage
    line = llm_line(u)
    if line:
        row("LLM", line)
    if answered_by_line(u):
        row("answered by", answered_by_line(u))
    if batch_line(u, view.run_dir):
        row("LLM batch", batch_line(u, view.run_dir))
    note = scripted_note(u)
    if note:
        t.add_row(Text("scripted", style="bold red"), Text(note, style="bold red"))
    return t


def lineage_table(view: RunView, width: int = 120) -> Table | Text:
    """The lineage rows as a table that fits ``width`` columns: ideas are cut to what is left
    after the numbers, and on a narrow screen the ms and vs-parent columns go first."""
    rows = lineage_rows(view)
    if not rows:
        return Text("no accepted kernel yet, so no lineage")
    names = list(rows[0])
    header = {n: n.replace(" ", "\n") if n in ("vs parent", "norm ratio", "max ratio") else n
              for n in names}
    scripted = bool(view.llm_usage.get("scripted"))
    header["idea"] = "idea*" if scripted else "idea"

    def fixed(cols: list[str]) -> int:   # all but the idea, with 3 spaces between, 2 per edge
        return sum(max(len(r[n]) for r in rows + [{n: w for w in header[n].split("\n")}])
                   for n in cols if n != "idea") + 3 * (len(cols) - 1) + 4
    for optional in ("ms", "vs parent"):
        if width - fixed(names) >= 24:
            break
        names.remove(optional)
    idea_width = max(12, min(width - fixed(names), max(len(r["idea"]) for r in rows)))
    t = Table(box=box.SIMPLE_HEAD, title="lineage of the best kernel (seed first)" + (
        "; idea*: from scripted replies, not a model's" if scripted else ""),
        title_justify="left")
    for n in names:
        t.add_column(header[n], justify="left" if n in ("id", "operator", "idea") else "right",
                     no_wrap=True, min_width=idea_width if n == "idea" else None)
    for r in rows:
        t.add_row(*_cells(*(_short(r[n], idea_width) if n == "idea" else r[n] for n in names)))
    return t


def generations_table(view: RunView) -> Table | Text:
    """One row per generation: proposed, evaluated, accepted, best, median, best so far."""
    if not view.generations:
        return Text("no generation yet")
    t = Table(box=box.SIMPLE_HEAD, title="generations (offspring of each)",
              title_justify="left")
    for name in ("gen", "proposed", "evaluated", "accepted", "best", "median", "best so far"):
        t.add_column(name, justify="right")
    for g in view.generations:
        t.add_row(f"{g.generation}" + ("" if g.complete else "*"), str(g.proposed),
                  str(g.evaluated), str(g.accepted), fmt_x(g.best), fmt_x(g.median),
                  fmt_x(g.best_so_far))
    if any(not g.complete for g in view.generations):
        t.caption = "* not complete yet"
    return t


def logbook_table(view: RunView) -> Table | None:
    """The DEAP Logbook (evokernel.search.toolbox.LOGBOOK_HEADER), one row per completed
    generation: new kernels evaluated, accepted, archive cells filled, the population's best,
    median and worst speedup after selection, and LLM tokens spent so far. None for a run
    without one (made before the Logbook was kept)."""
    if not view.logbook:
        return None
    t = Table(box=box.SIMPLE_HEAD, title="DEAP logbook (population after selection)",
              title_justify="left")
    columns = (("gen", "gen", str), ("nevals", "evaluated", str), ("accepted", "accepted", str),
               ("cells", "archive cells", str), ("max", "best", fmt_x),
               ("median", "median", fmt_x), ("min", "worst", fmt_x),
               ("tokens", "tokens", lambda v: f"{int(v):,}"))
    for _, name, _ in columns:
        t.add_column(name, justify="right")
    for record in view.logbook:
        t.add_row(*(fmt(record[key]) if record.get(key) is not None else "-"
                    for key, _, fmt in columns))
    return t


def failures_table(view: RunView) -> Table | Text:
    """Rejections counted by reason, grouped by kind (build, run, precision, anti-cheat, ...)."""
    rows = view.failures_by_kind()
    if not rows:
        return Text("failures: none")
    t = Table(box=box.SIMPLE_HEAD, title="failures by kind", title_justify="left")
    for name in ("kind", "reason", "count"):
        t.add_column(name, justify="right" if name == "count" else "left")
    for kind, reason, n in rows:
        t.add_row(*_cells(kind, reason.value, str(n)))
    return t


def render(view: RunView, width: int = 120, relative: bool = True) -> RenderableType:
    """The whole ``show`` output as one rich renderable, laid out for ``width`` columns."""
    parts: list[RenderableType] = [
        Panel(summary(view, relative), title=f"evokernel run {view.run_dir}",
              title_align="left", box=box.ROUNDED),
        lineage_table(view, width), generations_table(view)]
    logbook = logbook_table(view)
    if logbook is not None:
        parts.append(logbook)
    return Group(*parts, failures_table(view))


def show(run_dir: str, console: Console | None = None) -> None:
    """Print ``evokernel show`` for ``run_dir`` to ``console`` (default: stdout).

    When stdout is not a terminal (saved to a file), the text is laid out for 120 columns,
    with no trailing spaces and the last record's time without a (soon stale) age.
    Raises:
        ConfigError: ``run_dir`` holds no run store.
    """
    import sys

    from evokernel.runs.view import load_run
    view = load_run(run_dir)
    if console is not None:
        console.print(render(view, console.width))
        return
    console = Console()
    if console.is_terminal:
        console.print(render(view, console.width))
        return
    console = Console(width=120, file=sys.stdout, color_system=None)
    with console.capture() as cap:
        console.print(render(view, 120, relative=False))
    sys.stdout.write("\n".join(line.rstrip() for line in cap.get().splitlines()) + "\n")
