"""`evokernel advance` on the CPU: several batch-mode runs resumed (or started from RUN.args) in
one process, one evaluator per problem shared by its runs and closed once, a bad run named while
the others go on. The GPU check and the CUDA evaluator are the demo's fakes (tests.cli.
test_llm_cli.no_gpu_needed); the replies are the scripted LLM's."""
import pytest

from evokernel.cli import main as cli
from evokernel.demo.fake_evaluator import FakeEvaluator
from evokernel.demo.scripted_llm import scripted_reply
from evokernel.llm.batch import write_replies
from evokernel.runs.store import RunStore
from tests.cli.test_llm_cli import no_gpu_needed  # noqa: F401  (a fixture)

FLAGS = "--model openai/frontier-stand-in --no-compile-baseline --generations 1"


@pytest.fixture
def made(monkeypatch, no_gpu_needed):  # noqa: F811
    """The evaluators the factory made, each recording whether it was closed."""
    import evokernel.engine.factory as factory
    out = []

    class Recorded(FakeEvaluator):
        closed = 0

        def close(self):
            self.closed += 1
            super().close()

    def make(problem, config, **kw):
        out.append(Recorded(problem))
        out[-1].kw, out[-1].config = kw, config
        return out[-1]
    monkeypatch.setattr(factory, "make_evaluator", make)
    return out


def test_runs_of_one_problem_share_one_evaluator_across_start_and_resume(tmp_path, made, capsys):
    root = tmp_path / "study"
    root.mkdir()
    runs = {"softmax-best_of_n-s0": "softmax --strategy best_of_n --seed 0 --offspring 2",
            "softmax-sequential-s1": "softmax --strategy sequential --seed 1",
            "layernorm-branching-s0": "layernorm --strategy branching --population 2"}
    for name, line in runs.items():
        (root / f"{name}.args").write_text(f"{line} {FLAGS}\n")
    specs = [f"{root / n}={root / n}-batch" for n in runs]
    assert cli.main(["advance", *specs]) == 0                 # started: each waits for replies
    out = capsys.readouterr().out
    assert out.count("(llm_batch)") == 3
    assert len(made) == 2 and all(ev.closed == 1 for ev in made)   # softmax's two runs: one
    problems = sorted(ev.problem.name for ev in made)
    assert problems == ["layernorm", "softmax"]
    for name in runs:
        write_replies(root / f"{name}-batch", scripted_reply,
                      answered_by="evokernel.demo.scripted_llm", scripted=True)
        assert cli.main(["llm", "import", str(root / f"{name}-batch"), str(root / name)]) == 0
    capsys.readouterr()
    assert cli.main(["advance", *specs]) in (0, 1)              # resumed, again shared
    assert len(made) == 4 and all(ev.closed == 1 for ev in made)
    for name, line in runs.items():
        store = RunStore(root / name, read_only=True)
        try:
            assert store.config().search.strategy == (line.split("--strategy ")[1].split()[0]
                                                      if "--strategy" in line else "evokernel")
            assert store.generations()            # generation 0 was evaluated
        finally:
            store.close()


def test_eval_timeout_is_stored_by_a_new_run_and_replaces_it_for_one_resumed_step(
        tmp_path, made, capsys):
    """A hung kernel spends the whole evaluation timeout (300 s of a 30-minute device session
    on the H200, 2026-12-02): a step may shorten it without rewriting the run's config.json,
    and a bad value is named by its flag, with the other runs going on."""
    run, batch = tmp_path / "softmax", tmp_path / "softmax-batch"
    (tmp_path / "softmax.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", "--eval-timeout", "45", f"{run}={batch}"]) == 0
    assert made[-1].config.eval_timeout_s == 45
    write_replies(batch, scripted_reply, answered_by="evokernel.demo.scripted_llm",
                  scripted=True)
    assert cli.main(["llm", "import", str(batch), str(run)]) == 0
    capsys.readouterr()
    assert cli.main(["advance", "--eval-timeout", "20", f"{run}={batch}"]) in (0, 1)
    assert made[-1].config.eval_timeout_s == 20                   # this step's evaluator
    resume = [ln for ln in capsys.readouterr().out.splitlines() if "run --resume" in ln]
    assert resume and all(ln.endswith(" --eval-timeout 20") for ln in resume)   # kept
    store = RunStore(run, read_only=True)
    try:
        assert store.config().evaluation.eval_timeout_s == 45     # config.json keeps its own
    finally:
        store.close()
    made.clear()
    other, other_batch = tmp_path / "layernorm", tmp_path / "layernorm-batch"
    (tmp_path / "layernorm.args").write_text(f"layernorm {FLAGS}\n")
    assert cli.main(["advance", "--eval-timeout", "0.5", f"{run}={batch}",
                     f"{other}={other_batch}"]) == 2
    err = capsys.readouterr().err                 # said once, before any run
    assert err.count("--eval-timeout must be a finite number of seconds >= 1, got 0.5") == 1
    assert not made and not other.exists()
    assert cli.main(["run", "--resume", str(run), "--llm-batch", str(batch),
                     "--eval-timeout", "-1"]) == 2
    assert "--eval-timeout must be a finite number of seconds >= 1, got -1.0" in \
        capsys.readouterr().err


