"""Every seed kernel's CUDA compiles for sm_90 through the Builder (one real build in CI: the
softmax seed, contained as a run's builds are; the rest are built on the GPU machine by
scripts/gpu_check.sh)."""
import json
import os
from pathlib import Path

import pytest

from evokernel.build.builder import Builder
from evokernel.build.cache import MARKER
from evokernel.problem import load_problem
from evokernel.records import Candidate
from tests.support.jails import HAS_UTIL_LINUX, contained


@pytest.mark.skipif(not os.environ.get("CUDA_HOME") and not os.path.exists("/usr/local/cuda"),
                    reason="needs nvcc")
def test_softmax_seed_builds_for_sm90(tmp_path):
    seed = load_problem("softmax").seed_source
    (tmp_path / "cache").mkdir()
    sandbox = contained(tmp_path / "cache") if HAS_UTIL_LINUX else None
    with Builder(tmp_path / "cache", arch="9.0", timeout_s=900, workers=1,
                 sandbox=sandbox) as builder:
        (result,) = builder.build_many([Candidate(source=seed)])
    assert result.ok, result.log
    assert not result.cache_hit and result.build_s > 1.0
    marker = json.loads((Path(result.build_dirs[0]) / MARKER).read_text())
    assert marker["headers_trimmed"], "the seed's <torch/extension.h> should have been left out"
    main_cpp = (Path(result.build_dirs[0]) / "main.cpp").read_text()
    assert main_cpp.startswith('#include "evokernel_light_main.h"'), main_cpp[:200]
    with Builder(tmp_path / "cache", arch="9.0", timeout_s=900, workers=1) as builder:
        (again,) = builder.build_many([Candidate(source=seed)])
    assert again.ok and again.cache_hit and again.build_s < 1.0
