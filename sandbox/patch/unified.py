"""Unified diffs (``diff -u`` / ``git diff``), parsed with ``unidiff`` into :class:`FileOp` s.

A unified hunk becomes a V4A hunk without anchors whose line number is a *hint*: the old
block is tried at that line first and otherwise located exactly like a V4A hunk, so a diff made
against a slightly different version of the file still applies where its context is. New and
deleted files, git renames, new file modes and ``\\ No newline at end of file`` are honoured;
binary diffs, symlinks and submodules are refused.

Line endings are content here, as for ``git apply``: an added line keeps the ending the diff
gives it (``+a\r\n`` writes CRLF into an LF file), so whole-file conversions apply; the newline
before a ``\\ No newline at end of file`` marker is the diff's own, and a CR before it is part
of the line. Only when a hunk's old lines disagree with the file's endings (an LF diff on a CRLF
file, which git refuses) do its new lines follow the file instead, like V4A lines. The diff's
structure (names, modes, hunk headers) is read with its CRLFs taken as plain newlines, so a
patch saved with CRLF throughout still parses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Imported from the modules that define them: the package root does not re-export them
# explicitly, which ``mypy --strict`` rejects.
from unidiff.constants import DEV_NULL, LINE_TYPE_NO_NEWLINE
from unidiff.errors import UnidiffParseError
from unidiff.patch import Hunk as UHunk
from unidiff.patch import PatchedFile, PatchSet

from sandbox.patch import v4a
from sandloop.errors import PatchParseError

__all__ = ["looks_like_unified", "parse"]

_GIT_ESCAPE = re.compile(rb"\\([0-7]{3}|.)")
_SIMPLE_ESCAPES = {b"n": b"\n", b"t": b"\t", b'"': b'"', b"\\": b"\\", b"a": b"\a", b"b": b"\b"}
_MODES = {"100644": 0o644, "100755": 0o755}


def looks_like_unified(text: str) -> bool:
    return bool(re.search(r"^(--- |diff --git |@@ -\d)", text, re.MULTILINE))


def _unquote(name: str) -> str:
    """Git writes unusual names as C strings: ``"caf\\303\\251.txt"``."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name

    def one(m: re.Match[bytes]) -> bytes:
        esc = m.group(1)
        if len(esc) == 3:
            return bytes([int(esc, 8)])
        return _SIMPLE_ESCAPES.get(esc, esc)

    raw = _GIT_ESCAPE.sub(one, name[1:-1].encode("utf-8"))
    return raw.decode("utf-8", errors="replace")


def _names(pf: PatchedFile) -> tuple[str | None, str | None]:
    """(source, target) paths without git's a/ b/ prefixes; None for /dev/null."""
    source = None if pf.source_file == DEV_NULL else _unquote(pf.source_file)
    target = None if pf.target_file == DEV_NULL else _unquote(pf.target_file)
    # Strip the prefixes only when the diff uses git's convention on both sides.
    prefixed = (source is None or source.startswith("a/")) and (
        target is None or target.startswith("b/")
    )
    if prefixed:
        source = source[2:] if source is not None else None
        target = target[2:] if target is not None else None
    return source, target


def _cut(text: str, no_newline: bool) -> tuple[str, str | None]:
    """(content, ending) of one line of the diff, without its type character."""
    if no_newline:  # the newline is the diff's own; a CR before it belongs to the line
        return (text[:-1] if text.endswith("\n") else text), ""
    if text.endswith("\r\n"):
        return text[:-2], "\r\n"
    if text.endswith("\n"):
        return text[:-1], "\n"
    return text, None  # the diff text stops here: it does not say