def test_a_run_that_cannot_start_is_named_and_the_others_go_on(tmp_path, made, capsys):
    (tmp_path / "good.args").write_text(f"softmax {FLAGS}\n")
    (tmp_path / "empty.args").write_text("\n")
    specs = [f"{tmp_path / 'missing'}={tmp_path / 'm-batch'}",
             f"{tmp_path / 'empty'}={tmp_path / 'e-batch'}",
             f"{tmp_path / 'bad'}",
             f"{tmp_path / 'good'}={tmp_path / 'good-batch'}"]
    assert cli.main(["advance", *specs]) == 2
    captured = capsys.readouterr()
    assert "expected RUN_DIR=BATCH_DIR" in captured.err                  # the malformed spec
    assert cli.main(["advance", *specs[:2], specs[3]]) == 2
    captured = capsys.readouterr()
    assert f"{tmp_path / 'missing'}: no run there (no run.sqlite) and no args file " in captured.err
    assert "empty.args: empty; expected PROBLEM and run flags" in captured.err
    assert "(llm_batch)" in captured.out and (tmp_path / "good" / "run.sqlite").is_file()


def test_bad_args_files_and_folders_are_named_before_any_run_and_the_good_one_runs(
        tmp_path, made, capsys):
    (tmp_path / "quote.args").write_text(f"softmax 'unclosed {FLAGS}\n")
    (tmp_path / "bin.args").write_bytes(b"softmax \xff\xfe\n")
    (tmp_path / "flag.args").write_text(f"softmax --strategy foo {FLAGS}\n")
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "afile.args").write_text(f"softmax {FLAGS}\n")
    (tmp_path / "good.args").write_text(f"# the arm\nsoftmax --strategy sequential\n{FLAGS}\n")
    specs = [f"{tmp_path / n}={tmp_path / n}-batch"
             for n in ("quote", "bin", "flag", "afile", "good")]
    assert cli.main(["advance", *specs]) == 2
    err = capsys.readouterr()
    assert f"{tmp_path / 'quote.args'}: No closing quotation" in err.err
    assert f"{tmp_path / 'bin.args'}: not UTF-8 text" in err.err
    assert f"{tmp_path / 'flag.args'}: not valid `evokernel run` arguments" in err.err
    assert f"{tmp_path / 'afile'}: not a folder (the run folder goes there)" in err.err
    assert "(llm_batch)" in err.out and len(made) == 1           # comments and lines joined
    store = RunStore(tmp_path / "good", read_only=True)
    assert store.config().search.strategy == "sequential"
    store.close()
    assert not (tmp_path / "quote").exists() and not (tmp_path / "flag").exists()


def test_a_run_named_twice_or_a_bad_spec_is_named_and_the_others_go_on(tmp_path, made, capsys,
                                                                       monkeypatch):
    for name in ("d2", "other"):
        (tmp_path / f"{name}.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", f"{tmp_path / 'd2'}={tmp_path / 'b'}",
                     f"{tmp_path}/./d2={tmp_path / 'b'}", "noeq",
                     f"{tmp_path / 'other'}={tmp_path / 'ob'}"]) == 2
    out = capsys.readouterr()
    assert "named twice" in out.err and "'noeq': expected RUN_DIR=BATCH_DIR" in out.err
    assert out.out.count("(llm_batch)") == 2 and len(made) == 1     # d2 once, and other
    monkeypatch.chdir(tmp_path / "other")                         # "." is the folder itself
    assert cli.main(["advance", f".={tmp_path / 'ob'}"]) == 0


