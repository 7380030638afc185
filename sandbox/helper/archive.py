"""A sandbox's own files outside the checkout, as a tar: written for a snapshot, put back at resume.

Both run inside the sandbox, under sandloop's seccomp filter (the helper's entry point installs
it first), never on the host: the tar comes from a sandbox, so it is as hostile as the commands
that made it, and only a sandbox unpacks it.

* :func:`archive` writes ``/tmp``'s named entries (``home``, or ``.`` for all of ``/tmp``) as
  one uncompressed tar to a descriptor — the host keeps the bytes, never reads them as files;
* :func:`restore` unpacks such a tar into ``/tmp`` at a helper's start (``--restore``): every
  member and every link's target must resolve inside ``/tmp`` (a link planted to
  ``/workspace`` cannot carry a later member into the checkout), setuid/setgid and sticky bits
  are dropped, devices and fifos skipped.

Standard library only, like the rest of the helper.
"""

from __future__ import annotations

import os
import stat
import sys
import tarfile
from collections.abc import Sequence
from typing import Any, BinaryIO

__all__ = ["ROOT", "archive", "restore"]

#: What a snapshot of a sandbox's own files can hold: its writable scratch space ($HOME is
#: /tmp/home). The root file system is the engine's business (a commit), the checkout the host's.
ROOT = "/tmp"


#: the members were checked above (_checked): tarfile's own filter, where it has one, need not
#: check them again (and would warn that none was given)
_TRUSTED: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def archive(names: Sequence[str], out: BinaryIO, *, root: str = ROOT) -> int:
    """Write ``root``'s ``names`` (files, folders, links; sockets and devices skipped) as a tar
    to ``out``; returns how many entries could not be read (told on stderr)."""
    skipped = 0
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            top = os.path.normpath(os.path.join(root, name))
            if not _inside(top, root) or not os.path.lexists(top):
                continue
            for path in _walk(top):
                try:
                    info = tar.gettarinfo(path, arcname=os.path.relpath(path, root))
                    if info is None:  # a socket: nothing to keep
                        continue
                    if info.isreg():
                        with open(path, "rb") as data:
                            tar.addfile(info, data)
                    elif info.isdir() or info.issym() or info.islnk():
                        tar.addfile(info)
                except OSError as exc:
                    skipped += 1
                    print(f"sandloop snapshot: skipped {path}: {exc.strerror or exc}", file=sys.stderr)
    return skipped


def _walk(top: str) -> list[str]:
    """``top`` and everything under it, folders before what they hold, no link followed."""
    paths = [top]
    if os.path.isdir(top) and not os.path.islink(top):
        for dirpath, dirs, files in os.walk(top, followlinks=False):
            dirs.sort()
            paths += [os.path.join(dirpath, name) for name in sorted(dirs) + sorted(files)]
    return paths


def _checked(member: tarfile.TarInfo, root: str) -> tarfile.TarInfo | None:
    """The member as it may be unpacked under ``root``, or None (skipped): no path or link out
    of ``root``, no device or fifo, no setuid/setgid/sticky bit."""
    target = os.path.realpath(os.path.join(root, member.name))
    if not _inside(target, root) or not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return None
    if member.issym() or member.islnk():
        base = os.path.dirname(target) if member.issym() else root
        if not _inside(os.path.realpath(os.path.join(base, member.linkname)), root):
            return None if member.islnk() else member  # a link out may exist; nothing goes through it
    member.mode = stat.S_IMODE(member.mode) & 0o777
    member.uid = member.gid = -1  # owned by whoever unpacks it
    member.uname = member.gname = ""
    return member


def restore(path: str, *, root: str = ROOT) -> int:
    """Unpack the tar at ``path`` into ``root``; returns how many members were skipped."""
    skipped = 0
    root = os.path.realpath(root)
    with tarfile.open(path, mode="r:") as tar:
        for member in tar:
            checked = _checked(member, root)
            if checked is None:
                skipped += 1
                continue
            try:
                tar.extract(checked, root, set_attrs=not checked.issym(), numeric_owner=True, **_TRUSTED)
            except (OSError, KeyError, tarfile.TarError) as exc:  # a hard link to no member: KeyError
                skipped += 1
                print(f"sandloop restore: skipped {member.name}: {exc}", file=sys.stderr)
    return skipped
