"""Keeping the keys out of LLM-written code's environment, and out of its reach in /proc.

Candidate kernels run only in build and GPU worker processes. Those get an environment without
credentials (``worker_env``), and the evokernel process that holds the keys makes itself
non-dumpable (``protect_environ``), so that a child running as the same user cannot read the
keys back from ``/proc/<parent>/environ`` or ``/proc/<parent>/mem`` (Linux ptrace access rules,
see proc(5) and ptrace(2), "ptrace access mode checking").

Alone, this does not stop a process with CAP_SYS_PTRACE (root, in most GPU containers): the
rest of evokernel.sandbox runs those workers as another user, in their own PID, network and
mount namespaces, where the key holder's /proc entries do not exist.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Mapping

#: Environment names that hold credentials by convention (matched anywhere in the name).
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")
#: Provider and service prefixes whose variables are dropped whatever their names.
SECRET_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCP_", "OPENAI_", "ANTHROPIC_", "GEMINI_",
                   "HF_", "HUGGING", "COHERE_", "MISTRAL_", "GROQ_", "TOGETHER", "DEEPSEEK",
                   "XAI_", "OPENROUTER", "LITELLM_", "WANDB_", "GITHUB_", "GH_", "VERTEX")
#: A value that carries credentials in a URL (scheme://user:password@host).
_URL_WITH_CREDENTIALS = re.compile(r"://[^/\s:@]+:[^/\s@]+@")
_KEEP = frozenset({"PWD", "OLDPWD"})
_PR_SET_DUMPABLE = 4


def is_secret(name: str, value: str) -> bool:
    """Whether an environment variable looks like a credential (by name or by value)."""
    upper = name.upper()
    if upper in _KEEP:
        return False
    return (any(w in upper for w in SECRET_WORDS) or upper.startswith(SECRET_PREFIXES)
            or bool(_URL_WITH_CREDENTIALS.search(value)))


def worker_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``base`` (default ``os.environ``) without credentials, for a process that will
    run LLM-written code. Also makes this process non-dumpable (``protect_environ``)."""
    protect_environ()
    env = dict(os.environ if base is None else base)
    return {k: v for k, v in env.items() if not is_secret(k, v)}


def protect_environ() -> bool:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0) so that its children cannot read
    its environment or memory through /proc. Returns False where that is not possible (not
    Linux); the call is idempotent and costs nothing after the first time."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
