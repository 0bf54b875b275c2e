"""A candidate that tries to steal the key and get out, during its build and during its
evaluation (tests.support.hostile): every attempt fails in the contained workers, its verdict
names the failures, and the run folder, the home and the cache are untouched. The same
candidate uncontained (the control) does steal the key, connect and write, as issue 20 saw, so
these tests can fail."""
import json
import os
from pathlib import Path

import pytest

from tests.support.arena import arena as scene
from tests.support.arena import connections, hold_key, snapshot
from tests.support.hostile import ATTACKS, outcomes
from tests.support.jails import needs_util_linux
from tests.support.sandbox_worker import MEASURED

@pytest.fixture
def arena():
    with scene() as a:
        yield a


@needs_util_linux
@pytest.mark.parametrize("stage", ["build", "eval"])
def test_the_hostile_candidate_is_contained(arena, stage):
    before = snapshot(arena["run_dir"], arena["home"])
    out = hold_key(arena, stage, contained=True)
    assert out["containment"]["mode"] == "namespaces" and not out["containment"]["missing"]
    seen = outcomes(out["text"])
    assert set(seen) == set(ATTACKS), out["text"][-2000:]
    assert "LEAKED" not in seen.values(), seen
    assert all(seen[k].startswith("blocked-") for k in ("environ", "mem", "connect", "write_run",
                                                         "write_home", "write_cache")), seen
    assert arena["canary"] not in out["text"]
    assert not out["ok"] and out["reason"] == ("build_error" if stage == "build" else
                                               "load_error")
    assert connections(arena["listener"]) == 0
    assert snapshot(arena["run_dir"], arena["home"]) == before
    cache = Path(arena["cache_dir"])
    assert not list(cache.rglob("planted*"))
    if stage == "eval":             # set-up's measurement reached the cache, the candidate's not
        assert json.loads((cache / "peaks" / "sandbox-test-device.json").read_text()) == MEASURED
        assert out["info"]["uid"] == 65534 and not out["scratch_left"]


@needs_util_linux
@pytest.mark.parametrize("stage", ["build", "eval"])
def test_uncontained_the_same_candidate_gets_out(arena, stage):
    """The control: without the sandbox the attacks work (the key only as root, whose
    CAP_SYS_PTRACE reads a non-dumpable parent), so the test above can tell."""
    before = snapshot(arena["run_dir"], arena["home"])
    out = hold_key(arena, stage, contained=False)
    seen = outcomes(out["text"])
    assert set(seen) == set(ATTACKS), out["text"][-2000:]
    expected = ["connect", "write_run", "write_home", "write_cache"]
    if os.geteuid() == 0:
        expected += ["environ", "environ_any", "mem"]
    assert all(seen[k] == "LEAKED" for k in expected), seen
    assert connections(arena["listener"]) >= 1
    assert snapshot(arena["run_dir"], arena["home"]) != before
