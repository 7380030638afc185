"""The cache key of an environment: what setup depended on, hashed.

The workspace's part — the files ``cache_key`` globs name (lockfiles, ``pyproject.toml`` …) — is
read on the host from a checkout the sandbox can write, so it is read as a hostile tree: no
symbolic link is followed (a link is keyed by its text), only regular files are read (never a
FIFO or a device), and ``.git`` is never walked. Globs use the workspace glob syntax of
:func:`sandloop.matching.glob_match` (``*`` within a name, ``**`` across folders). Standard
library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from fnmatch import fnmatchcase
from pathlib import Path

__all__ = ["KEY_FORMAT", "MAX_DEPTH", "MAX_READ", "environment_key", "workspace_files"]

#: Bumped when what goes into a key changes meaning, so old keys never match new environments.
KEY_FORMAT = 1
_MAGIC = ("*", "?", "[")
#: how deep ``**`` walks, in folders below the checkout
MAX_DEPTH = 48
#: files larger than this are keyed by size and modification time, not read
MAX_READ = 64 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


Parts = tuple[str, ...]


def _expand(root: Path, rel: Parts, pattern: Parts, skip: frozenset[Parts]) -> Iterator[Parts]:
    """Workspace-relative paths (as parts) under ``rel`` that match ``pattern``, links not
    followed, nothing under ``skip`` walked."""
    if rel in skip:
        return
    if not pattern:
        yield rel
        return
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        yield from _expand(root, rel, rest, skip)
        if len(rel) < MAX_DEPTH:  # a planted 2000-level tree must not break every later run
            for name in _subdirs(root / Path(*rel)):
                yield from _expand(root, (*rel, name), pattern, skip)
        return
    if not any(ch in head for ch in _MAGIC):
        names = [head]
    else:
        names = sorted(n for n in _names(root / Path(*rel)) if fnmatchcase(n, head))
    for name in names:
        path = root.joinpath(*rel, name)
        try:
            st = path.lstat()
        except OSError:
            continue
        if not rest:
            yield (*rel, name)
        elif stat.S_ISDIR(st.st_mode) and name != ".git":
            yield from _expand(root, (*rel, name), rest, skip)


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _subdirs(folder: Path) -> list[str]:
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                    found.append(entry.name)
    except OSError:
        pass
    return sorted(found)


def _digest(path: Path) -> str | None:
    """sha256 of a regular file, ``link:`` + the text of a link, None for anything else."""
    try:
        st = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped after the lstat
            return None
        if st.st_size > MAX_READ:  # a lockfile is small; a planted 20 GB file must not stall every run
            return f"large:{st.st_size}:{st.st_mtime_ns}"
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _parts(path: str) -> Parts:
    return tuple(part for part in path.strip("/").split("/") if part not in ("", "."))


def workspace_files(workspace: Path, globs: Iterable[str], exclude: Iterable[str] = ()) -> dict[str, str]:
    """Every file the globs match: workspace-relative path → its digest (sorted by path).

    ``exclude``: paths setup itself creates (``cache_paths``, such as ``node_modules``) are
    outputs, not inputs: nothing under them is keyed."""
    root = workspace.resolve()
    skip = frozenset(_parts(path) for path in exclude) - {()}
    found: dict[str, str] = {}
    for glob in globs:
        for parts in _expand(root, (), _parts(glob), skip):
            rel = "/".join(parts)
            if rel in found or rel == "":
                continue
            digest = _digest(root.joinpath(*parts))
            if digest is not None:
                found[rel] = digest
    return dict(sorted(found.items()))


def environment_key(fields: Mapping[str, object]) -> str:
    """sha256 of the fields as canonical JSON (the key format first)."""
    text = json.dumps({"format": KEY_FORMAT, **fields}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
