"""Files as the back-ends report and change them, and the kinds of patch operation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FileChange", "FileInfo", "PatchKind"]

#: The three operations a patch performs on one file (a move is an update that also creates
#: the new path and deletes the old one).
PatchKind = Literal["create_file", "update_file", "delete_file"]


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
