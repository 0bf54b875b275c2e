"""scripts/dask_vs_local.py's reuse of the local engine's half from the same GPU call
(--local-gate, --local-bench): what it reads, and every bad file named before any GPU work."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dask_vs_local.py"


@pytest.fixture(scope="module")
def dvl():
    spec = importlib.util.spec_from_file_location("dask_vs_local", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def row(fixture, verdict, reason, n=1):
    return {"fixture": fixture, "verdict": verdict, "reason": reason, "pass": n}


def test_a_gate_reports_verdicts_over_every_pass(dvl, tmp_path):
    rows = [row("a", "reject", "side_stream", n) for n in (1, 2)] + [row("b", "accept", "ok")]
    got = dvl.report_verdicts(write(tmp_path / "g.json", {"rows": rows}))
    assert got == {"a": ("reject", "side_stream"), "b": ("accept", "ok")}


@pytest.mark.parametrize("content, said", [
    (b"{bad", "not valid JSON"), (b"", "not valid JSON"), (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "holds a JSON list, not a gate report"),
    (b'{"rows": {}}', "no 'rows' list"),
    (b'{"rows": [{"fixture": "a"}]}', "row 0 lacks fixture, verdict or reason")])
def test_a_file_that_is_not_a_gate_report_is_named_in_one_line(dvl, tmp_path, content, said):
    path = tmp_path / "g.json"
    path.write_bytes(content)
    with pytest.raises(SystemExit, match=rf"g\.json: .*{re.escape(said)}"):
        dvl.report_verdicts(path)
    with pytest.raises(SystemExit, match=r": a folder, not a gate report"):
        dvl.report_verdicts(tmp_path)


def test_a_report_without_todays_fixtures_is_refused(dvl, tmp_path):
    fixtures = dvl.gate_report().discover(dvl.ROOT)
    rows = [row(f.name, f.verdict, f.reason) for f in fixtures[1:]]
    with pytest.raises(SystemExit, match=rf"lacks 1 of today's {len(fixtures)} gate fixtures "
                                         rf"\({re.escape(fixtures[0].name)}\)"):
        dvl.report_verdicts(write(tmp_path / "g.json", {"rows": rows}), fixtures)
    rows.append(row(fixtures[0].name, fixtures[0].verdict, fixtures[0].reason))
    got = dvl.report_verdicts(write(tmp_path / "g.json", {"rows": rows}), fixtures)
    assert len(got) == len(fixtures)


def test_a_report_that_disagrees_with_itself_or_is_empty_is_named(dvl, tmp_path):
    rows = [row("a", "reject", "side_stream", 1), row("a", "accept", "ok", 2)]
    with pytest.raises(SystemExit, match=r"g\.json: verdicts differ between passes for a"):
        dvl.report_verdicts(write(tmp_path / "g.json", {"rows": rows}))
    with pytest.raises(SystemExit, match=r"e\.json: no gate report rows"):
        dvl.report_verdicts(write(tmp_path / "e.json", {"rows": []}))


def test_a_bench_cold_phase_must_be_over_the_same_variants(dvl, tmp_path):
    from evokernel.bench.plan import BenchPlan, throughput_variants
    plan = BenchPlan(results_dir=tmp_path, work_dir=tmp_path, phases=("cold",))
    variants = throughput_variants(plan.throughput)
    cold = {"phase": "cold", "candidates": len(variants), "per_min": 12.5}
    same = [{"problem": v.problem, "id": v.candidate.id} for v in variants]
    good = write(tmp_path / "b.json", {"phases": {"cold": cold}, "candidates": same})
    assert dvl.bench_cold(good, variants) == cold
    other = write(tmp_path / "o.json", {"phases": {"cold": cold}, "candidates": same[1:]})
    with pytest.raises(SystemExit, match=r"o\.json: its cold phase measured other candidates"):
        dvl.bench_cold(other, variants)
    none = write(tmp_path / "n.json", {"phases": {"warm": cold}, "candidates": same})
    with pytest.raises(SystemExit, match=r"n\.json: no cold phase"):
        dvl.bench_cold(none, variants)
    forms = same + [{"problem": v.problem, "id": v.candidate.id + "n", "form": "nvrtc"}
                    for v in variants]                  # --phases forms lists both forms
    assert dvl.bench_cold(write(tmp_path / "f.json", {"phases": {"cold": cold},
                                                      "candidates": forms}), variants) == cold
    zero = write(tmp_path / "z.json", {"phases": {"cold": dict(cold, per_min=0)},
                                       "candidates": same})
    with pytest.raises(SystemExit, match=r"z\.json: its cold phase has no positive per_min"):
        dvl.bench_cold(zero, variants)


def test_bad_given_files_stop_it_before_the_gpu(dvl, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # importing torch would fail the test
    with pytest.raises(SystemExit, match=r"missing\.json: no such file"):
        dvl.main(["--phases", "gate", "--local-gate", str(tmp_path / "missing.json")])
    bad = write(tmp_path / "bad.json", {"rows": []})
    with pytest.raises(SystemExit, match="no gate report rows"):
        dvl.main(["--phases", "gate", "--local-gate", str(bad)])
    with pytest.raises(SystemExit, match="--local-gate goes with --phases gate"):
        dvl.main(["--phases", "cold", "--local-gate", str(bad)])
    with pytest.raises(SystemExit):
        dvl.main(["--phases", "cold", "--rounds", "0"])
    with pytest.raises(SystemExit):
        dvl.main(["--phases", "cold", "--rounds", "2", "--local-bench", str(bad)])
    with pytest.raises(SystemExit):
        dvl.main(["--phases", "cold", "--throughput", "layernorm=0"])


def test_cold_rounds_alternate_the_order_and_pool_the_ratio(dvl, tmp_path, monkeypatch):
    import evokernel.bench.run as bench_run
    import evokernel.bench.throughput as throughput
    calls = []

    class Stats:
        def __init__(self, n, s):
            self.n, self.s = n, s

        def to_dict(self):
            return {"candidates": self.n, "accepted": self.n, "evaluate_s": self.s,
                    "setup_s": 1.0, "per_min": 60.0 * self.n / self.s}

    def phase(name, plan, variants, cache, deps, report):
        engine = "dask" if "dask" in str(cache) else "local"
        calls.append((engine, cache.name, len(variants)))
        # the engine that goes second is slower: an order effect, not an engine one
        return Stats(len(variants), 60.0 if len(calls) % 2 else 90.0)

    monkeypatch.setattr(throughput, "throughput_phase", phase)
    @dataclasses.dataclass
    class Deps:
        prepare_cache: object = lambda p: p  # noqa: E731
        make_evaluator: object = None

    monkeypatch.setattr(bench_run, "cuda_deps", lambda plan: Deps())
    rep = dvl.cold_phase(tmp_path, "tcp://x", tmp_path, 8, rounds=2,
                         throughput=(("layernorm", 3), ("matmul", 1)))
    assert [(e, c) for e, c, _ in calls] == [("local", "cold-local-0"), ("dask", "cold-dask-0"),
                                             ("dask", "cold-dask-1"), ("local", "cold-local-1")]
    assert {n for _, _, n in calls} == {4}
    assert rep["dask_over_local"] == 1.0 and rep["passed"]       # 150 s each: same pooled
    assert [r["first"] for r in rep["rounds"]] == ["local", "dask"]
    assert rep["local"]["candidates"] == 8 and rep["local"]["evaluate_s"] == 150.0
    assert rep["throughput"] == [["layernorm", 3], ["matmul", 1]]
    assert rep["rounds"][1]["dask"]["evaluate_s"] == 60.0     # each round whole, notes and all
    assert "dask first: 2.67, 4.00" in dvl.markdown({"date": "d", "cold": rep})
