"""On a GPU: every fixture in tests/kernels/cheats/ and tests/kernels/legit/ (and the FP16 matmul
fixture) gets the verdict and the named reason its docstring's EXPECTED line states, through the
whole engine (build, worker, gate, kernel profile, timing checks). Runs experiments/gate_report.py's
evaluation once (several minutes: ~16 builds, 7 problem set-ups) and checks each fixture."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report():
    spec = importlib.util.spec_from_file_location("gate_report", ROOT / "experiments" /
                                                  "gate_report.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


REPORT = _report()
FIXTURES = REPORT.discover(ROOT)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("gate_report")
    rows, _ = REPORT.evaluate(FIXTURES, REPORT.report_config(), out)
    return {r["fixture"]: r for r in rows}


@pytest.mark.gpu
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_fixture_gets_its_expected_reason(rows, fixture):
    r = rows[fixture.name]
    assert (r["verdict"], r["reason"]) == (fixture.verdict, fixture.reason), r["detail"][:600]
    if fixture.verdict == "reject":
        assert r["detail"], "a rejection must say why"
    else:
        assert r["candidate_ms"] and r["reference_ms"] and r["norm_ratio"] is not None
