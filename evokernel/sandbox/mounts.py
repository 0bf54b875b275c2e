"""The file view of a jail, built inside its new mount namespace (by evokernel.sandbox.enter).

``build_view`` runs as the namespace's root, before privileges are dropped:

1. every mount outside /proc, /sys and /dev becomes read-only (a bind remount, so only this
   namespace's copy changes: mount_namespaces(7));
2. the binds' sources are opened (``O_PATH``), so that a source inside a folder about to be
   covered stays reachable;
3. the hidden folders (the user's home) get an empty tmpfs, the private ones (/tmp, /var/tmp,
   /dev/shm) an empty writable tmpfs of their own;
4. each bind is mounted from its open descriptor (``/proc/self/fd/N``), parents first, and made
   read-only unless writable;
5. the hidden folders' tmpfs become read-only too (they hold only the binds' mount points).

The mount(2) calls go through libc with ctypes; each failure raises OSError naming the path.
A remount keeps the flags the kernel may have locked (nosuid, nodev, noexec, atime), read back
with statvfs(3), whose ST_* bits equal the MS_* flags on Linux.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Iterable

from evokernel.sandbox.jail import Bind, Jail

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_RELATIME = 1 << 21
#: Per-mount flags a bind remount must repeat (the kernel refuses to clear locked ones).
KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME
#: Kernel file systems left as they are (device nodes, /proc of the new PID namespace).
KERNEL_DIRS = ("/proc", "/sys", "/dev")
_OCTAL = re.compile(r"\\([0-7]{3})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    enc = (lambda s: None if s is None else s.encode())
    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        what = fstype or ("a bind of " + str(source) if flags & MS_BIND else "a remount")
        raise OSError(err, f"mount ({what}) on {target}: {os.strerror(err)}")


def under(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or lies inside one (plain path prefixes)."""
    return any(path == r or path == r.rstrip("/") or path.startswith(r.rstrip("/") + "/")
               for r in roots)


def mount_points(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """Every mount point of this namespace (field 5 of proc(5)'s mountinfo, octal escapes
    decoded), each once, parents before children."""
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
        points = [_OCTAL.sub(lambda m: chr(int(m.group(1), 8)), line.split()[4])
                  for line in f if len(line.split()) > 4]
    return sorted(set(points), key=lambda p: (p.count("/") if p != "/" else 0, p))


def remount(point: str, *, writable: bool = False) -> None:
    """Make the mount at ``point`` read-only (or read-write) in this namespace only."""
    flags = os.statvfs(point).f_flag & KEPT_FLAGS
    _mount(None, point, None, MS_REMOUNT | MS_BIND | flags | (0 if writable else MS_RDONLY))


def _mount_point(target: str, is_dir: bool) -> None:
    """Create ``target`` (in a fresh tmpfs) when it is missing; an existing one is used."""
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if is_dir:
        os.mkdir(target, 0o755)
    else:
        open(target, "a").close()


def build_view(jail: Jail) -> None:
    """Build ``jail``'s file view in this (new, private) mount namespace; see the module
    docstring. Raises: OSError naming the path that could not be mounted."""
    private = [d for d in jail.private if os.path.isdir(d)]
    hidden = [d for d in jail.hidden if os.path.isdir(d) and not under(d, private)]
    for point in mount_points():
        if under(point, KERNEL_DIRS) or under(point, private):
            continue
        try:
            ro = os.statvfs(point).f_flag & MS_RDONLY
        except FileNotFoundError:        # under a mount stacked on a parent: unreachable
            continue
        if not ro:
            remount(point)
    fds = [(b, os.open(b.source, os.O_PATH | os.O_CLOEXEC)) for b in jail.binds]
    for d in hidden:
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for d in private:
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for bind, fd in sorted(fds, key=lambda bf: bf[0].target.count("/")):
        _bind(bind, fd)
        os.close(fd)
    for d in hidden:
        remount(d)


def _bind(bind: Bind, fd: int) -> None:
    source = f"/proc/self/fd/{fd}"
    _mount_point(bind.target, os.path.isdir(source))
    _mount(source, bind.target, None, MS_BIND | MS_REC)
    remount(bind.target, writable=bind.writable)
