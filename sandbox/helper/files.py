"""The helper's file operations: read, stat, and an all-or-nothing commit, confined to the
workspace. Standard library only (shipped with the helper).

Every path component is opened with ``O_NOFOLLOW`` relative to its parent's descriptor, so no
symlink anywhere on the path — planted before or during the call — can lead a read or a write
outside the workspace. Writes are atomic (a temp file beside the target, then a rename) and keep
the file's mode.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import stat as stat_mod
from collections.abc import Iterable, Sequence

from sandbox.helper import wire
from sandbox.helper.wire import OpError

__all__ = ["Workspace"]


def _components(path: str) -> list[str]:
    if not path:
        raise OpError("path_refused", "empty path")
    if "\x00" in path:
        raise OpError("path_refused", "path contains a NUL byte")
    if path.startswith("/"):
        raise OpError("path_refused", f"{path!r} is absolute; paths are relative to the workspace")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        raise OpError("path_refused", f"{path!r} names the workspace itself")
    if ".." in parts:
        raise OpError("path_refused", f"{path!r} contains '..'")
    return parts


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class _Staged:
    """One file of a commit on its way in."""

    def __init__(self, dir_fd: int, name: str, delete: bool) -> None:
        self.dir_fd, self.name, self.delete = dir_fd, name, delete
        self.existed = False
        self.tmp: str | None = None
        self.backup: str | None = None


def _scratch_name(suffix: str) -> str:
    # os.urandom, not secrets: the helper keeps its imports (and so its forks) small.
    return f".sandloop-{os.urandom(6).hex()}.{suffix}"


class Workspace:
    """File operations on one directory tree."""

    def __init__(self, root: str, *, max_read_bytes: int) -> None:
        self.root = root
        self.max_read_bytes = max_read_bytes

    def open_parent(self, path: str, create: bool) -> tuple[int, str]:
        """A descriptor of ``path``'s parent directory (made when ``create``) and the last name."""
        parts = _components(path)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i, part in enumerate(parts[:-1]):
                try:
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        missing = "/".join(parts[: i + 1])
                        raise OpError("missing", f"{path}: directory {missing} does not exist") from None
                    os.mkdir(part, 0o755, dir_fd=fd)
                    nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise OpError(
                            "path_refused", f"{path}: {'/'.join(parts[: i + 1])} is a symlink or not a directory"
                        ) from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    def read(self, path: str) -> wire.ReadResult:
        dir_fd, name = self.open_parent(path, create=False)
        try:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except FileNotFoundError:
                raise OpError("missing", f"{path} does not exist") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise OpError("path_refused", f"{path} is a symlink") from None
                raise
            try:
                st = os.fstat(fd)
                if not stat_mod.S_ISREG(st.st_mode):
                    raise OpError("path_refused", f"{path} is not a regular file")
                if st.st_size > self.max_read_bytes:
                    raise OpError("too_large", f"{path} is {st.st_size} bytes (limit {self.max_read_bytes})")
                chunks = []
                while True:
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        break
                    chunks.append(chunk)
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)
        return {"data": base64.b64encode(b"".join(chunks)).decode(), "mode": stat_mod.S_IMODE(st.st_mode)}

    def stat(self, path: str) -> wire.StatResult:
        try:
            dir_fd, name = self.open_parent(path, create=False)
        except OpError as exc:
            if exc.kind == "missing":
                return {"exists": False}
            raise
        try:
            st = _lstat(dir_fd, name)
        finally:
            os.close(dir_fd)
        if st is None:
            return {"exists": False}
        return {
            "exists": True,
            "size": st.st_size,
            "mode": stat_mod.S_IMODE(st.st_mode),
            "is_dir": stat_mod.S_ISDIR(st.st_mode),
            "is_symlink": stat_mod.S_ISLNK(st.st_mode),
        }

    def commit(self, changes: Sequence[wire.Change]) -> wire.CommitResult:
        """All or nothing: stage every new file as a temp beside its target, then swap them in,
        keeping the old files as backups until every swap succeeded; roll back on any failure."""
        staged: list[_Staged] = []
        done: list[_Staged] = []
        # One descriptor per parent folder, not per file: a commit of thousands of files in a few
        # folders must not run out of descriptors (1024 is a common limit, 256 on macOS).
        parents: dict[tuple[str, ...], int] = {}
        try:
            seen: set[str] = set()
            for change in changes:
                self._stage(change, staged, seen, parents)
            for entry in staged:  # the swap
                if entry.existed:
                    backup = _scratch_name("bak")
                    os.rename(entry.name, backup, src_dir_fd=entry.dir_fd, dst_dir_fd=entry.dir_fd)
                    entry.backup = backup
                if entry.tmp is not None:
                    os.rename(entry.tmp, entry.name, src_dir_fd=entry.dir_fd, dst_dir_fd=entry.dir_fd)
                    entry.tmp = None
                done.append(entry)
        except BaseException as exc:
            for entry in reversed(done):
                with contextlib.suppress(OSError):
                    if not entry.delete:
                        os.unlink(entry.name, dir_fd=entry.dir_fd)
                    if entry.backup:
                        os.rename(entry.backup, entry.name, src_dir_fd=entry.dir_fd, dst_dir_fd=entry.dir_fd)
                        entry.backup = None
            _unlink(staged, backups=not done)
            _close_all(parents)
            if isinstance(exc, OSError):
                where = f": {exc.filename}" if exc.filename else ""
                raise OpError("io", f"{exc.strerror or exc}{where}") from exc
            raise
        _unlink(staged, backups=True)
        _close_all(parents)
        return {"changed": len(staged)}

    def _stage(self, change: wire.Change, staged: list[_Staged], seen: set[str],
               parents: dict[tuple[str, ...], int]) -> None:
        path = change["path"]
        parts = _components(path)
        key = "/".join(parts)
        if key in seen:
            raise OpError("bad_request", f"{path} appears twice in one commit")
        seen.add(key)
        data = change["data"]
        folder = tuple(parts[:-1])
        if folder in parents:
            dir_fd, name = parents[folder], parts[-1]
        else:
            dir_fd, name = self.open_parent(path, create=data is not None)
            parents[folder] = dir_fd
        entry = _Staged(dir_fd, name, data is None)
        staged.append(entry)
        st = _lstat(dir_fd, name)
        if st is not None and stat_mod.S_ISDIR(st.st_mode):
            raise OpError("path_refused", f"{path} is a directory")
        entry.existed = st is not None
        if data is None:
            if st is None:
                raise OpError("missing", f"{path} does not exist")
            return
        mode = change["mode"]
        if mode is None:
            mode = stat_mod.S_IMODE(st.st_mode) if st is not None and not stat_mod.S_ISLNK(st.st_mode) else 0o644
        # Never a setuid/setgid (or sticky) file: new content under an old setuid bit would be a
        # program of the model's choosing running as the file's owner (the kernel drops the bits
        # on a write for the same reason).
        mode &= 0o777
        tmp = _scratch_name("tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        entry.tmp = tmp
        try:
            view = memoryview(base64.b64decode(data))
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)


def _close_all(parents: dict[tuple[str, ...], int]) -> None:
    for fd in parents.values():
        os.close(fd)
    parents.clear()


def _unlink(entries: Iterable[_Staged], *, backups: bool) -> None:
    for entry in entries:
        for name in (entry.tmp, entry.backup if backups else None):
            if name:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=entry.dir_fd)
