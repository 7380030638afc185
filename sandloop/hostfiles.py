"""Files the host writes (logs, the audit chain, screenshots, run summaries, reports, caches),
written so that nothing the sandbox does can redirect them.

Every such file lives under the user's state directory by default (:func:`state_dir`, the XDG
convention), outside every path a sandbox can write. A :class:`HostDir` opens its directory ONCE
(``O_DIRECTORY | O_NOFOLLOW``, every component checked) and creates, appends and replaces files
relative to that descriptor with ``O_NOFOLLOW``: if a name in it has been turned into a symlink,
the write fails with :class:`~sandloop.errors.HostPathRefused` — it never lands where the link
points. :func:`refuse_inside` turns a path a user names inside a sandbox-writable tree (the
checkout) into a one-line error before anything is written. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from sandloop.errors import HostPathRefused

__all__ = ["HostDir", "refuse_inside", "state_dir"]

_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def state_dir() -> Path:
    """sandloop's host-side state: ``$XDG_STATE_HOME/sandloop``, else ``~/.local/state/sandloop``."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "sandloop"


def refuse_inside(path: Path, trees: list[Path], what: str) -> None:
    """HostPathRefused when ``path`` lies in one of ``trees`` — as written (a link inside the tree
    may have been planted by the sandbox, wherever it points) or as resolved."""
    written = Path(os.path.normpath(path.expanduser().absolute()))
    for target in (written, path.expanduser().resolve()):
        for tree in trees:
            for root in (Path(os.path.normpath(tree.absolute())), tree.resolve()):
                if target == root or root in target.parents:
                    raise HostPathRefused(
                        f"{what} {path} is inside {root}, which the sandbox can write: a command could "
                        "replace it with a link and have sandloop write elsewhere; choose a path outside it")


def _open_dir(path: Path, *, create: bool) -> int:
    """The directory's descriptor, walking from / one component at a time without following a
    symlink anywhere (a link the user set up above the state directory is resolved first)."""
    absolute = path.expanduser().absolute()
    # The user's own layout (a symlinked home) is theirs; only what lies below an existing,
    # trusted prefix is walked without following links.
    existing = absolute
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    fd = os.open(existing.resolve(), _NOFOLLOW_DIR)
    try:
        for part in absolute.relative_to(existing).parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
            try:
                child = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
            except OSError as exc:
                raise _refused(absolute, part, exc) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refused(where: Path, name: str, exc: OSError) -> HostPathRefused | OSError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return HostPathRefused(f"{where}/{name} is a symlink or not a directory; sandloop writes its "
                               "files only where no link can redirect them")
    return exc


class HostDir:
    """One directory the host writes into, held open by descriptor: once open, replacing the
    directory's path with a link changes nothing (writes go to the directory opened), and its
    subdirectories and files are opened relative to it without following links.

    The path given is resolved once when it is opened (a link the user put above it is theirs;
    a path a sandbox could have touched is refused before, by :func:`refuse_inside`)."""

    _fd = -1  # until opened: a directory that could not be opened has nothing to close

    def __init__(self, path: Path, *, create: bool = True, _fd: int | None = None) -> None:
        self.path = path.expanduser().absolute()
        self._fd = _fd if _fd is not None else _open_dir(self.path, create=create)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> HostDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def subdir(self, name: str) -> HostDir:
        """A directory inside this one (created if missing), opened relative to it: a link in
        its place is refused."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(_name(name), 0o700, dir_fd=self._fd)
        try:
            fd = os.open(name, _NOFOLLOW_DIR, dir_fd=self._fd)
        except OSError as exc:
            raise _refused(self.path, name, exc) from None
        return HostDir(self.path / name, _fd=fd)

    def _open(self, name: str, flags: int, mode: int = 0o600) -> int:
        try:
            return os.open(_name(name), flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self._fd)
        except OSError as exc:
            raise _refused(self.path, name, exc) from None

    def open_regular(self, name: str, flags: int) -> int:
        """A descriptor on the regular file ``name`` (created 0600 with ``os.O_CREAT``), for a
        caller that keeps it open (a lock, a log a child process writes to)."""
        fd = self._open(name, flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise HostPathRefused(f"{self.path / name} is not a regular file")
        return fd

    def append(self, name: str, data: bytes) -> None:
        """Append ``data`` to the file (created 0600 if missing) in one write."""
        fd = self.open_regular(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def replace(self, name: str, data: bytes) -> None:
        """Write the file whole: a fresh temporary name, then an atomic rename over ``name``
        (a link planted at ``name`` is replaced, never followed)."""
        self.replace_from(name, [data])

    def replace_from(self, name: str, chunks: Iterable[bytes], *, mode: int = 0o600) -> int:
        """:meth:`replace` with the content as it arrives (a stream too large to hold);
        returns its size. A failure mid-stream leaves ``name`` as it was."""
        tmp = f".{_name(name)}.{os.urandom(4).hex()}.tmp"  # os, not secrets: cheaper to import
        fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        size = 0
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                size += len(view)
                while view:
                    view = view[os.write(fd, view):]
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=self._fd)
            raise
        os.close(fd)
        try:
            os.rename(tmp, _name(name), src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError:
            os.unlink(tmp, dir_fd=self._fd)
            raise
        return size

    def create_once(self, name: str, data: bytes) -> None:
        """Write a content-addressed file unless it is already there."""
        if not self.exists(name):
            self.replace(name, data)

    def exists(self, name: str) -> bool:
        try:
            os.stat(_name(name), dir_fd=self._fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def names(self) -> list[str]:
        """The names in this directory."""
        return os.listdir(self._fd)

    def read(self, name: str) -> bytes:
        # O_NONBLOCK: a FIFO planted at the name must not hang the reader (it is refused below).
        fd = self._open(name, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HostPathRefused(f"{self.path / name} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read()
        finally:
            os.close(fd)

    def files(self) -> list[tuple[str, os.stat_result]]:
        """The regular files in this directory (links and folders left out), with their stat."""
        out = []
        with os.scandir(self._fd) as entries:
            for entry in entries:
                if entry.is_file(follow_symlinks=False):
                    out.append((entry.name, entry.stat(follow_symlinks=False)))
        return out

    def remove(self, name: str) -> bool:
        """Remove the file (a link at the name is removed itself, never followed); gone already
        is fine. True when this call removed it: of two processes removing one file, one is told
        True (a hand-over between them)."""
        try:
            os.unlink(_name(name), dir_fd=self._fd)
        except FileNotFoundError:
            return False
        return True


def _name(name: str) -> str:
    if not name or "/" in name or name in (".", ".."):
        raise HostPathRefused(f"{name!r} is not a plain file name")
    return name
