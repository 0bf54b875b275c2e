"""Live progress of a search: plain lines when not on a terminal, the rich display on one, counts
by stage from evaluator events, and a lazily made evaluator."""
import io
import re

import pytest
from rich.console import Console

from evokernel.config import RunConfig, SearchConfig
from evokernel.operators.tune import TuneMutation
from evokernel.problem import Problem
from evokernel.cli.progress import ProgressEvaluator, SearchProgress
from evokernel.records import EvalResult, Reason
from evokernel.search.evolution import Evolution
from tests.support.fakes import KERNEL, FakeEvaluator


def search(tmp_path, progress, evaluator):
    prob = Problem(name="p", path=tmp_path / "p.py", source="# ref\n", seed_source=KERNEL)
    cfg = RunConfig(run_dir=str(tmp_path / "run"),
                    search=SearchConfig(population_size=2, offspring_per_generation=4,
                                        generations=2, seed=3))
    evo = Evolution(prob, cfg, evaluator=ProgressEvaluator(evaluator, progress),
                    mutations=[TuneMutation()], on_generation=progress.generation_done)
    with progress:
        progress.begin(0)
        return evo.run()


def test_plain_lines_when_not_a_terminal(tmp_path):
    out = io.StringIO()
    usage = {"prompt_tokens": 1200, "completion_tokens": 300, "cost_usd": 0.25}
    progress = SearchProgress(generations=2, live=False, out=out, usage=lambda: usage,
                              max_tokens=10_000, max_cost_usd=2.0)
    result = search(tmp_path, progress, FakeEvaluator())
    lines = out.getvalue().splitlines()
    done = [line for line in lines if ": done:" in line]
    assert [line.split(":")[0].split()[1] for line in done] == ["0/2", "1/2", "2/2"]
    assert "proposals 1 · built 1 · gated 1 · timed 1" in done[0]
    best = result.best[1].speedup
    assert f"best {best:.3f}x vs eager" in done[-1]
    assert "tokens 1,500 / 10,000 · cost $0.2500 / $2.00" in done[-1]
    assert any(re.match(r"gen   1/2: evaluating \d+ candidates", line) for line in lines)


def test_rich_display_on_a_terminal(tmp_path):
    console = Console(file=io.StringIO(), force_terminal=True, width=140, color_system=None)
    progress = SearchProgress(generations=2, console=console)
    assert progress.live
    result = search(tmp_path, progress, FakeEvaluator())
    screen = console.file.getvalue()
    assert "gen   2" in screen and re.search(r"proposals \d · built \d · gated \d", screen)
    assert f"best {result.best[1].speedup:.3f}x vs eager" in screen
    assert "tokens" not in screen                          # no LLM: no token line


class EventEvaluator(FakeEvaluator):
    """Reports stages like CudaEvaluator; the second candidate's build fails."""

    def evaluate(self, candidates, on_result=None, on_event=None):
        out = []
        for i, c in enumerate(candidates):
            on_event("build_started", c.id)
            if i == 1:
                on_event("build_failed", c.id)
                r = EvalResult.failure(c.id, Reason.BUILD_ERROR, "nvcc")
            else:
                on_event("built", c.id)
                on_event("gating", c.id)
                r = self._judge(c)
                on_event("gated", c.id)
                if r.accepted:
                    on_event("timed", c.id)
            on_result(r)
            out.append(r)
        return out


def test_counts_by_stage_from_events(tmp_path):
    out = io.StringIO()
    progress = SearchProgress(generations=2, live=False, out=out)
    search(tmp_path, progress, EventEvaluator())
    gen1 = next(line for line in out.getvalue().splitlines()
                if line.startswith("gen   1/2: done"))
    n, built, gated = map(int, re.search(r"proposals (\d+) · built (\d+) \(1 failed\) · "
                                         r"gated (\d+)", gen1).groups())
    assert n >= 2 and built == n and gated == n - 1       # the failed build never reached a GPU


def test_evaluator_is_made_on_first_use_and_closed(tmp_path):
    made = []

    def make():
        made.append(1)
        return FakeEvaluator()
    wrapped = ProgressEvaluator(make, SearchProgress(generations=0, live=False,
                                                     out=io.StringIO()))
    assert made == []
    wrapped.close()                                        # never made: nothing to close
    assert wrapped.info["device"] == "fake GPU" and made == [1]


