"""What a contained process sees and may do (``Jail``), and the command line that starts it so.

Three strengths, chosen by evokernel.sandbox.support.probe for this machine:

* ``"namespaces"``: ``unshare --net --mount --pid --ipc --fork --kill-child --mount-proc``
  (util-linux) starts ``python -m evokernel.sandbox.enter`` as the new PID namespace's init; it
  builds the file view (evokernel.sandbox.mounts), forks, and the child drops its privileges
  and execs the worker. With ``uid`` set (evokernel runs as root) the drop is ``setpriv
  --reuid --regid --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all``. With
  ``uid=None`` (evokernel is not root, or no other user exists) the outer ``unshare`` also makes
  a user namespace (``--map-root-user``), and the drop is a nested ``unshare --user --mount
  --map-user=... --map-group=...``: the worker holds no capability, and the mounts it inherits
  are locked (user_namespaces(7), "Restrictions on mount namespaces"), so it cannot make them
  writable again.
* ``"user"``: no namespaces, only ``setpriv`` to another user (root without namespaces, as in a
  container whose seccomp profile refuses ``unshare``): the keys are out of reach, files are
  protected by their permissions, and the network stays open.
* ``"none"``: the command runs as given (only the scrubbed environment and the non-dumpable
  parent of evokernel.sandbox.environ protect the keys).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

#: Covered with a private, empty, writable tmpfs in the "namespaces" mode.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: Namespaces every contained process gets (unshare(1) options).
UNSHARE_OPTIONS = ("--net", "--mount", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc")
MODES = ("namespaces", "user", "none")
#: Exit status of ``evokernel.sandbox.enter`` when it could not build the jail.
JAIL_FAILED = 125


@dataclass(frozen=True)
class Bind:
    """A folder (or file) shown at ``target`` inside the jail, read-only unless ``writable``.
    ``source`` is opened before anything is covered, so it may lie in a hidden folder."""

    source: str
    target: str
    writable: bool = False


@dataclass(frozen=True)
class Jail:
    """One contained process's view of the machine (see the module docstring for ``mode``).

    uid, gid: the account the process runs as ("namespaces" and "user" modes); None in the
        "namespaces" mode: a user namespace, the process mapped to ``inner_uid``/``inner_gid``.
    binds: what is shown inside, in addition to the read-only file system ("namespaces").
    hidden: folders covered with an empty read-only tmpfs (the user's home): only the binds
        under them show ("namespaces").
    private: folders covered with an empty writable tmpfs of the jail's own ("namespaces").
    cwd: the working directory inside (absolute).
    unshare, setpriv: the util-linux programs (absolute paths found by the probe).
    Raises: ValueError for an unknown mode, a relative path, or uid 0.
    """

    mode: str = "namespaces"
    uid: int | None = None
    gid: int | None = None
    inner_uid: int = 65534
    inner_gid: int = 65534
    binds: tuple[Bind, ...] = ()
    hidden: tuple[str, ...] = ()
    private: tuple[str, ...] = PRIVATE_DIRS
    cwd: str = "/"
    unshare: str = "unshare"
    setpriv: str = "setpriv"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Jail.mode must be one of {MODES}, got {self.mode!r}")
        if self.uid == 0 or (self.uid is None) != (self.gid is None):
            raise ValueError(f"Jail: uid and gid must both be set (not root) or both None, got "
                             f"uid={self.uid} gid={self.gid}")
        if self.mode == "user" and self.uid is None:
            raise ValueError("Jail: the 'user' mode needs a uid")
        paths = [self.cwd, *self.hidden, *self.private,
                 *(p for b in self.binds for p in (b.source, b.target))]
        bad = [p for p in paths if not str(p).startswith("/")]
        if bad:
            raise ValueError(f"Jail: paths must be absolute, got {bad}")

    def command(self, argv: Sequence[str]) -> list[str]:
        """The command line that runs ``argv`` in this jail (``argv`` itself in "none" mode).
        In "user" mode the caller starts it with ``cwd=self.cwd``; in "namespaces" mode the
        jail's init changes to ``cwd`` once the file view is built."""
        if self.mode == "none":
            return list(argv)
        if self.mode == "user":
            return [*self.drop_command(), *argv]
        user_ns = ["--user", "--map-root-user"] if self.uid is None else []
        return [self.unshare, *user_ns, *UNSHARE_OPTIONS, sys.executable, "-m",
                "evokernel.sandbox.enter", self.to_json(), "--", *argv]

    def drop_command(self) -> list[str]:
        """The prefix that drops privileges before the worker's own program (ends with "--")."""
        if self.uid is not None:
            return [self.setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return [self.unshare, "--user", "--mount", f"--map-user={self.inner_uid}",
                f"--map-group={self.inner_gid}", "--", self.setpriv, "--no-new-privs", "--"]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Jail":
        """Raises: ValueError for text that is not a jail's JSON."""
        try:
            d: dict[str, Any] = json.loads(text)
            d["binds"] = tuple(Bind(**b) for b in d.get("binds", ()))
            for name in ("hidden", "private"):
                d[name] = tuple(d.get(name, ()))
            return cls(**d)
        except (TypeError, KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"not a jail description: {e}") from e
