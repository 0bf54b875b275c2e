"""`evokernel show`: the recorded H200 run, a run with a crossover lineage, a run still being
written, and one with nothing in it yet. Reading never modifies the run directory."""
import io
import re

from rich.console import Console

from evokernel.cli.main import main
from evokernel.config import RunConfig
from evokernel.problem import Problem
from evokernel.runs.view import load_run
from evokernel.report.show import render
from evokernel.runs.store import RunStore
from tests.support.runstores import RECORDED, accepted, build_crossover_run, files_state, kernel


def rendered(run_dir, width=120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(render(load_run(run_dir), width))
    return console.file.getvalue()


def test_show_recorded_run_summary_lineage_and_failures():
    before = files_state(RECORDED)
    out = rendered(RECORDED)
    assert files_state(RECORDED) == before                 # read-only: nothing written
    for text in ("problem      softmax", "NVIDIA H200", "torch 2.11.0+cu130", "CUDA 13.0",
                 "eager ms     1.0635 (median of 5", "compile ms   not measured",
                 "memory floor 0.5284 ms", "0.583x vs eager (1.8231 ms)",
                 "345% of the memory", "[d2936d79e447d425, generation 2, idea]",
                 "6: 5 accepted, 1 rejected, 0 pending", "12 calls (2 from the replay cache)"):
        assert text in out, text
    lineage = out[out.index("lineage of the best kernel"):out.index("generations (")]
    rows = [line.split() for line in lineage.splitlines() if re.match(r"\s+\d+\s+[0-9a-f]{8}",
                                                                        line)]
    assert [r[:3] for r in rows] == [["0", "bac41274", "seed"], ["1", "1c99452b", "idea"],
                                     ["2", "d2936d79", "idea"]]
    assert "[memory] Use float4 vectorized loads" in lineage     # brackets are not markup
    # speedup, vs parent, ms, norm ratio, max ratio of the last two rounds
    assert rows[1][-5:] == ["0.480x", "0.897x", "2.2707", "1.41", "1.53"]
    assert rows[2][-5:] == ["0.583x", "1.214x", "1.8231", "1.01", "0.981"]
    failures = out[out.index("failures by kind"):]
    assert re.search(r"proposal\s+no_code\s+1", failures)


def test_show_fits_narrow_terminals_without_losing_numbers():
    out = rendered(RECORDED, width=80)
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "0.583x" in out and "0.981" in out and "[compute] Repl" in out


def test_show_crossover_lineage_and_a_run_still_going(tmp_path):
    c = build_crossover_run(tmp_path / "run")
    view = load_run(tmp_path / "run")
    assert [e.id for e in view.lineage()] == [c["seed"].id, c["a"].id, c["b"].id]
    chain, partners = view.lineage_tree()
    assert chain == view.lineage() and [e.id for e in partners] == [c["c"].id]
    out = rendered(tmp_path / "run")
    assert "4.000x vs eager (0.5000 ms), 2.000x vs torch.compile, 200% of the memory floor" in out
    assert f"(with {c['c'].id[:8]}) merge a's loads" in out
    assert "1 of 3 generations done, 1 candidates pending" in out
    assert re.search(r"precision\s+lower_precision\s+1", out)
    assert re.search(r"\n\s+2\*\s+2\s+1\s+1\s+4\.000x", out)   # generation 2 not complete


def test_show_reads_a_live_run_while_it_is_written(tmp_path, capsys):
    run = tmp_path / "live"
    writer = RunStore.create(run, RunConfig(run_dir=str(run)),
                             Problem(name="toy", path=tmp_path / "toy.py", source="#\n"))
    assert main(["show", str(run)]) == 0                  # no candidates, no generation yet
    out = capsys.readouterr().out
    assert "no candidates yet" in out and "no accepted kernel yet" in out
    assert "no generation yet" in out
    seed = kernel("seed", "seed kernel", operator="seed")
    writer.add_candidate(seed)
    assert main(["show", str(run)]) == 0
    assert "1 pending" in capsys.readouterr().out
    writer.add_result(accepted(seed, 1.0))                # the writer is not blocked by readers
    writer.end_generation(0, [seed.id], seed.id, 2.0, 1, 1)
    assert main(["show", str(run)]) == 0
    assert "2.000x vs eager" in capsys.readouterr().out
    writer.close()


def test_show_a_run_created_a_moment_ago(tmp_path, capsys):
    run = tmp_path / "new"
    prob = Problem(name="toy", path=tmp_path / "toy.py", source="# reference\n")
    RunStore.create(run, RunConfig(run_dir=str(run)), prob).close()
    before = files_state(run)
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no candidates yet" in out and "toy" in out
    assert files_state(run) == before


def test_read_only_store_refuses_writes(tmp_path):
    build_crossover_run(tmp_path / "run")
    store = RunStore(tmp_path / "run", read_only=True)
    try:
        store.set_meta("x", 1)
    except Exception as e:
        assert "read-only" in str(e)
    else:
        raise AssertionError("a read-only store accepted a write")
    finally:
        store.close()


def test_show_on_a_folder_without_a_run_says_so(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_every_reason_has_a_kind():
    from evokernel.records import Reason
    from evokernel.runs.view import REASON_KIND
    assert {r.value for r in Reason} - {"ok"} <= set(REASON_KIND)
