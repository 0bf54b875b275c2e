"""What the sandbox tests need from this machine: Linux with util-linux unshare and setpriv.

CI and the development machine run as root with namespaces allowed, so the sandbox tests
expect full containment there and fail (not skip) when the probe finds less.
"""
import shutil
import sys

import pytest

HAS_UTIL_LINUX = (sys.platform.startswith("linux") and shutil.which("unshare") is not None
                  and shutil.which("setpriv") is not None)
needs_util_linux = pytest.mark.skipif(not HAS_UTIL_LINUX,
                                      reason="needs Linux with util-linux unshare and setpriv")


def contained(cache_dir):
    """The full containment of this machine for ``cache_dir``; fails the test when incomplete."""
    from evokernel.sandbox.support import probe
    c = probe("nobody", str(cache_dir))
    assert c.contained and c.mode == "namespaces", c.describe()
    return c
