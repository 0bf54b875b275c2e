"""Test set-up: no network for litellm, and `gpu` tests skipped where no CUDA GPU is visible."""
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # torch missing or broken: no GPU tests
        return False


def pytest_collection_modifyitems(config, items):
    _skip_gpu_tests_without_a_gpu(items)
    _deselect_passed_at_this_commit(config, items)


def _skip_gpu_tests_without_a_gpu(items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# ---- a ledger of test outcomes, so a GPU suite longer than one device call can resume ------
# EVOKERNEL_TEST_LEDGER=FILE: each test's outcome is appended to FILE as it ends ("UTC time,
# commit, node id, outcome, seconds"; commit from EVOKERNEL_TEST_COMMIT, else "unknown"), and
# tests FILE records as passed at the same commit are deselected (a later call runs only the
# rest). scripts/gpu_check.sh's gpu-tests stage sets both.

def _ledger():
    path = os.environ.get("EVOKERNEL_TEST_LEDGER")
    return (path, os.environ.get("EVOKERNEL_TEST_COMMIT") or "unknown") if path else (None, None)


def _passed_before(path, commit):
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return set()
    rows = [ln.split(",") for ln in lines if ln.count(",") >= 4]
    return {r[2] for r in rows if r[1] == commit and r[3] == "passed"}


def _deselect_passed_at_this_commit(config, items):
    path, commit = _ledger()
    if not path or commit == "unknown":
        return
    done = _passed_before(path, commit)
    keep = [it for it in items if it.nodeid not in done]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[it for it in items if it.nodeid in done])
        items[:] = keep


def pytest_runtest_logreport(report):
    path, commit = _ledger()
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return
    import datetime
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{when},{commit},{report.nodeid},{report.outcome},{report.duration:.1f}\n")
