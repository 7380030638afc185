"""The small interface every shell/file back-end implements.

A :class:`Session` runs command lines and does file operations inside one isolated workspace.
Paths given to file operations are relative to the workspace root; back-ends refuse anything
that resolves outside it. File writes go through :meth:`Session.commit`, which is all or
nothing: either every change lands or none does.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from sandloop.errors import SandboxError, SandloopError
from sandloop.files import FileChange, FileInfo
from sandloop.hostfiles import HostDir
from sandloop.results import CommandResult

__all__ = ["Closing", "Session", "Snapshotted", "with_session_notes"]


@dataclass(frozen=True)
class Snapshotted:
    """What :meth:`Session.capture` kept: the tar's size, and the root's image when committed."""

    tar_bytes: int
    tar_sha256: str
    image: str | None = None


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
    #: What happened to the session that whoever drives it must hear about — a container that
    #: died and was replaced, changes that were lost with a pod — in the order it happened.
    notes: list[str]
    _notes_told: int = 0

    def take_notes(self) -> list[str]:
        """The notes added since the last call, each given out once (the handlers put them in
        the next output, so the model learns its sandbox changed under it)."""
        notes = getattr(self, "notes", [])
        new = notes[self._notes_told:]
        self._notes_told = len(notes)
        return list(new)

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

    async def run_many(
        self,
        commands: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> list[CommandResult | SandloopError]:
        """Run command lines one after another, each with its own timeout; ``result[i]`` answers
        ``commands[i]``, a command that could not run with its error. The list stops short after
        a command that timed out (nothing after it runs) and after an error of the sandbox itself
        (the caller may go on with the rest, in a sandbox started afresh). Back-ends that can
        send them all at once do (:class:`~sandbox.helper.client.HelperSession`)."""
        results: list[CommandResult | SandloopError] = []
        for command in commands:
            try:
                result = await self.run(command, timeout_s=timeout_s, max_output_bytes=max_output_bytes, env=env)
            except SandloopError as exc:
                results.append(exc)
                break
            results.append(result)
            if result.timed_out:
                break
        return results

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

    async def capture(self, into: HostDir, tar: str, *, names: Sequence[str] | None,
                       commit: tuple[str, Mapping[str, str]] | None = None) -> Snapshotted:
        """Write the sandbox's own files under /tmp (``names``: ``home``, or ``.``; None: not this
        time) as a tar named ``tar`` into ``into``, and commit the root file system to the image ``commit`` names
        (tag, labels) where the back-end can. A back-end that cannot says so."""
        raise SandboxError(f"the {type(self).__name__} back-end cannot snapshot a session")

    async def write_file(self, path: str, content: bytes, mode: int | None = None) -> None:
        await self.commit([FileChange(path, content, mode)])

    async def delete_file(self, path: str) -> None:
        await self.commit([FileChange(path, None)])


def with_session_notes(text: str, session: Session) -> str:
    """``text`` (a call's stderr or report) followed by the session's new notes, one
    ``[sandloop] …`` line each: the model must not go on believing in a workspace that changed
    under it (a replaced container, changes lost with a pod)."""
    notes = session.take_notes()
    if not notes:
        return text
    sep = "" if not text or text.endswith("\n") else "\n"
    return text + sep + "".join(f"[sandloop] {note}\n" for note in notes)
