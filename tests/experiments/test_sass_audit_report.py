"""experiments/sass_audit_report.py's logic on the CPU: which fixtures it audits with what
expectation, and how an audit is judged (the builds themselves run on the GPU host)."""
from evokernel.build.sass import audit_sass
from tests.support.scripts import load_experiment

report = load_experiment("sass_audit_report")
WMMA = audit_sass((report.ROOT / "tests/fixtures/sass/wmma_fp16.sass").read_text()).findings


def test_fixtures_and_their_expectations():
    todo = {p.name: e for p, e in report.fixtures()}
    assert todo["matmul_fp16.py"] == report.BELOW
    assert todo["lower_precision_tf32.py"] == todo["lower_precision_fp16_silu.py"] == report.BELOW
    assert todo["softmax_block_tree.py"] == report.NONE
    assert len([e for e in todo.values() if e == report.NONE]) >= 13
    assert [p.name for p, _ in report.fixtures(only="silu")] == [
        "lower_precision_fp16_silu.py", "silu_float4.py"]


def test_verdict():
    clean = ("sass_audit: no instruction below FP32 in 1 kernel(s)",)
    assert report.verdict(report.BELOW, WMMA, ("sass_below_fp32:fp16",)) == "OK"
    assert report.verdict(report.NONE, WMMA, ("sass_below_fp32:fp16",)) == "WRONG"
    assert report.verdict(report.NONE, (), clean) == "OK"
    assert report.verdict(report.BELOW, (), clean) == "WRONG"
    assert report.verdict(report.NONE, (), ("sass_audit_unavailable: no cuobjdump",)) == \
        "NOT AUDITED"


def test_list(capsys):
    assert report.main(["--list", "--only", "matmul_fp16"]) == 0
    assert capsys.readouterr().out == "tests/kernels/matmul_fp16.py: must show below FP32\n"
