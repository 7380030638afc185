"""Lexical validation of the paths a patch names, done before anything is read.

The checks here are purely textual: they refuse what can never be a safe workspace-relative
file name (absolute paths, ``..``, control characters, ``~``, over-long names) and the paths a
policy marks read-only. Whether a valid-looking path leads outside the workspace through a
symlink is decided where the file lives — by the session, inside the container — because only
there is the answer true at the moment of the write.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from sandloop.errors import PathRefused
from sandloop.matching import glob_match

__all__ = [
    "DEFAULT_READ_ONLY_GLOBS",
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "normalize",
    "validate",
]

DEFAULT_READ_ONLY_GLOBS: tuple[str, ...] = (".git/**",)
MAX_COMPONENT_BYTES = 255  # NAME_MAX on Linux file systems
MAX_PATH_BYTES = 4096  # PATH_MAX

# Bidirectional overrides make a name read differently from what it is ("trojan source").
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def _refuse(path: str, reason: str) -> PathRefused:
    return PathRefused(f"{path!r}: {reason}")


def normalize(path: str) -> str:
    """The NFC, ``/``-separated form of a workspace-relative path; PathRefused if it is unsafe.

    ``.`` segments and doubled slashes are dropped (``./src//a.py`` → ``src/a.py``), because
    models write them harmlessly; everything that could climb out or confuse a reader is refused.
    """
    if not path:
        raise _refuse(path, "the path is empty")
    for ch in path:
        if unicodedata.category(ch) == "Cc":
            raise _refuse(path, f"control character U+{ord(ch):04X} is not allowed in a path")
        if ch in _BIDI_CONTROLS:
            raise _refuse(path, f"bidirectional control U+{ord(ch):04X} is not allowed in a path")
    path = unicodedata.normalize("NFC", path)
    if path.startswith("/"):
        raise _refuse(path, "absolute paths are not allowed; give a path relative to the workspace")
    if "\\" in path:
        raise _refuse(path, "backslashes are not allowed; separate directories with '/'")
    if path.startswith("~"):
        raise _refuse(path, "'~' is not expanded; give a path relative to the workspace")
    if len(path) >= 2 and path[1] == ":" and path[0].isalpha():
        raise _refuse(path, "drive letters are not allowed; give a path relative to the workspace")
    if path.endswith("/"):
        raise _refuse(path, "the path names a directory; name a file")
    segments = [s for s in path.split("/") if s not in ("", ".")]
    if not segments:
        raise _refuse(path, "the path names the workspace itself; name a file")
    if ".." in segments:
        raise _refuse(path, "'..' segments are not allowed; paths must stay inside the workspace")
    for segment in segments:
        if len(segment.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _refuse(
                path, f"a path component is longer than {MAX_COMPONENT_BYTES} bytes"
            )
    clean = "/".join(segments)
    if len(clean.encode("utf-8")) > MAX_PATH_BYTES:
        raise _refuse(path, f"the path is longer than {MAX_PATH_BYTES} bytes")
    return clean


def validate(path: str, read_only_globs: Sequence[str] = DEFAULT_READ_ONLY_GLOBS) -> str:
    """Normalize ``path`` and refuse it if a read-only glob covers it. Returns the clean path."""
    clean = normalize(path)
    for pattern in read_only_globs:
        if glob_match(pattern, clean, fold_case=True):
            raise _refuse(clean, f"the path is read-only (matches {pattern!r})")
    return clean