def test_a_display_error_never_costs_a_result(tmp_path):
    class Broken(SearchProgress):
        def result(self, r):
            raise RuntimeError("display broke")
    got = []
    wrapped = ProgressEvaluator(FakeEvaluator(), Broken(generations=0, live=False,
                                                         out=io.StringIO()))
    from evokernel.records import Candidate
    res = wrapped.evaluate([Candidate(source=KERNEL)], on_result=got.append)
    assert res[0].accepted and got == res


@pytest.mark.parametrize("baseline", ["eager", "compile"])
def test_best_uses_the_fitness_baseline(baseline):
    progress = SearchProgress(generations=1, live=False, out=io.StringIO(), baseline=baseline)
    progress.result(EvalResult.from_dict({"candidate_id": "a" * 16, "verdict": "accept",
                                          "reason": "ok", "reference_ms": 2.0,
                                          "candidate_ms": 1.0, "compile_ms": 3.0}))
    assert progress.best == ((2.0 if baseline == "eager" else 3.0), "a" * 16)
    assert f"vs {baseline}" in progress.status_text()


def test_operator_calls_show_while_proposing():
    console = Console(file=io.StringIO(), force_terminal=True, width=140, color_system=None)
    progress = SearchProgress(generations=1, console=console)
    progress.begin(1)
    progress.planned(1, 8)
    progress.call_done(1, 6)
    progress.call_done(1, 0)
    console.print(progress)
    assert "proposing: 2/8 operator calls done, 6 children" in console.file.getvalue()


def test_cli_run_reports_progress_in_plain_lines(tmp_path, monkeypatch, capsys):
    """`evokernel run` wired to a fake evaluator (no GPU): plain lines, then the summary."""
    import evokernel.cli.main as cli
    import evokernel.cli.options as options
    import evokernel.engine.evaluator as evaluator
    made = []

    def fake(problem, config, compile_ms=None):
        made.append(problem.name)
        return FakeEvaluator()
    monkeypatch.setattr(options, "require_gpu", lambda *a: None)
    monkeypatch.setattr(evaluator, "CudaEvaluator", fake)
    run_dir = tmp_path / "run"
    assert cli.main(["run", "softmax", "--generations", "1", "--population", "2",
                     "--offspring", "2", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert made == ["softmax"]
    assert re.search(r"gen   0/1: done: proposals 1 · built 1 · gated 1 · timed 1", out)
    assert "gen   1/1: done:" in out and f"run directory: {run_dir}" in out
    assert cli.main(["show", str(run_dir)]) == 0
    assert "fake GPU" in capsys.readouterr().out


def test_a_resumed_run_keeps_its_torch_compile_baseline(tmp_path, monkeypatch, capsys):
    """`run --resume` builds its evaluator with the run's stored torch.compile time, so the
    candidates before and after the resume are compared with one baseline (a run that measured
    it again on resume showed 0.425x in show and 0.430x in report for one kernel)."""
    import json

    import evokernel.cli.main as cli
    import evokernel.cli.options as options
    import evokernel.engine.evaluator as evaluator
    from evokernel.runs.store import RunStore
    made = []

    def fake(problem, config, compile_ms=None):
        made.append(compile_ms)
        return FakeEvaluator()
    monkeypatch.setattr(options, "require_gpu", lambda *a: None)
    monkeypatch.setattr(evaluator, "CudaEvaluator", fake)
    run_dir = tmp_path / "run"
    assert cli.main(["run", "softmax", "--generations", "1", "--population", "2",
                     "--offspring", "2", "--run-dir", str(run_dir)]) == 0
    config = json.loads((run_dir / "config.json").read_text())
    config["search"]["generations"] = 2                   # one more generation to make
    (run_dir / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(RunStore, "compile_baseline_ms", lambda self: 0.8527)
    assert cli.main(["run", "--resume", str(run_dir)]) == 0
    assert made == [None, 0.8527]
    assert "gen   2/2: done:" in capsys.readouterr().out
