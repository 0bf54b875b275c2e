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
# EVOKERNEL_TEST_LEDGER=FILE: each test phase's outcome is appended to FILE as it ends ("UTC
# date-time, commit, node id, outcome, seconds"; commit from EVOKERNEL_TEST_COMMIT, else
# "unknown"), and tests whose last recorded outcome at the same commit is a pass are deselected
# (a later call runs only the rest; a call that passed and then failed in teardown is not a
# pass). A ledger that cannot be read or written is reported once and ignored: every test runs.
# A failure's text also goes to FILE.failures.txt as it ends. scripts/gpu_check.sh's gpu-tests
# stage sets both.
OUTCOMES = ("passed", "failed", "skipped")


def _ledger():
    path = os.environ.get("EVOKERNEL_TEST_LEDGER")
    return (path, os.environ.get("EVOKERNEL_TEST_COMMIT") or "unknown") if path else (None, None)


def _ledger_trouble(what, error):
    import sys
    print(f"\nEVOKERNEL_TEST_LEDGER: {what}: {error}; the ledger is ignored", file=sys.stderr)
    os.environ.pop("EVOKERNEL_TEST_LEDGER", None)


def _passed_before(path, commit):
    """Node ids whose last row at ``commit`` says passed; rows not of the ledger's shape (5
    fields, a known outcome, a time) are skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return set()
    except (OSError, UnicodeDecodeError) as e:
        _ledger_trouble(f"cannot read {path}", e)
        return set()
    last = {}
    for line in lines:
        row = line.rsplit(",", 2)                  # node ids may hold commas: split from the right
        head = row[0].split(",", 2) if len(row) == 3 else []
        if len(head) != 3 or not head[0] or row[1] not in OUTCOMES:
            continue
        if head[1] == commit:
            last[head[2]] = row[1]
    return {node for node, outcome in last.items() if outcome == "passed"}


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
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{when},{commit},{report.nodeid},{report.outcome},{report.duration:.1f}\n")
        if report.failed:
            _keep_failure(path + ".failures.txt", when, report)
    except OSError as e:
        _ledger_trouble(f"cannot write {path}", e)


def _keep_failure(path, when, report, keep=20000):
    """A failure's text (its last ``keep`` characters), appended to ``path`` as the test ends:
    pytest prints failures only at the session's end, which a stage cut by its time limit never
    reaches (the H200, 2026-12-04: a sandbox test's 240 s timeout message was lost so)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"==== {when} {report.nodeid} ({report.when}) failed\n"
                f"{report.longreprtext[-keep:]}\n")
