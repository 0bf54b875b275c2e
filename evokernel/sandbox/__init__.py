"""Containing LLM-written code: the processes that run it cannot read the keys, reach the
network, or write outside their own folder.

Candidate code runs only in build workers (``python -m evokernel.build.entry``, which executes
the candidate's module) and GPU workers (``python -m evokernel.engine.worker``). Each is started
through a ``Jail`` (evokernel.sandbox.jail):

* its environment holds no credentials, and the key holder is non-dumpable
  (evokernel.sandbox.environ);
* through util-linux ``unshare``: new PID, network (loopback down), IPC and mount namespaces;
  inside, ``python -m evokernel.sandbox.enter`` (evokernel.sandbox.mounts) makes every mount
  read-only, covers the user's home with an empty read-only tmpfs and /tmp, /var/tmp and
  /dev/shm with private ones, and binds back read-only what the worker needs (Python, the
  package, CUDA, the build cache) and read-write only its own folder;
* through util-linux ``setpriv``: when evokernel runs as root, the worker runs as an
  unprivileged user (``EvalConfig.sandbox_user``, default ``nobody``), with no capabilities and
  no_new_privs; otherwise a nested user namespace leaves it without capabilities.

``probe`` (evokernel.sandbox.support) finds out once which of these steps this machine allows
and says so; ``EvalConfig.require_sandbox`` (``--require-sandbox``) makes a missing step an
error. evokernel.sandbox.workers adapts the jail to build and GPU workers.
"""
from __future__ import annotations

import importlib
from typing import Any

from evokernel.sandbox.environ import (SECRET_PREFIXES, SECRET_WORDS, is_secret,
                                       protect_environ, worker_env)

_LAZY = {"Bind": "evokernel.sandbox.jail", "Jail": "evokernel.sandbox.jail",
         "Containment": "evokernel.sandbox.support", "probe": "evokernel.sandbox.support",
         "containment_for": "evokernel.sandbox.support",
         "BuildJail": "evokernel.sandbox.workers", "GpuWorkerJail": "evokernel.sandbox.workers"}
__all__ = ["SECRET_PREFIXES", "SECRET_WORDS", "is_secret", "protect_environ", "worker_env",
           *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    """The jail and probe names load on first use, so ``python -m evokernel.sandbox.enter``
    starts without loguru or subprocess machinery."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evokernel.sandbox' has no attribute {name!r}")
