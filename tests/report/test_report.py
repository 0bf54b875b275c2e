"""`evokernel report` and `evokernel export` on recorded run stores: the files are written, the
PNGs have the stated pixel size and are not blank, the Markdown/HTML carry the tables and the
best kernel's source, and the exported kernel is a loadable candidate module."""
import ast
import json
import struct

import numpy as np
from matplotlib.image import imread

from evokernel.report import plots
from evokernel.cli.main import main
from evokernel.engine.evaluator import static_check
from evokernel.problem import Problem
from evokernel.records import Candidate
from evokernel.report.write import write_report
from evokernel.config import RunConfig
from evokernel.runs.store import RunStore
from tests.support.runstores import RECORDED, build_crossover_run, files_state

PNGS = {"speedup_per_generation.png", "candidates.png", "lineage.png"}


def png_size(path):
    """(width, height) in pixels from the PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def drawn_fraction(path) -> float:
    """Share of pixels that are not (near) white."""
    img = imread(path)[..., :3]
    return float(np.mean(img.min(axis=-1) < 0.9))


def test_report_of_the_recorded_run(tmp_path):
    before = files_state(RECORDED)
    assert main(["report", str(RECORDED), "-o", str(tmp_path / "rep")]) == 0
    assert files_state(RECORDED) == before                  # the run is only read
    out = tmp_path / "rep"
    assert PNGS <= {p.name for p in out.iterdir()}
    assert png_size(out / "speedup_per_generation.png") == plots.SPEEDUP_PX
    assert png_size(out / "candidates.png") == plots.CANDIDATES_PX
    assert png_size(out / "lineage.png") == plots.lineage_px(3)   # generations 0, 1, 2
    for name in PNGS:
        assert 0.01 < drawn_fraction(out / name) < 0.6, name    # drawn, not blank or filled

    md = (out / "report.md").read_text()
    for name in PNGS:
        assert f"]({name})" in md
    assert "| 2 | d2936d79 | idea | [compute] Replace shared-memory tree reductions with warp " \
           "shuffles. | 0.583x | 1.214x | 1.8231 | 1.01 | 0.981 |" in md
    assert "| proposal | no_code | 1 |" in md
    assert "| 3 | 2 | 2 | 1 | 0.545x | 0.545x | 0.583x |" in md     # generation 3
    best_source = RunStore(RECORDED, read_only=True).best()[0].source
    assert "```python\n" + best_source.rstrip() + "\n```" in md

    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3 and 'src="speedup' not in page
    assert "__global__" in page and "&lt;" in page              # the source, escaped
    summary = json.loads((out / "summary.json").read_text())
    assert summary["best"]["candidate_id"] == "d2936d79e447d425"
    assert summary["failures"] == {"no_code": 1}


def test_report_of_a_run_with_crossover_rejection_and_pending(tmp_path):
    c = build_crossover_run(tmp_path / "run")
    md = write_report(tmp_path / "run", tmp_path / "rep").read_text()
    assert png_size(tmp_path / "rep" / "lineage.png") == plots.lineage_px(3)
    assert "| 1 | 87052581 | idea | [memory] use float4 loads \\| vectorize |" in md
    assert f"(with {c['c'].id[:8]}) merge" in md
    assert "| precision | lower_precision | 1 |" in md
    assert "| 2 (running) | 2 | 1 | 1 |" in md
    assert f"| 2 | {c['p'].id[:8]} | idea | pending |" in md


def test_report_of_a_run_with_nothing_accepted_yet(tmp_path):
    run = tmp_path / "run"
    RunStore.create(run, RunConfig(run_dir=str(run)),
                    Problem(name="toy", path=tmp_path / "t.py", source="#\n")).close()
    md = write_report(run, tmp_path / "rep").read_text()
    assert "No kernel was accepted yet." in md
    assert not (tmp_path / "rep" / "best_kernel.py").exists()
    for name in PNGS:
        assert png_size(tmp_path / "rep" / name) in (plots.SPEEDUP_PX, plots.lineage_px(0))
        assert drawn_fraction(tmp_path / "rep" / name) > 0.002      # axes or a message


def test_export_writes_a_loadable_candidate(tmp_path, capsys):
    out = tmp_path / "kernel.py"
    assert main(["export", str(RECORDED), "-o", str(out)]) == 0
    assert "evokernel check softmax" in capsys.readouterr().out
    text = out.read_text()
    header = text.splitlines()[:4]
    assert all(line.startswith("# ") for line in header)
    assert "speedup 0.583x over eager" in header[1] and "idea: [compute]" in header[2]
    tree = ast.parse(text)
    assert "ModelNew" in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    assert static_check(Candidate(source=text)) is None         # what `check` runs first
    best = RunStore(RECORDED, read_only=True).best()[0]
    assert text.endswith(best.source)


def test_export_with_nothing_accepted_fails_cleanly(tmp_path, capsys):
    run = tmp_path / "run"
    RunStore.create(run, RunConfig(run_dir=str(run)),
                    Problem(name="toy", path=tmp_path / "t.py", source="#\n")).close()
    assert main(["export", str(run), "-o", str(tmp_path / "k.py")]) == 1
    assert "no kernel was accepted" in capsys.readouterr().err
    assert not (tmp_path / "k.py").exists()


def _run_below_one(tmp_path, compile_ms=None):
    """seed 0.5x (generation 0), one idea child 0.8x alone in generation 1, one tune child;
    the seed timed against ``compile_ms`` and the others against the run's 0.862."""
    from dataclasses import replace

    from tests.support.runstores import accepted, kernel
    run = tmp_path / "run"
    store = RunStore.create(run, RunConfig(run_dir=str(run)),
                            Problem(name="toy", path=tmp_path / "t.py", source="#\n"))
    store.set_meta("device", {"device": "Fake GPU", "compile_ms": 0.862})
    seed = kernel("seed", "seed", operator="seed")
    child = kernel("child", "unroll", (seed,), generation=1)
    tuned = kernel("tuned", "BLOCK=512", (seed,), operator="tune", generation=2)
    for c, ms, cms in ((seed, 4.0, compile_ms or 0.862), (child, 2.5, 0.862),
                       (tuned, 3.0, 0.862)):
        store.add_candidate(c)
        store.add_result(replace(accepted(c, ms), compile_ms=cms))
    for g, best in ((0, seed), (1, child), (2, tuned)):
        store.end_generation(g, [best.id], best.id, 2.0 / 4.0, 1, 1)
    store.close()
    return run


