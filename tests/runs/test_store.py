"""The run store: records round-trip, a live run can be read, a second create is refused."""
import sqlite3

import pytest

from evokernel.config import RunConfig, SearchConfig
from evokernel.errors import ConfigError
from evokernel.problem import Problem
from evokernel.records import Candidate, ErrorCheck, EvalResult, Reason, Verdict
from evokernel.runs.store import RunStore


def make(tmp_path):
    prob = Problem(name="p", path=tmp_path / "p.py", source="# reference\n")
    cfg = RunConfig(run_dir=str(tmp_path / "run"), search=SearchConfig(population_size=2))
    return RunStore.create(tmp_path / "run", cfg, prob), cfg


def test_records_round_trip(tmp_path):
    store, cfg = make(tmp_path)
    seed = Candidate(source="class ModelNew: pass  # seed\n", idea="seed", operator="seed")
    child = Candidate(source="class ModelNew: pass  # child\n", idea="use float4 loads",
                      parent_ids=(seed.id,), operator="idea", generation=1)
    check = ErrorCheck("offset", 0, 1e-6, 2e-5, 1e-7, 1e-6, 10.0, 20.0, False)
    bad = EvalResult.failure(child.id, Reason.UNSTABLE_DISTRIBUTION, "offset: norm 10x",
                             distribution="offset", seed=0, norm_error_ratio=10.0,
                             max_error_ratio=20.0, tolerance_factor=16.0, checks=(check,),
                             flags=("fp16:__half",), build_s=3.5)
    good = EvalResult(candidate_id=seed.id, verdict=Verdict.ACCEPT, reason=Reason.OK,
                      reference_ms=2.0, candidate_ms=1.0, floor_ms=0.25)
    for c in (seed, child):
        store.add_candidate(c)
    store.add_result(good)
    store.add_result(bad)
    store.end_generation(0, [seed.id], seed.id, 2.0, 1, 1, rng_state=[3, [1, 2], None])
    store.record_llm_call({"purpose": "ideas", "prompt_tokens": 10, "completion_tokens": 5,
                           "cost_usd": 0.01, "cached": False})
    store.record_llm_call({"purpose": "implement", "prompt_tokens": 7, "completion_tokens": 3,
                           "cost_usd": 0.5, "cached": True})

    again = RunStore(tmp_path / "run")           # a reader, as `evokernel show` on a live run
    assert again.candidates() == {seed.id: seed, child.id: child}
    assert again.results() == {seed.id: good, child.id: bad}
    assert again.results()[seed.id].speedup == 2.0 and again.results()[seed.id].pct_of_floor == 400
    assert again.config() == cfg
    assert again.generations()[0]["population"] == [seed.id]
    usage = again.llm_usage()
    assert usage["calls"] == 2 and usage["prompt_tokens"] == 10 and usage["cached"] == 1
    assert usage["cost_usd"] == pytest.approx(0.01)
    assert again.best() == (seed, good)
    out = again.export_best()
    assert out.read_text().endswith(seed.source) and "2.000x" in out.read_text()


def test_create_twice_is_refused_and_open_needs_a_run(tmp_path):
    make(tmp_path)
    with pytest.raises(ConfigError, match="already holds a run"):
        make(tmp_path)
    with pytest.raises(ConfigError, match="not a run directory"):
        RunStore(tmp_path / "elsewhere")


def test_an_empty_run_file_is_neither_created_over_nor_offered_for_resume(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.sqlite").touch()
    with pytest.raises(ConfigError, match="empty file .*delete it or choose another"):
        make(tmp_path)
    with pytest.raises(ConfigError, match="empty file"):
        RunStore(tmp_path / "run")


def test_failure_speedup_is_zero_not_nan():
    r = EvalResult.failure("x", Reason.TIMEOUT, "hang")
    assert r.speedup == 0.0 and r.compile_speedup == 0.0 and r.pct_of_floor is None


def test_create_writes_the_store_whole(tmp_path):
    """run.sqlite appears only with its tables and the problem recorded (no 0-byte window), and
    no temporary file is left beside it."""
    store, _ = make(tmp_path)
    store.close()
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("run.sqlite")) == \
        ["run.sqlite"]
    db = sqlite3.connect(run / "run.sqlite")
    tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"candidates", "results", "generations", "llm_calls", "meta"} <= tables
    assert db.execute("SELECT value FROM meta WHERE key='problem'").fetchone() is not None
    db.close()
    assert RunStore(run, read_only=True).meta()["problem"]["name"] == "p"


def _empty(db):
    db.write_bytes(b"")


def _foreign(db):
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
    con.commit()
    con.close()


def _corrupt(db):
    db.write_bytes(b"SQLite format 3\x00" + b"\x13" * 4000)


def _not_sqlite(db):
    db.write_bytes(b"this is not sqlite" * 100)


def _other_layout(db):
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE candidates (id TEXT); CREATE TABLE results (x);"
                      "CREATE TABLE generations (g); CREATE TABLE llm_calls (d);"
                      "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);")
    con.close()


def _no_problem(db):
    con = sqlite3.connect(db)
    con.execute("DELETE FROM meta WHERE key='problem'")
    con.commit()
    con.close()


@pytest.mark.parametrize("spoil, message", [
    (_empty, "an empty file (0 bytes)"),
    (_foreign, "a SQLite file of another program (tables: photos)"),
    (_corrupt, "not a readable run store"),
    (_not_sqlite, "not a SQLite file"),
    (_other_layout, "another layout of table 'candidates'"),
    (_no_problem, "incomplete run store (no problem recorded"),
])
@pytest.mark.parametrize("read_only", [True, False])
def test_a_store_that_is_not_one_is_refused_and_left_as_it_was(tmp_path, spoil, message,
                                                               read_only):
    store, _ = make(tmp_path)
    store.close()
    db = tmp_path / "run" / "run.sqlite"
    if spoil in (_foreign, _other_layout):
        db.unlink()
    spoil(db)
    before = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    with pytest.raises(ConfigError) as e:
        RunStore(db.parent, read_only=read_only)
    assert str(db) in str(e.value) and message in str(e.value)
    assert {p.name: p.read_bytes() for p in db.parent.iterdir()} == before


def test_the_compile_baseline_is_reused_only_on_the_gpu_it_was_measured_on(tmp_path,
                                                                            monkeypatch):
    import torch
    store, _ = make(tmp_path)
    assert store.compile_baseline_ms() is None                     # nothing measured yet
    store.set_meta("device", {"device": "NVIDIA H200", "torch": torch.__version__,
                              "compile_ms": 0.8527})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    assert store.compile_baseline_ms() == 0.8527
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA A100")
    assert store.compile_baseline_ms() is None                     # another GPU: measure again
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert store.compile_baseline_ms() is None
