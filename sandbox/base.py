"""The small interface every shell/file back-end implements.

A :class:`Session` runs command lines and does file operations inside one isolated workspace.
Paths given to file operations are relative to the workspace root; back-ends refuse anything
that resolves outside it. File writes go through :meth:`Session.commit`, which is all or
nothing: either every change lands or none does.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

__all__ = ["Closing", "CommandResult", "FileChange", "FileInfo", "Session", "SessionLimits", "StreamCapture"]


@dataclass(frozen=True)
class StreamCapture:
    """One output stream after the cap: what was kept and exactly what was dropped."""

    text: str
    total_bytes: int
    dropped_bytes: int = 0
    dropped_lines: int = 0

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0


@dataclass(frozen=True)
class CommandResult:
    """The result of one command line."""

    stdout: StreamCapture
    stderr: StreamCapture
    exit_code: int | None  # None when the command timed out
    timed_out: bool = False
    duration_s: float = 0.0
    oom_killed: bool = False
    signal: int | None = None  # the signal that ended the command, if any


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    mode: int
    is_dir: bool
    is_symlink: bool


@dataclass(frozen=True)
class FileChange:
    """A whole-file change to commit: new ``content``, or ``None`` to delete."""

    path: str
    content: bytes | None
    mode: int | None = None  # None keeps the existing mode (0o644 for new files)


@dataclass(frozen=True)
class SessionLimits:
    """Limits the back-end enforces itself, whatever the caller asks for."""

    default_timeout_s: float = 120.0
    max_timeout_s: float = 600.0
    max_output_bytes: int = 1 << 20  # per stream, per command
    extra: Mapping[str, str] = field(default_factory=dict)


class Closing(abc.ABC):
    """``async with`` support for anything with an idempotent ``close()`` (sessions, browsers)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything held. Idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Session(Closing):
    """One isolated workspace: run commands, read and change files, close."""

    #: The workspace root as commands see it (e.g. ``/workspace``).
    workspace: str = "/workspace"

    @abc.abstractmethod
    async def run(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        """Run one shell command line (``bash -c``) in the workspace."""

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """The bytes of a workspace file. Raises FileMissing or PathRefused."""

    @abc.abstractmethod
    async def stat(self, path: str) -> FileInfo | None:
        """File facts, or None when the path does not exist. Never follows a final symlink."""

    @abc.abstractmethod
    async def commit(self, changes: Sequence[FileChange]) -> None:
        """Apply every change atomically (temp + rename, all or nothing)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything the session holds. Idempotent."""

    async def write_file(self, path: str, content: bytes, mode: int | None = None) -> None:
        await self.commit([FileChange(path, content, mode)])

    async def delete_file(self, path: str) -> None:
        await self.commit([FileChange(path, None)])

