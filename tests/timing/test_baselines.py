"""evokernel.timing.baselines: the torch.compile baseline is measured once per key and then read back."""
import json

import pytest

from evokernel.timing.baselines import baseline_key, baseline_path, cached_compile_ms
from evokernel.config import EvalConfig, GateConfig, TimingConfig

SOURCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def key(source=SOURCE, device="NVIDIA H200", torch_version="2.11.0+cu130", cuda="13.0",
        config=EvalConfig()):
    return baseline_key(source, device, torch_version, cuda, config)


class Measure:
    def __init__(self, result=(8.1, 0.38, True)):
        self.calls, self.result = 0, result

    def __call__(self):
        self.calls += 1
        return self.result


def test_measured_once_then_read_from_the_cache(tmp_path):
    m = Measure()
    assert cached_compile_ms(tmp_path, key(), m) == 0.38
    assert cached_compile_ms(tmp_path, key(), m) == 0.38
    assert m.calls == 1
    saved = json.loads(baseline_path(tmp_path, key()).read_text())
    assert saved["eager_ms"] == 8.1 and saved["compile_ms"] == 0.38 and saved["key"] == key()


@pytest.mark.parametrize("changed", [
    dict(source=SOURCE + "# edited\n"), dict(device="NVIDIA A100-SXM4-80GB"),
    dict(torch_version="2.12.0+cu130"), dict(cuda="12.8"),
    dict(config=EvalConfig(timing=TimingConfig(hide_host_ms=0.0))),
    dict(config=EvalConfig(gate=GateConfig(perturb_constant_parameters=False)))])
def test_anything_that_changes_the_time_measures_again(tmp_path, changed):
    m = Measure()
    cached_compile_ms(tmp_path, key(), m)
    assert cached_compile_ms(tmp_path, key(**changed), m) == 0.38
    assert m.calls == 2


def test_a_measurement_that_missed_its_ci_target_is_used_but_not_cached(tmp_path):
    m = Measure(result=(8.1, 0.41, False))
    assert cached_compile_ms(tmp_path, key(), m) == 0.41
    assert cached_compile_ms(tmp_path, key(), m) == 0.41
    assert m.calls == 2 and not baseline_path(tmp_path, key()).exists()


def test_the_key_names_the_timing_method_and_triton():
    from evokernel.timing.baselines import METHOD_VERSION
    k = key()
    assert k["method"] == METHOD_VERSION and "triton" in k


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0.0, True, "0.5", None])
def test_a_cached_value_that_is_no_time_is_measured_again(tmp_path, bad):
    path = baseline_path(tmp_path, key())
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"key": key(), "compile_ms": bad}))
    m = Measure()
    assert cached_compile_ms(tmp_path, key(), m) == 0.38 and m.calls == 1


def test_a_failed_torch_compile_is_not_cached(tmp_path):
    m = Measure(result=None)
    assert cached_compile_ms(tmp_path, key(), m) is None
    assert cached_compile_ms(tmp_path, key(), m) is None
    assert m.calls == 2 and not baseline_path(tmp_path, key()).exists()


def test_a_corrupt_cache_file_is_measured_again(tmp_path):
    path = baseline_path(tmp_path, key())
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    m = Measure()
    assert cached_compile_ms(tmp_path, key(), m) == 0.38 and m.calls == 1
    assert json.loads(path.read_text())["compile_ms"] == 0.38      # and replaced


def test_an_unwritable_cache_still_gives_the_measured_time(tmp_path, capsys):
    from loguru import logger
    blocker = tmp_path / "file"
    blocker.write_text("")                        # a file where the cache folder would go
    sink = logger.add(lambda msg: print(msg, end=""), level="WARNING")
    try:
        m = Measure()
        assert cached_compile_ms(blocker, key(), m) == 0.38
    finally:
        logger.remove(sink)
    assert "could not cache the torch.compile baseline" in capsys.readouterr().out
    assert blocker.read_text() == ""


def test_measure_compile_baseline_times_eager_and_compiled_interleaved(monkeypatch):
    """On CPU with a host clock; torch.compile is replaced by a wrapper that counts its calls
    (what is tested is the wiring, not inductor)."""
    import torch

    from evokernel.timing.baselines import measure_compile_baseline
    calls = []

    def fake_compile(model):
        return lambda *a: (calls.append(1), model(*a))[1]

    monkeypatch.setattr(torch, "compile", fake_compile)
    model = torch.nn.Linear(8, 8)
    sets = [[torch.randn(4, 8)] for _ in range(3)]
    cfg = EvalConfig(timing=TimingConfig(warmup_ms=0.0, min_trials=5, max_trials=10,
                                         max_time_s=1.0))
    eager_ms, compile_ms, converged = measure_compile_baseline(model, sets, cfg,
                                                               torch.device("cpu"), None)
    assert eager_ms > 0 and compile_ms > 0 and len(calls) >= 5 and isinstance(converged, bool)


def test_a_torch_compile_failure_gives_none_and_a_logged_traceback(monkeypatch, capsys):
    import torch

    from evokernel.timing.baselines import measure_compile_baseline

    def broken(model):
        raise RuntimeError("inductor cannot handle this")

    monkeypatch.setattr(torch, "compile", broken)
    assert measure_compile_baseline(torch.nn.Identity(), [[torch.ones(1)]], EvalConfig(),
                                    torch.device("cpu"), None) is None
    assert "inductor cannot handle this" in capsys.readouterr().out


def test_the_worker_reads_its_compile_baseline_through_the_cache(monkeypatch, tmp_path):
    """Session.compile_baseline on CPU: the second worker of the same problem does not time
    torch.compile again."""
    import types

    import torch

    from evokernel.engine.session import Session
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    measured = []
    monkeypatch.setattr("evokernel.timing.baselines.measure_compile_baseline",
                        lambda *a: (measured.append(a), (1.0, 0.5, True))[1])
    state = types.SimpleNamespace(config=EvalConfig(cache_dir=str(tmp_path)), device="cpu",
                                  ref=types.SimpleNamespace(model=None), timing_inputs=[],
                                  flusher=None)
    assert Session.compile_baseline(state, SOURCE) == 0.5
    assert Session.compile_baseline(state, SOURCE) == 0.5
    assert len(measured) == 1


@pytest.mark.parametrize("compile_ms, expected", [(0.5, 2.0), (float("nan"), 0.0),
                                                  (float("inf"), 0.0), (-1.0, 0.0)])
def test_a_bad_compile_time_never_becomes_a_nan_fitness(compile_ms, expected):
    """--vs-compile makes compile_speedup the fitness."""
    from evokernel.records import EvalResult, Reason, Verdict
    r = EvalResult(candidate_id="c", verdict=Verdict.ACCEPT, reason=Reason.OK,
                   reference_ms=1.0, candidate_ms=0.25, compile_ms=compile_ms)
    assert r.compile_speedup == expected