def test_a_run_that_fails_on_its_way_leaves_the_others_going(tmp_path, made, capsys,
                                                             monkeypatch):
    import evokernel.cli.run as run_cli
    from evokernel.errors import EvokernelError
    real = run_cli.run_with_progress

    def fail_first(problem, config, **kw):
        if config.run_dir.endswith("first"):
            raise EvokernelError(f"{config.run_dir}: the disk is full (planted)")
        return real(problem, config, **kw)
    monkeypatch.setattr(run_cli, "run_with_progress", fail_first)
    for name in ("first", "second"):
        (tmp_path / f"{name}.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", *(f"{tmp_path / n}={tmp_path / n}-b"
                                  for n in ("first", "second"))]) == 2
    out = capsys.readouterr()
    assert out.err.count("first") == 1 and "the disk is full (planted)" in out.err
    assert "(llm_batch)" in out.out and (tmp_path / "second" / "run.sqlite").is_file()


def test_an_args_path_that_is_a_directory_is_named_as_one_not_as_missing(tmp_path, made, capsys):
    (tmp_path / "dir.args").mkdir()
    (tmp_path / "good.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", f"{tmp_path / 'dir'}={tmp_path / 'dir-b'}",
                     f"{tmp_path / 'good'}={tmp_path / 'good-b'}"]) == 2
    out = capsys.readouterr()
    assert f"{tmp_path / 'dir.args'}: a directory, not a file" in out.err
    assert "no args file" not in out.err and "(llm_batch)" in out.out


def test_an_args_file_with_backslash_continued_lines_is_read_as_a_shell_would(
        tmp_path, made, capsys):
    (tmp_path / "cont.args").write_text("softmax --strategy sequential \\\n"
                                        "  # a comment line between\n"
                                        f"  {FLAGS} \\  \n"      # spaces after the backslash
                                        "  --se\\\ned 3\n")         # a word split: joined
    assert cli.main(["advance", f"{tmp_path / 'cont'}={tmp_path / 'cont-b'}"]) == 0
    assert "(llm_batch)" in capsys.readouterr().out
    store = RunStore(tmp_path / "cont", read_only=True)
    try:
        assert (store.config().search.strategy, store.config().search.seed) == ("sequential", 3)
    finally:
        store.close()


def advance_beside_a_good_run(tmp_path, capsys, bad):
    """`advance` of the runs NAME.args = LINE of ``bad`` and of one good run (exit status 2);
    what it printed."""
    for name, line in {**bad, "good": f"softmax {FLAGS}"}.items():
        (tmp_path / f"{name}.args").write_text(line + "\n")
    assert cli.main(["advance", *(f"{tmp_path / n}={tmp_path / n}-b"
                                  for n in (*bad, "good"))]) == 2
    return capsys.readouterr()


def test_help_in_an_args_file_is_named_as_no_run_flag_and_the_others_go_on(tmp_path, made,
                                                                           capsys):
    out = advance_beside_a_good_run(tmp_path, capsys, {"help": f"softmax --help {FLAGS}",
                                                       "h": f"softmax {FLAGS} -h"})
    for name in ("help", "h"):
        assert f"{tmp_path / name}.args: --help is not a run flag here" in out.err
    assert "show this help message" not in out.out + out.err                # no help printed
    assert "(llm_batch)" in out.out and len(made) == 1
    assert not (tmp_path / "help").exists() and not (tmp_path / "h").exists()


def test_run_dir_or_llm_batch_in_an_args_file_is_refused_by_name_and_the_others_go_on(
        tmp_path, made, capsys):
    out = advance_beside_a_good_run(tmp_path, capsys, {
        "rd": f"softmax --run-dir {tmp_path / 'elsewhere'} {FLAGS}",
        "lb": f"softmax {FLAGS} --llm-batch={tmp_path / 'eb'}"})
    assert f"{tmp_path / 'rd.args'}: --run-dir not allowed in an args file: " in out.err
    assert f"{tmp_path / 'lb.args'}: --llm-batch not allowed in an args file: " in out.err
    assert "decides the run and batch folders" in out.err
    assert "(llm_batch)" in out.out and len(made) == 1
    for gone in ("rd", "rd-b", "elsewhere", "lb", "lb-b", "eb"):
        assert not (tmp_path / gone).exists()


def test_a_runs_stored_compile_baseline_is_read_once(tmp_path, made, capsys, monkeypatch):
    import evokernel.cli.advance as advance
    reads = []

    def stored(run_dir):                       # a planted baseline; each read counted
        reads.append(str(run_dir))
        return 0.25
    monkeypatch.setattr(advance, "stored_compile_ms", stored)
    for name in ("one", "two"):
        (tmp_path / f"{name}.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", *(f"{tmp_path / n}={tmp_path / n}-b"
                                  for n in ("one", "two"))]) == 0
    assert sorted(reads) == [str(tmp_path / "one"), str(tmp_path / "two")]       # once a run
    assert len(made) == 1 and made[0].kw["compile_ms"] == 0.25


