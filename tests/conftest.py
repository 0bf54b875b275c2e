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
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
