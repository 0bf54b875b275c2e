"""``evokernel report RUN_DIR -o DIR``: a shareable report of one run.

Writes into DIR:
    report.md                    Markdown, linking the PNGs beside it
    report.html                  one self-contained HTML file (PNGs embedded as base64)
    speedup_per_generation.png   best so far, best and median per generation (evokernel.report.plots)
    candidates.png               every candidate, coloured by operator, failures marked
    lineage.png                  the best kernel's lineage tree with its ideas
    best_kernel.py               the best kernel as a standalone candidate file
    summary.json                 the numbers behind it (evokernel.runs.view.to_json)

The run store is opened read-only, so a committed or still-running run is not modified.
"""
from __future__ import annotations

import base64
import html
import json
import time
from pathlib import Path

from loguru import logger

from evokernel.build.sass import audit_text
from evokernel.report import plots
from evokernel.report.labels import answered_by_line, idea_heading, llm_line, scripted_note
from evokernel.search.strategies import describe
from evokernel.runs.view import (RunView, age_text, compile_text, eager_text,
                                 floor_text, fmt_ms, fmt_x, kernel_text, lineage_rows, load_run,
                                 sharing_text, to_json)

PLOTS = (("speedup_per_generation.png", "Speedup per generation", plots.speedup_per_generation),
         ("candidates.png", "Every candidate", plots.candidates),
         ("lineage.png", "Lineage of the best kernel", plots.lineage))


def _summary_rows(view: RunView) -> list[tuple[str, str]]:
    dev = view.device
    cfg = view.config
    rows = [("problem", view.problem), ("run", f"`{view.run_dir}`"),
            ("state", f"{view.state}; last record {age_text(view.last_write_s, relative=False)}"),
            ("device", f"{dev.get('device', '?')}, torch {dev.get('torch', '?')}, "
                       f"CUDA {dev.get('cuda', '?')}" if dev else "not recorded yet"),
            ("eager ms", eager_text(view)), ("torch.compile ms", compile_text(view)),
            ("floors", floor_text(view)),
            ("GPU shared", sharing_text(view) or "no")]
    for name, e in (("best kernel", view.best), ("seed kernel", view.seed)):
        if e is None:
            rows.append((name, "none accepted yet" if name == "best kernel" else "-"))
        elif e.result is None or not e.result.accepted:
            rows.append((name, "none accepted yet" if name == "best kernel" else e.status))
        else:
            rows.append((name, f"{kernel_text(view, e)}; `{e.id}`, generation "
                               f"{e.candidate.generation}, {e.candidate.operator}"))
            audit = audit_text(e.result.precision_audit, e.result.flags)
            if audit:
                rows.append((f"{name}: SASS audit", audit))
    if cfg is not None:
        s = cfg.search
        rows.append(("strategy", describe(s)))
        rows.append(("search", f"population {s.population_size}, offspring "
                               f"{s.offspring_per_generation}, generations {s.generations}, "
                               f"model {cfg.llm.model or 'none (LLM-free tune operator)'}"))
    u = view.llm_usage
    for name, text in (("LLM", llm_line(u)), ("answered by", answered_by_line(u)),
                       ("scripted", scripted_note(u))):
        if text:
            rows.append((name, f"**{text}**" if name == "scripted" else text))
    return rows


def _tables(view: RunView) -> dict[str, tuple[list[str], list[list[str]]]]:
    """Header and rows of each table in the report, as plain text."""
    gens = (["generation", "proposed", "evaluated", "accepted", "best", "median",
             "best so far"],
            [[str(g.generation) + ("" if g.complete else " (running)"), str(g.proposed),
              str(g.evaluated), str(g.accepted), fmt_x(g.best), fmt_x(g.median),
              fmt_x(g.best_so_far)] for g in view.generations])
    lin = lineage_rows(view)
    idea = idea_heading(view.llm_usage)
    lineage = ([idea if h == "idea" else h for h in lin[0]] if lin else ["gen"],
               [list(r.values()) for r in lin])
    fails = (["kind", "reason", "count"],
             [[k, r.value, str(n)] for k, r, n in view.failures_by_kind()])
    every = (["gen", "id", "operator", "status", "speedup", "ms", "norm ratio", "max ratio",
              "parents", idea],
             [[str(e.candidate.generation), e.id[:8], e.candidate.operator, e.status,
               fmt_x(e.speedup) if e.speedup else "-",
               fmt_ms(e.result.candidate_ms if e.result else None),
               "-" if not e.result or e.result.norm_error_ratio is None
               else f"{e.result.norm_error_ratio:.3g}",
               "-" if not e.result or e.result.max_error_ratio is None
               else f"{e.result.max_error_ratio:.3g}",
               " ".join(p[:8] for p in e.candidate.parent_ids) or "-", e.idea_line]
              for e in view.entries])
    return {"generations": gens, "lineage": lineage, "failures": fails, "candidates": every}


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _sections(view: RunView) -> list[tuple[str, str, object]]:
    """(title, kind, content) in report order; kind is table, plot, text or code."""
    t = _tables(view)
    best = view.best
    out: list[tuple[str, str, object]] = [
        ("Summary", "table", (["what", "value"], [list(r) for r in _summary_rows(view)])),
        ("Speedup per generation", "plot", "speedup_per_generation.png"),
        ("", "table", t["generations"]),
        ("Every candidate", "plot", "candidates.png"),
        ("Lineage of the best kernel", "plot", "lineage.png"),
        ("", "table", t["lineage"]),
        ("Failures by kind", "table" if t["failures"][1] else "text",
         t["failures"] if t["failures"][1] else "No candidate was rejected."),
        ("All candidates", "table", t["candidates"]),
        ("Best kernel source", "code" if best else "text",
         best.candidate.source if best else "No kernel was accepted yet.")]
    return out


