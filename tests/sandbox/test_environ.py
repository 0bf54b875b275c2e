"""Secrets stay away from LLM-written code: scrubbed environments, and a parent whose
environment its children cannot read back through /proc."""
import subprocess
import sys

import pytest

from evokernel.sandbox import is_secret, worker_env


def test_worker_env_drops_credentials_by_name_and_value():
    env = {"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "a", "MY_TOKEN": "t", "OR_PASS": "p",
           "HTTPS_PROXY": "http://user:pw@proxy:3128", "MY_DB_URL": "postgres://u:pw@db/x",
           "AWS_REGION": "eu", "PATH": "/usr/bin", "PWD": "/work", "CUDA_HOME": "/usr/local/cuda",
           "NO_PROXY_URL": "http://proxy:3128", "HOME": "/root"}
    kept = worker_env(env)
    assert kept == {"PATH": "/usr/bin", "PWD": "/work", "CUDA_HOME": "/usr/local/cuda",
                    "NO_PROXY_URL": "http://proxy:3128", "HOME": "/root"}
    assert is_secret("HTTPS_PROXY", "http://u:p@h") and not is_secret("HTTPS_PROXY", "http://h:1")


PROBE = ("import ctypes, sys\n"
         "if sys.argv[1] == 'protect':\n"
         "    from evokernel.sandbox import protect_environ\n"
         "    assert protect_environ()\n"
         "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n")   # PR_GET_DUMPABLE


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
@pytest.mark.parametrize("mode, dumpable", [("plain", "1"), ("protect", "0")])
def test_the_key_holding_process_becomes_non_dumpable(mode, dumpable):
    """Non-dumpable is what makes /proc/<pid>/environ and /mem unreadable to the same user's
    children (proc(5)); reading it as another unprivileged user is not testable here, where
    Python lives under /root."""
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == dumpable, out.stderr[-2000:]


def test_worker_env_protects_the_caller():
    out = subprocess.run([sys.executable, "-c", "import ctypes\n"
                          "from evokernel.sandbox import worker_env\nworker_env()\n"
                          "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "0", out.stderr[-2000:]
