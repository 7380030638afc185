"""The multi-file envelope format (Codex's ``apply_patch``), parsed into :class:`FileOp` s.

::

    *** Begin Patch
    *** Add File: path        then '+' lines
    *** Delete File: path
    *** Update File: path     then an optional '*** Move to: new/path', then V4A hunks
    *** End Patch

The hunks are parsed by :mod:`sandbox.patch.v4a`, so the envelope and the API's headerless
diffs follow exactly the same matching rules. Every marker line may be indented or followed by
whitespace (:func:`sandbox.patch.v4a.marker`), as models sometimes write them. Parsing is
all-or-nothing: one bad line anywhere fails the whole patch, before any file is read.
"""

from __future__ import annotations

from sandbox.patch import v4a
from sandloop.errors import PatchParseError

__all__ = ["looks_like_envelope", "parse"]

_HEADERS = (v4a.ADD_FILE, v4a.DELETE_FILE, v4a.UPDATE_FILE)


def looks_like_envelope(text: str) -> bool:
    return text.lstrip().startswith(v4a.BEGIN_PATCH)


def _header(line: str) -> tuple[str, str] | None:
    """``(marker, path)`` when ``line`` is a file header (Add/Delete/Update File)."""
    mark = v4a.marker(line)
    return mark if mark is not None and mark[0] in _HEADERS else None


def _path(mark: tuple[str, str], n: int) -> str:
    prefix, path = mark
    if not path:
        raise PatchParseError(f"patch line {n}: {prefix.strip()!r} needs a path")
    return path


def _section(lines: list[str], start: int, end: int) -> int:
    """Index of the next file header (or ``end``) after the header at ``start``."""
    i = start + 1
    while i < end and _header(lines[i]) is None:
        i += 1
    return i


def _parse_section(lines: list[str], start: int, stop: int) -> v4a.FileOp:
    header, n = _header(lines[start]), start + 1
    assert header is not None  # parse() starts a section only at a header
    body = lines[start + 1 : stop]
    if header[0] == v4a.ADD_FILE:
        path = _path(header, n)
        while body and not body[-1].strip():
            body.pop()  # blank lines between sections are layout, not file content
        return v4a.FileOp(
            "create_file", path, content=v4a.parse_create_lines(body, first_line=n + 1)
        )
    if header[0] == v4a.DELETE_FILE:
        path = _path(header, n)
        for k, line in enumerate(body):
            if line.strip():
                raise PatchParseError(
                    f"patch line {n + 1 + k}: {line!r}: '*** Delete File:' takes no lines"
                )
        return v4a.FileOp("delete_file", path)
    path = _path(header, n)
    move_to: str | None = None
    first = n + 1
    move = v4a.marker(body[0]) if body else None
    if move is not None and move[0] == v4a.MOVE_TO:
        move_to = _path(move, first)
        body, first = body[1:], first + 1
    hunks = v4a.parse_hunks(body, first_line=first)
    if not hunks and move_to is None:
        raise PatchParseError(f"patch line {n}: '*** Update File: {path}' has no hunks")
    return v4a.FileOp("update_file", path, hunks=hunks, move_to=move_to)


def parse(text: str) -> list[v4a.FileOp]:
    """Every operation of an envelope patch, in order. Raises PatchParseError."""
    lines = v4a.split_diff(text)
    begin = 0
    while begin < len(lines) and not lines[begin].strip():
        begin += 1
    if begin == len(lines) or v4a.marker(lines[begin]) != (v4a.BEGIN_PATCH, ""):
        raise PatchParseError("the first line of the patch must be '*** Begin Patch'")
    end = len(lines) - 1
    while end > begin and not lines[end].strip():
        end -= 1
    if end == begin or v4a.marker(lines[end]) != (v4a.END_PATCH, ""):
        raise PatchParseError("the last line of the patch must be '*** End Patch'")
    i = begin + 1
    while i < end and not lines[i].strip():
        i += 1
    if i < end and _header(lines[i]) is None:
        raise PatchParseError(
            f"patch line {i + 1}: expected '*** Add File:', '*** Delete File:' or "
            f"'*** Update File:', got {lines[i]!r}"
        )
    ops: list[v4a.FileOp] = []
    while i < end:
        stop = _section(lines, i, end)
        ops.append(_parse_section(lines, i, stop))
        i = stop
    if not ops:
        raise PatchParseError("the patch contains no file operations")
    return ops