def _markdown(view: RunView) -> str:
    parts = [f"# evokernel report: {view.problem} (run `{view.run_dir.name}`)",
             f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by "
             f"`evokernel report`. Speedups are over eager PyTorch with TF32 off; "
             f"error ratios are the candidate's error over PyTorch's own FP32 error (worst "
             f"over the gate's checks). `best_kernel.py` is the best kernel as a standalone "
             f"candidate file."]
    if scripted_note(view.llm_usage):
        parts.append(f"**{scripted_note(view.llm_usage)}.**")
    for title, kind, content in _sections(view):
        if title:
            parts.append(f"## {title}")
        if kind == "table":
            parts.append(_md_table(*content))                       # type: ignore[misc]
        elif kind == "plot":
            parts.append(f"![{title}]({content})")
        elif kind == "code":
            parts.append(f"```python\n{str(content).rstrip()}\n```")
        else:
            parts.append(str(content))
    return "\n\n".join(parts) + "\n"


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1250px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
        "padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}"
        "img{max-width:100%}pre{background:#f6f8fa;padding:1em;overflow-x:auto;font-size:12px}")


def _html(view: RunView, out_dir: Path) -> str:
    body = [f"<h1>evokernel report: {html.escape(view.problem)} "
            f"(run <code>{html.escape(view.run_dir.name)}</code>)</h1>",
            "<p>Speedups are over eager PyTorch with TF32 off; error ratios are the candidate's "
            "error over PyTorch's own FP32 error.</p>"]
    if scripted_note(view.llm_usage):
        body.append(f"<p><strong>{html.escape(str(scripted_note(view.llm_usage)))}.</strong></p>")
    for title, kind, content in _sections(view):
        if title:
            body.append(f"<h2>{html.escape(title)}</h2>")
        if kind == "table":
            body.append(_html_table(*content))                      # type: ignore[misc]
        elif kind == "plot":
            data = base64.b64encode((out_dir / str(content)).read_bytes()).decode()
            body.append(f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}">')
        elif kind == "code":
            body.append(f"<pre><code>{html.escape(str(content))}</code></pre>")
        else:
            body.append(f"<p>{html.escape(str(content))}</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>evokernel report: "
            f"{html.escape(view.problem)}</title><style>{_CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def write_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write the report of ``run_dir`` into ``out_dir`` (default: ``./<run folder name>-report``
    in the current folder, so a committed run's folder is never written to).

    Returns: the path of report.md (report.html, the PNGs, best_kernel.py and summary.json
    are beside it).
    Raises:
        ConfigError: ``run_dir`` holds no run store.
    """
    view = load_run(run_dir)
    out = Path(out_dir) if out_dir else Path(f"{Path(run_dir).resolve().name}-report")
    out.mkdir(parents=True, exist_ok=True)
    for name, _, draw in PLOTS:
        draw(view, out / name)
    best = view.best
    if best is not None:
        from evokernel.runs.store import RunStore
        store = RunStore(run_dir, read_only=True)
        try:
            store.export_best(out / "best_kernel.py")
        finally:
            store.close()
    (out / "summary.json").write_text(json.dumps(to_json(view), indent=2, default=str) + "\n")
    md = out / "report.md"
    md.write_text(_markdown(view), encoding="utf-8")
    (out / "report.html").write_text(_html(view, out), encoding="utf-8")
    logger.info("report of {} written to {}", run_dir, out)
    return md
