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
