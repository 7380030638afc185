"""TEST DOUBLE ONLY: an in-memory Session for fast tests of the pure transaction logic.

It is not a sandbox and never ships in the package. Tests that claim "nothing was written"
against a real workspace use LocalSession or DockerSession; this double is for counting
commits and for hypothesis runs that would be slow through a subprocess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sandbox.base import Session
from sandloop.errors import FileMissing
from sandloop.files import FileChange, FileInfo
from sandloop.results import CommandResult


class InMemorySessionDouble(Session):
    """Files in a dict; records every read and every commit."""

    workspace = "/memory"

    def __init__(self, files: Mapping[str, bytes] | None = None) -> None:
        self.files: dict[str, bytes] = dict(files or {})
        self.commits: list[list[FileChange]] = []
        self.reads: list[str] = []

    async def run(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        raise NotImplementedError("the in-memory test double runs no commands")

    async def read_file(self, path: str) -> bytes:
        self.reads.append(path)
        if path not in self.files:
            raise FileMissing(f"{path} does not exist")
        return self.files[path]

    async def stat(self, path: str) -> FileInfo | None:
        if path in self.files:
            return FileInfo(path, len(self.files[path]), 0o100644, False, False)
        if any(name.startswith(path + "/") for name in self.files):
            return FileInfo(path, 0, 0o040755, True, False)
        return None

    async def commit(self, changes: Sequence[FileChange]) -> None:
        self.commits.append(list(changes))
        for change in changes:
            if change.content is None:
                self.files.pop(change.path, None)
            else:
                self.files[change.path] = change.content

    async def close(self) -> None:
        pass