def test_a_resume_before_the_replies_says_it_reused_the_export_not_wrote_it(tmp_path, made,
                                                                            capsys):
    (tmp_path / "r.args").write_text(f"softmax {FLAGS}\n")
    spec = f"{tmp_path / 'r'}={tmp_path / 'b'}"
    assert cli.main(["advance", spec]) == 0
    export = tmp_path / "b" / "r-g001-r01.jsonl"
    assert f"(round 1) written to {export}" in capsys.readouterr().err
    assert cli.main(["advance", spec]) == 0                 # no replies yet: the same requests
    err = capsys.readouterr().err
    assert f"(round 1) in the existing {export}, reused" in err
    assert f"in the existing {export}, reused (the same requests as written there before; " \
           "not written again); import the replies" in err
    assert "written to" not in err and sorted((tmp_path / "b").glob("*.jsonl")) == [export]


def test_a_bom_and_a_double_dash_in_an_args_file_are_read_and_submit_refused(tmp_path, made,
                                                                              capsys):
    """A byte-order mark (Windows editors) is dropped; words after `--` keep the spec's
    folders out of them; --llm-batch-submit is refused (each step resumes in the mode that
    writes requests out, so the submit mode would be lost after the first)."""
    (tmp_path / "bom.args").write_text(f"\ufeffsoftmax {FLAGS}\n", encoding="utf-8")
    (tmp_path / "dd.args").write_text(f"{FLAGS} --seed 3 -- softmax\n")
    out = advance_beside_a_good_run(tmp_path, capsys, {
        "sub": f"softmax {FLAGS} --llm-batch-submit"})
    assert f"{tmp_path / 'sub.args'}: --llm-batch-submit not allowed in an args file" in out.err
    assert cli.main(["advance", "--eval-timeout", "30",     # set, never after the `--`
                     *(f"{tmp_path / n}={tmp_path / n}-b" for n in ("bom", "dd"))]) == 0
    assert capsys.readouterr().out.count("(llm_batch)") == 2
    store = RunStore(tmp_path / "dd", read_only=True)
    try:
        assert store.config().search.seed == 3
        assert store.config().evaluation.eval_timeout_s == 30
    finally:
        store.close()


def test_the_root_dotdot_and_same_named_runs_sharing_a_batch_folder(tmp_path, made, capsys,
                                                                      monkeypatch):
    """`/` as a run folder is named (it raised ValueError and stopped every run); `..` finds
    the args file beside the folder it means; two runs of one name in one batch folder are
    refused, as their request files would collide."""
    (tmp_path / "study" / "arm1" / "sub").mkdir(parents=True)
    (tmp_path / "study" / "arm1.args").write_text(f"softmax {FLAGS}\n")
    for d in ("s1", "s2"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "arm.args").write_text(f"softmax {FLAGS}\n")
    monkeypatch.chdir(tmp_path / "study" / "arm1" / "sub")
    assert cli.main(["advance", f"/={tmp_path / 'root-b'}", f"..={tmp_path / 'arm1-b'}",
                     f"{tmp_path / 's1' / 'arm'}={tmp_path / 'shared'}",
                     f"{tmp_path / 's2' / 'arm'}={tmp_path / 'shared'}"]) == 2
    out = capsys.readouterr()
    assert "the root folder cannot be a run folder" in out.err
    assert "both runs are named 'arm'" in out.err
    assert out.out.count("(llm_batch)") == 2                    # arm1 (through ..) and s1/arm
    assert (tmp_path / "study" / "arm1" / "run.sqlite").is_file()
    assert not (tmp_path / "s2" / "arm").exists()


def test_no_gpu_is_explained_once_then_named_in_one_line_a_run(tmp_path, monkeypatch, capsys):
    from evokernel.errors import NoGPUError

    def no_gpu(*_):
        raise NoGPUError("this command needs a CUDA GPU, and PyTorch sees none here.\n  HELP")
    monkeypatch.setattr("evokernel.cli.options.require_gpu", no_gpu)
    for n in ("a", "b", "c"):
        (tmp_path / f"{n}.args").write_text(f"softmax {FLAGS}\n")
    assert cli.main(["advance", *(f"{tmp_path / n}={tmp_path / n}-b" for n in "abc")]) == 2
    err = capsys.readouterr().err
    assert err.count("HELP") == 1 and err.count("needs a CUDA GPU (above)") == 2
