"""The init of a jail's PID namespace: ``python -m evokernel.sandbox.enter JAIL_JSON -- ARGV...``.

Started by ``unshare`` (evokernel.sandbox.jail.Jail.command) as PID 1 of a new PID namespace,
with root rights over its new mount namespace. It builds the file view
(evokernel.sandbox.mounts.build_view) and forks; the child changes to the jail's ``cwd`` and
execs ``Jail.drop_command() + ARGV`` (setpriv or a nested unshare, then the worker), keeping the
descriptors it inherited (the pipes to the parent); the init closes its own copies, so the
parent reads end-of-file as soon as the worker ends. The init reaps every process that ends up its child and, when the worker ends, exits with its status,
or 128 + N when signal N killed it (PID 1 cannot kill itself with a signal; pid_namespaces(7));
its exit tears the namespace down, so nothing the worker started survives it.

Exit status JAIL_FAILED (125), with the reason on stderr: the jail could not be built.
"""
from __future__ import annotations

import os
import sys

from evokernel.sandbox.jail import JAIL_FAILED, Jail
from evokernel.sandbox.mounts import build_view


def _wait_for(pid: int) -> int:
    """Reap children until ``pid`` ends; its exit status, or 128 + the signal that killed it."""
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            return JAIL_FAILED
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m evokernel.sandbox.enter JAIL_JSON -- PROGRAM [ARG...]",
              file=sys.stderr)
        return 2
    try:
        jail = Jail.from_json(argv[0])
        build_view(jail)
        os.chdir("/")
    except (OSError, ValueError) as e:
        print(f"evokernel sandbox: could not build the jail: {e}", file=sys.stderr, flush=True)
        return JAIL_FAILED
    command = [*jail.drop_command(), *argv[2:]]
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(jail.cwd)
            os.execvp(command[0], command)
        except OSError as e:
            print(f"evokernel sandbox: could not start {command[0]}: {e}", file=sys.stderr,
                  flush=True)
        os._exit(JAIL_FAILED)
    limit = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, limit if limit > 0 else 4096)
    return _wait_for(pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