def _lines(h: UHunk, raw: Sequence[str]) -> list[tuple[v4a.LineKind, str, str | None]]:
    """(kind, content, ending) of each context, removed and added line, from the raw diff text."""
    out: list[tuple[v4a.LineKind, str, str | None]] = []
    lines = list(h)
    for k, line in enumerate(lines):
        if line.line_type not in ("+", "-", " "):
            continue
        kind: v4a.LineKind = "+" if line.is_added else "-" if line.is_removed else " "
        text = raw[line.diff_line_no - 1] if line.diff_line_no else line.value
        if text[:1] == line.line_type:
            text = text[1:]  # (a blank context line may have lost its space)
        no_newline = k + 1 < len(lines) and lines[k + 1].line_type == LINE_TYPE_NO_NEWLINE
        out.append((kind, *_cut(text, no_newline)))
    return out


def _hunk(h: UHunk, number: int, raw: Sequence[str]) -> v4a.Hunk:
    lines = _lines(h, raw)
    # "-N,0" means "insert after line N"; otherwise the old block starts at line N.
    hint = h.source_start if h.source_length == 0 else h.source_start - 1
    header_line = (h[0].diff_line_no or 1) - 1 if len(h) else 0
    return v4a.Hunk(
        number=number,
        diff_line=header_line,
        anchors=(),
        lines=tuple((kind, content) for kind, content, _ in lines),
        hint=max(hint, 0),
        eols=tuple(eol for _, _, eol in lines),
    )


def _final_newline(pf: PatchedFile) -> bool | None:
    """What the markers say about the new file's final newline; None when they say nothing."""
    if not pf:
        return None
    target_lacks = source_lacks = False
    previous = None
    for line in pf[-1]:
        if line.line_type == "\\" and previous is not None:
            target_lacks |= previous in ("+", " ")
            source_lacks |= previous in ("-", " ")
        previous = line.line_type
    if target_lacks:
        return False
    return True if source_lacks else None


def _created_content(pf: PatchedFile, raw: Sequence[str]) -> str:
    out: list[str] = []
    for h in pf:
        for kind, content, eol in _lines(h, raw):
            if kind != "+":
                raise PatchParseError(f"the diff creates {pf.target_file} but has old lines")
            out += (content, eol or "")
    return "".join(out)


def _op(pf: PatchedFile, raw: Sequence[str]) -> v4a.FileOp:
    if pf.is_binary_file:
        raise PatchParseError(f"{pf.path}: binary diffs are not supported")
    if pf.is_symlink or pf.is_submodule:
        raise PatchParseError(f"{pf.path}: symlink and submodule diffs are not supported")
    source, target = _names(pf)
    mode = _MODES.get(pf.target_mode or "")
    if source is None and target is not None:
        return v4a.FileOp("create_file", target, content=_created_content(pf, raw), mode=mode)
    if target is None and source is not None:
        return v4a.FileOp("delete_file", source)
    assert source is not None and target is not None  # unidiff never gives two /dev/null
    hunks = tuple(_hunk(h, k, raw) for k, h in enumerate(pf, 1))
    move_to = target if target != source else None
    if not hunks and move_to is None and mode is None:
        raise PatchParseError(f"{source}: the diff changes nothing sandloop can apply")
    return v4a.FileOp(
        "update_file",
        source,
        hunks=hunks,
        move_to=move_to,
        final_newline=_final_newline(pf),
        mode=mode,
    )


def parse(text: str) -> list[v4a.FileOp]:
    """Every file operation of a unified diff, in order. Raises PatchParseError."""
    # unidiff reads the structure from a copy whose CRLFs are plain newlines (it would keep the
    # CR in names and modes); line contents and endings come from the text itself, whose lines
    # split at the same newlines.
    raw = v4a.lines_with_endings(text)
    try:
        patch = PatchSet(text.replace("\r\n", "\n"))
    except UnidiffParseError as exc:
        raise PatchParseError(f"unified diff: {exc}") from None
    if not patch:
        raise PatchParseError("no file diffs found (expected '--- a/…' / '+++ b/…' headers)")
    return [_op(pf, raw) for pf in patch]