def test_the_1x_line_shows_when_every_speedup_is_below_one(tmp_path):
    from evokernel.runs.view import load_run
    view = load_run(_run_below_one(tmp_path))
    assert max(e.speedup for e in view.entries) < 1
    for fig in (plots.speedup_figure(view), plots.candidates_figure(view)):
        ax = fig.axes[0]
        eager = [ln for ln in ax.get_lines() if ln.get_label() == "PyTorch eager (1x)"]
        assert len(eager) == 1 and list(eager[0].get_ydata()) == [1.0, 1.0]
        assert ax.get_ylim()[0] < 0.5 and ax.get_ylim()[1] > 1.0


def test_operator_colours_are_the_same_in_every_run(tmp_path):
    from evokernel.runs.view import load_run
    a = plots.operator_colors(load_run(_run_below_one(tmp_path)))            # seed, idea, tune
    other = build_crossover_run(tmp_path / "other")                     # seed, idea, tune, ...
    b = plots.operator_colors(load_run(tmp_path / "other"))
    assert list(a) == ["seed", "idea", "tune"] and list(b)[:3] == ["seed", "idea", "tune"]
    assert all(a[op] == b[op] == plots.OPERATOR_COLORS[op] for op in a)
    assert b["crossover"] == plots.OPERATOR_COLORS["crossover"] and other
    assert plots.operator_color("mine") == plots.operator_color("mine") in plots.OTHER_COLORS
    assert len(set(plots.OPERATOR_COLORS.values())) == len(plots.OPERATOR_COLORS)


def test_a_lone_candidates_best_dot_is_drawn_over_its_median(tmp_path):
    """Generation 1 has one accepted child: its best and median coincide, and the pixel at
    that point is the best dot's green, not the median marker's orange."""
    from matplotlib.colors import to_rgb

    from evokernel.runs.view import load_run
    view = load_run(_run_below_one(tmp_path))
    fig = plots.speedup_figure(view)
    path = tmp_path / "s.png"
    fig.savefig(path, dpi=plots.DPI)
    ax = fig.axes[0]
    x, y = ax.transData.transform((1, 0.8))
    img = imread(path)[..., :3]
    pixel = img[int(round(img.shape[0] - y)), int(round(x))]
    assert np.allclose(pixel, to_rgb("tab:green"), atol=0.08), pixel


def test_show_and_report_print_the_same_numbers(tmp_path, capsys):
    """The seed was timed against 0.8527 ms of torch.compile (before a resume), the rest
    against 0.862: both commands give the seed 0.213x vs torch.compile (0.8527 / 4.0) and say
    that the run holds two measurements."""
    run = _run_below_one(tmp_path, compile_ms=0.8527)
    assert main(["show", str(run)]) == 0
    shown = capsys.readouterr().out
    md = write_report(run, tmp_path / "rep").read_text()
    seed_text = "0.500x vs eager (4.0000 ms), 0.213x vs torch.compile, 1600% of the memory floor"
    assert seed_text in shown and f"| seed kernel | {seed_text};" in md
    both = "0.8620 (the last measurement; 1 of 3 candidates timed against 0.8527"
    assert both in " ".join(shown.split()) and both in md
