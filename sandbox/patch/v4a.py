"""V4A diffs: parse and apply the headerless diff of one ``apply_patch_call`` operation.

The two public reference implementations (the OpenAI Agents SDK's ``apply_diff`` and Codex's
``apply_patch``) disagree on many details; these are sandloop's rules, and every one of them
has a fixture under tests/patch/scenarios:

* A hunk's old block (its `` `` and ``-`` lines) is located from the cursor with four tiers:
  exact, then trailing-whitespace-insensitive, then whitespace-trimmed, then with Unicode
  punctuation folded (dashes, curly quotes, odd spaces). The first position at or after the
  cursor wins; the cursor then moves past the block, so hunks must come in file order.
* Matched context lines keep the FILE's bytes; only ``-`` and ``+`` lines change anything.
* ``@@ text`` moves the cursor past the first line matching ``text`` (same four tiers);
  stacked ``@@`` lines narrow step by step; an anchor that is not found is a failure.
* An anchor found only before the cursor was already passed — models repeat a function's
  ``@@ def f():`` (or a ``class``/``def`` stack) for every hunk in it. It leaves the cursor
  where it is, inside the block it located, and the hunk then goes where its own lines are:
  they must occur exactly once at or after the cursor (a pure insertion must directly follow
  the anchor). A hunk's last anchor may repeat one back to where the previous anchored hunk's
  first ``@@`` led, not further (that would be going back in the file); an earlier anchor of
  its stack may lie anywhere above. An anchor both passed and found again further down is
  read both ways, and the hunk is refused when its lines fit both blocks. Ambiguity is
  always refused rather than guessed.
* A hunk of only ``+`` lines inserts at the cursor: right after its anchor, or — with no
  anchor — at the top of the file (first hunk) or right after the previous hunk.
* ``*** End of File`` anchors the hunk at the real end of the file.
* Trailing bare blank lines of a hunk (models put them between hunks) are tried as context
  first and dropped when the file has no blank line there.
* Updates keep the file's line endings (new lines take the file's first ending), its UTF-8
  BOM and the presence or absence of its final newline: a V4A diff's own CRLF is transport,
  not content, in both reference implementations. In ``create_file`` every ``+`` line ends
  with a newline. (Unified diffs do spell endings out; see :mod:`sandbox.patch.unified`.)
* An envelope (``*** Begin Patch`` / ``*** Update File: <same path>`` … ``*** End Patch``)
  around the diff is tolerated; any other ``***`` line fails.
* Marker lines (``*** Begin Patch``, ``*** Update File: …``, ``*** End of File`` …) are
  recognized whatever whitespace surrounds them, here and in the envelope format: models indent
  them. So a context line cannot hold a marker's text (`` *** End of File``); use ``-``/``+``.
* Binary files (NUL bytes, or not UTF-8) are refused.

Everything here is pure: bytes and text in, bytes out, exceptions from :mod:`sandloop.errors`.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from sandbox.patch import paths
from sandloop.errors import BinaryFile, ContextNotFound, PatchParseError, PathRefused
from sandloop.files import PatchKind

__all__ = [
    "Applied",
    "FileOp",
    "Hunk",
    "apply_hunks",
    "decode_text",
    "from_api",
    "lines_with_endings",
    "marker",
    "parse_create",
    "parse_create_lines",
    "parse_hunks",
    "parse_update",
    "split_diff",
]
LineKind = Literal[" ", "-", "+"]

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
END_OF_FILE = "*** End of File"
ADD_FILE = "*** Add File: "
DELETE_FILE = "*** Delete File: "
UPDATE_FILE = "*** Update File: "
MOVE_TO = "*** Move to: "

_PATH_MARKERS = (ADD_FILE, DELETE_FILE, UPDATE_FILE, MOVE_TO)
_BARE_MARKERS = (BEGIN_PATCH, END_PATCH, END_OF_FILE)

_UNIFIED_HEADER = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@")
_BOM = "\ufeff"


@dataclass(frozen=True)
class Hunk:
    """One hunk: optional ``@@`` anchors, then context/removed/added lines in diff order."""

    number: int  # 1-based, for messages
    diff_line: int  # 1-based line of the diff where the hunk starts, for messages
    anchors: tuple[str, ...]
    lines: tuple[tuple[LineKind, str], ...]
    eof: bool = False
    # How many trailing lines are bare blank lines that may be absent from the file.
    optional_tail: int = 0
    # A unified diff's idea of where the old block starts (0-based); tried first when set.
    hint: int | None = None
    # A unified diff's own ending of each line ("\n", "\r\n", "" before "\ No newline", None
    # when the diff does not say); empty for V4A, whose new lines take the file's endings.
    eols: tuple[str | None, ...] = ()

    @property
    def added(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "+")

    @property
    def removed(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "-")


@dataclass(frozen=True)
class FileOp:
    """One file operation, whichever format it came from (API call, envelope, unified diff)."""

    kind: PatchKind
    path: str
    hunks: tuple[Hunk, ...] = ()
    content: str | None = None  # create_file: the whole new text
    move_to: str | None = None  # update_file from an envelope or a git rename
    # None keeps the file's final-newline state; a unified diff may set it explicitly.
    final_newline: bool | None = None
    mode: int | None = None  # a unified diff's new file mode, if it gave one


@dataclass(frozen=True)
class Applied:
    content: bytes
    added: int
    removed: int


# --------------------------------------------------------------------------- parsing


def lines_with_endings(text: str) -> list[str]:
    """``text`` split after each LF, endings kept. Unlike ``str.splitlines`` a CR alone (or a
    form feed, U+2028 …) stays inside its line, as it does for git and for the files here."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def split_diff(diff: str) -> list[str]:
    """The diff's lines, without their line endings (the diff's own CRLF is transport)."""
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def marker(line: str) -> tuple[str, str] | None:
    """``(marker, path)`` when ``line`` is a marker line, ignoring the whitespace around it.

    ``marker`` is one of the constants above (``ADD_FILE`` …, ``END_OF_FILE``); ``path`` is what
    follows a file marker, stripped ("" for the others, or when the path is missing).
    """
    if "***" not in line:  # the common case, without copying the line
        return None
    text = line.strip()
    if not text.startswith("***"):
        return None
    if text in _BARE_MARKERS:
        return text, ""
    for prefix in _PATH_MARKERS:
        if text.startswith(prefix) or text == prefix.rstrip():
            return prefix, text[len(prefix) :].strip()
    return None


def _star_line_message(line: str, diff_line: int) -> str:
    where = f"diff line {diff_line}"
    if line.startswith(MOVE_TO):
        return (
            f"{where}: '*** Move to:' is not supported here; the API has no move "
            "(create the new file and delete the old one)"
        )
    if line.startswith((ADD_FILE, DELETE_FILE, UPDATE_FILE)):
        return (
            f"{where}: {line!r}: an operation's diff covers exactly one file; "
            "send one operation per file"
        )
    if line.strip() in (BEGIN_PATCH, END_PATCH):
        return f"{where}: {line.strip()!r} may only open/close an envelope"
    return (
        f"{where}: {line!r} is not a valid line; the only '***' line allowed in a hunk "
        "is '*** End of File'"
    )


class _HunkBuilder:
    """Accumulates lines into hunks; a new hunk starts at an ``@@`` line that follows body lines."""

    def __init__(self) -> None:
        self.hunks: list[Hunk] = []
        self._reset(None)

    def _reset(self, diff_line: int | None) -> None:
        self.start: int | None = diff_line
        self.anchors: list[str] = []
        self.body: list[tuple[LineKind, str]] = []
        self.bare_tail = 0  # trailing body lines that were bare blank lines
        self.eof = False
        self.headed = False  # saw an @@ line for this hunk

    def anchor(self, text: str, diff_line: int) -> None:
        if self.body or self.eof:
            self.flush()
            self._reset(diff_line)
        if self.start is None:
            self.start = diff_line
        self.headed = True
        if text.strip():
            self.anchors.append(text)

    def line(self, kind: LineKind, text: str, diff_line: int, *, bare: bool) -> None:
        if self.start is None:
            self.start = diff_line
        self.body.append((kind, text))
        self.bare_tail = self.bare_tail + 1 if bare else 0

    def flush(self) -> None:
        if self.start is None:
            return
        if not self.body:
            raise PatchParseError(
                f"hunk {len(self.hunks) + 1} (diff line {self.start}) has an '@@' line but no "
                "context, '-' or '+' lines after it"
            )
        if not self.headed and self.bare_tail == len(self.body):
            return  # only blank lines before the first '@@': whitespace, not a hunk
        self.hunks.append(
            Hunk(
                number=len(self.hunks) + 1,
                diff_line=self.start,
                anchors=tuple(self.anchors),
                lines=tuple(self.body),
                eof=self.eof,
                optional_tail=self.bare_tail,
            )
        )


def parse_hunks(lines: Sequence[str], *, first_line: int = 1) -> tuple[Hunk, ...]:
    """Parse V4A hunk lines (no envelope). ``first_line`` numbers the lines in messages."""
    builder = _HunkBuilder()
    for index, line in enumerate(lines):
        n = first_line + index
        mark = marker(line)
        if line.startswith("@@"):
            if _UNIFIED_HEADER.match(line):
                raise PatchParseError(
                    f"diff line {n}: {line!r} has line numbers, but V4A hunks are located by "
                    "their context: write '@@' (or '@@ <a line just above the change>') and "
                    "then the context, '-' and '+' lines"
                )
            if line != "@@" and not line.startswith("@@ "):
                raise PatchParseError(
                    f"diff line {n}: {line!r} is not a valid hunk header; write '@@' or "
                    "'@@ <a line of the file>'"
                )
            builder.anchor(line[3:], n)
        elif mark is not None and mark[0] == END_OF_FILE:
            if not builder.body:
                raise PatchParseError(f"diff line {n}: '*** End of File' must end a hunk's lines")
            builder.eof = True
        elif mark is not None or line.startswith("***"):
            raise PatchParseError(_star_line_message(line.strip(), n))
        elif builder.eof:
            raise PatchParseError(
                f"diff line {n}: only an '@@' line may follow '*** End of File'"
            )
        elif line == "":
            builder.line(" ", "", n, bare=True)
        elif line[0] in " -+":
            kind: LineKind = " " if line[0] == " " else "-" if line[0] == "-" else "+"
            builder.line(kind, line[1:], n, bare=False)
        else:
            raise PatchParseError(
                f"diff line {n}: unexpected line {line!r}; every line of a hunk starts with "
                "' ' (context), '-' (removed) or '+' (added), or is an '@@' line"
            )
    builder.flush()
    return tuple(builder.hunks)


def _same_path(header_path: str, path: str) -> bool:
    try:
        return paths.normalize(header_path) == paths.normalize(path)
    except PathRefused:
        return False


def _unwrap_envelope(lines: list[str], path: str, header: str) -> tuple[list[str], int]:
    """Strip an envelope around a single-file diff for ``path``; return (body, first line no)."""
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start == len(lines) or marker(lines[start]) != (BEGIN_PATCH, ""):
        return lines, 1
    end = len(lines) - 1
    while end > start and not lines[end].strip():
        end -= 1
    if marker(lines[end]) != (END_PATCH, ""):
        raise PatchParseError(
            "the diff opens with '*** Begin Patch' but does not end with '*** End Patch'"
        )
    body = lines[start + 1 : end]
    first = start + 2
    mark = marker(body[0]) if body else None
    if mark is None or mark[0] != header:
        got = body[0] if body else "nothing"
        raise PatchParseError(
            f"diff line {first}: inside an envelope this operation expects "
            f"'{header}{path}', got {got!r}"
        )
    named = mark[1]
    if not _same_path(named, path):
        raise PatchParseError(
            f"diff line {first}: the envelope names {named!r} but the operation's "
            f"path is {path!r}"
        )
    return body[1:], first + 1


def parse_update(diff: str, path: str) -> tuple[Hunk, ...]:
    """The hunks of an ``update_file`` diff (envelope tolerated); at least one is required."""
    body, first = _unwrap_envelope(split_diff(diff), path, UPDATE_FILE)
    hunks = parse_hunks(body, first_line=first)
    if not hunks:
        raise PatchParseError("the update_file diff has no hunks")
    return hunks


def parse_create_lines(lines: Sequence[str], *, first_line: int = 1, eol: str = "\n") -> str:
    """The text of a new file from its ``+`` lines; each line gets ``eol``."""
    out: list[str] = []
    for index, line in enumerate(lines):
        if not line.startswith("+"):
            raise PatchParseError(
                f"diff line {first_line + index}: {line!r} does not start with '+'; every line "
                "of a new file's diff starts with '+'"
            )
        out.append(line[1:])
        out.append(eol)
    return "".join(out)


def parse_create(diff: str, path: str) -> str:
    """The text of a ``create_file`` diff (envelope tolerated)."""
    lines = split_diff(diff)
    raw = diff.split("\n")[:-1] if diff.endswith("\n") else diff.split("\n")
    # A diff written entirely in CRLF asks for a CRLF file; anything else gets LF.
    eol = "\r\n" if raw and all(line.endswith("\r") for line in raw) else "\n"
    body, first = _unwrap_envelope(lines, path, ADD_FILE)
    return parse_create_lines(body, first_line=first, eol=eol)


def from_api(kind: str, path: str, diff: str | None) -> FileOp:
    """A :class:`FileOp` from one API operation (``operation.type/path/diff``)."""
    if kind == "create_file":
        return FileOp("create_file", path, content=parse_create(diff or "", path))
    if kind == "update_file":
        return FileOp("update_file", path, hunks=parse_update(diff or "", path))
    if kind == "delete_file":
        return FileOp("delete_file", path)
    raise PatchParseError(f"unknown operation type {kind!r}")


# --------------------------------------------------------------------------- text files


@dataclass
class _Text:
    lines: list[str]  # contents without line endings
    endings: list[str]  # "\n", "\r\n", or "" for a last line without a newline
    bom: bool
    eol: str  # ending for new lines: the file's first one, LF when it has none
    final_newline: bool


def decode_text(data: bytes, path: str) -> _Text:
    """Split file bytes into lines; BinaryFile for NUL bytes or invalid UTF-8."""
    if b"\0" in data:
        raise BinaryFile(f"{path} contains NUL bytes; only UTF-8 text files can be patched")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BinaryFile(
            f"{path} is not valid UTF-8 (byte {exc.start}); only UTF-8 text files can be patched"
        ) from None
    bom = text.startswith(_BOM)
    if bom:
        text = text[1:]
    parts = text.split("\n")
    last = parts.pop()  # "" when the text ends with a newline (or is empty)
    lines: list[str] = []
    endings: list[str] = []
    for part in parts:
        if part.endswith("\r"):
            lines.append(part[:-1])
            endings.append("\r\n")
        else:
            lines.append(part)
            endings.append("\n")
    if last:
        lines.append(last)
        endings.append("")
    eol = endings[0] if endings and endings[0] else "\n"
    # An empty file counts as newline-terminated so that lines added to it end properly.
    return _Text(lines, endings, bom, eol, final_newline=not last)


# --------------------------------------------------------------------------- matching

_PUNCT = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000", " "
        ),
    }
)


def _fold(s: str) -> str:
    return s.translate(_PUNCT).strip()


_TIERS: tuple[Callable[[str], str], ...] = (str, str.rstrip, str.strip, _fold)


class _Matcher:
    """Finds blocks of lines in a file, lazily building one normalized view per tier.

    Searches scan a view with ``list.index`` from where they start: cheapest when the match is
    near, and no view is built for a tier no search has needed.
    """

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self._views: dict[int, list[str]] = {0: lines}

    def view(self, tier: int) -> list[str]:
        if tier not in self._views:
            self._views[tier] = [_TIERS[tier](line) for line in self.lines]
        return self._views[tier]

    def _starts(self, tier: int, want: str, start: int, last: int) -> Iterator[int]:
        """Positions in [start, last] where the tier's view holds ``want``, ascending."""
        hay, i = self.view(tier), start
        while i <= last:
            try:
                i = hay.index(want, i, last + 1)
            except ValueError:
                return
            yield i
            i += 1

    def at(self, pattern: Sequence[str], pos: int) -> bool:
        """Does the block match at ``pos`` in any tier?"""
        if pos < 0 or pos + len(pattern) > len(self.lines):
            return False
        for tier, norm in enumerate(_TIERS):
            hay = self.view(tier)
            if all(hay[pos + k] == norm(p) for k, p in enumerate(pattern)):
                return True
        return False

    def _matches(
        self, pattern: Sequence[str], start: int, stop: int | None, tier: int, limit: int
    ) -> list[int]:
        """Up to ``limit`` positions in [start, stop) where the block matches in one tier."""
        m = len(pattern)
        last = len(self.lines) - m if stop is None else min(len(self.lines) - m, stop - 1)
        hay = self.view(tier)
        pat = [_TIERS[tier](p) for p in pattern]
        found: list[int] = []
        i = start
        while i <= last and len(found) < limit:
            try:
                i = hay.index(pat[0], i, last + 1)
            except ValueError:
                break
            if m == 1 or hay[i : i + m] == pat:
                found.append(i)
            i += 1
        return found

    def seek(
        self, pattern: Sequence[str], start: int, *, eof: bool = False, stop: int | None = None
    ) -> int | None:
        """The first match starting in [start, stop), in the best tier that has one."""
        n, m = len(self.lines), len(pattern)
        if m == 0:
            return n if eof else min(start, n)
        if eof:
            pos = n - m
            return pos if pos >= start and self.at(pattern, pos) else None
        found = self.find(pattern, start, 1, stop)
        return found[0] if found else None

    def find(
        self, pattern: Sequence[str], start: int, limit: int, stop: int | None = None
    ) -> list[int]:
        """Up to ``limit`` matches starting in [start, stop), all in the best tier that has one."""
        for tier in range(len(_TIERS)):
            found = self._matches(pattern, start, stop, tier, limit)
            if found:
                return found
        return []

    def around(self, line: str, cursor: int, bound: int | None) -> tuple[int | None, int | None]:
        """(first match at or after ``cursor``, last match in [bound, cursor)) of one line, in
        the best tier that has either; ``bound`` None looks ahead only."""
        for tier, norm in enumerate(_TIERS):
            want = norm(line)
            ahead = next(self._starts(tier, want, cursor, len(self.lines) - 1), None)
            behind = None
            if bound is not None:
                passed = deque(self._starts(tier, want, bound, cursor - 1), maxlen=1)  # the last
                behind = passed[0] if passed else None
            if ahead is not None or behind is not None:
                return ahead, behind
        return None, None


# --------------------------------------------------------------------------- messages


def _excerpt(lines: Sequence[str], start: int, stop: int, marks: set[int]) -> list[str]:
    start, stop = max(start, 0), min(stop, len(lines))
    width = len(str(stop))
    return [
        f"  {'>' if i in marks else ' '} {i + 1:>{width}} | {lines[i]}" for i in range(start, stop)
    ]


def _closest_block(m: _Matcher, pattern: Sequence[str], cursor: int) -> tuple[int, int] | None:
    """(start, score) of the window sharing most lines with ``pattern`` (trimmed comparison)."""
    hay = m.view(2)
    pat = [p.strip() for p in pattern]
    where: dict[str, list[int]] = {}
    for i, line in enumerate(hay):
        where.setdefault(line, []).append(i)
    candidates: set[int] = set()
    for k, p in enumerate(pat):
        if p:  # blank lines match everywhere and say nothing about location
            candidates.update(i - k for i in where.get(p, ()))
    best: tuple[int, int] | None = None
    best_key: tuple[int, int, int] | None = None
    for start in candidates:
        if start < 0 or start + len(pat) > len(hay):
            continue
        score = sum(1 for k, p in enumerate(pat) if hay[start + k] == p)
        key = (score, start >= cursor, -abs(start - cursor))
        if best_key is None or key > best_key:
            best, best_key = (start, score), key
    return best


def _span(start: int, stop: int) -> str:
    return f"line {start + 1}" if stop - start == 1 else f"lines {start + 1}-{stop}"


def _hunk_label(hunk: Hunk, total: int) -> str:
    return f"hunk {hunk.number} of {total} (diff line {hunk.diff_line})"


def _miss_message(
    path: str, hunk: Hunk, total: int, m: _Matcher, pattern: Sequence[str], cursor: int
) -> str:
    label = _hunk_label(hunk, total)
    where = "at the end" if hunk.eof else f"at or after line {cursor + 1}"
    out = [f"{label}: the expected lines were not found {where} of {path}:"]
    out += [f"    |{line}" for line in pattern]
    closest = _closest_block(m, pattern, cursor)
    if closest is None:
        n = len(m.lines)
        out.append(f"None of these lines occurs in {path} ({n} line{'s' if n != 1 else ''}).")
    else:
        start, score = closest
        stop = start + len(pattern)
        if score == len(pattern) and hunk.eof:
            out.append(
                f"They occur at {_span(start, stop)}, but '*** End of File' requires them "
                f"to be the last lines of the file (it has {len(m.lines)} lines)."
            )
        elif score == len(pattern) and start < cursor:
            out.append(
                f"They occur at {_span(start, stop)}, before line {cursor + 1} where this "
                "hunk may start: hunks must come in file order, after the previous hunk and "
                "the hunk's '@@' anchor, and must not overlap."
            )
        else:
            diffs = [
                k for k, p in enumerate(pattern) if m.lines[start + k].strip() != p.strip()
            ]
            out.append(
                f"Closest region: {_span(start, stop)} ({score} of {len(pattern)} lines match):"
            )
            out += _excerpt(m.lines, start - 1, stop + 1, {start + k for k in diffs})
            for k in diffs[:3]:
                out.append(
                    f"  line {start + k + 1}: the file has {m.lines[start + k]!r} "
                    f"where the hunk expects {pattern[k]!r}"
                )
            if len(diffs) > 3:
                out.append(f"  … and {len(diffs) - 3} more differing lines")
    out.append("Re-read the file and resend the hunk with context and '-' lines copied from it.")
    return "\n".join(out)


def _anchor_message(
    path: str, hunk: Hunk, total: int, m: _Matcher, anchor: str, cursor: int, bound: int
) -> str:
    """An anchor not found. ``bound``: the earliest line it may be at (above it: going back)."""
    label = _hunk_label(hunk, total)
    out = [
        f"{label}: the anchor '@@ {anchor}' was not found at or after line {cursor + 1} "
        f"of {path}."
    ]
    earlier = m.seek([anchor], 0)
    if earlier is not None and earlier < bound:
        out.append(
            f"It occurs at line {earlier + 1}, above line {bound + 1} where an earlier hunk's "
            "'@@' lines led: hunks must come in file order, and an '@@' line may repeat an "
            "earlier hunk's but not go back further."
        )
    elif earlier is not None and earlier < cursor:
        out.append(
            f"It occurs at line {earlier + 1}, above the '@@' line before it: stacked '@@' "
            "lines narrow down, each one after the one above it."
        )
    else:
        close = difflib.get_close_matches(anchor.strip(), m.view(2), n=1, cutoff=0.6)
        if close:
            i = m.view(2).index(close[0])
            out.append(f"Closest line: {i + 1} | {m.lines[i]}")
    out.append("Use a line copied exactly from the file, or a bare '@@'.")
    return "\n".join(out)


def _numbers(positions: Sequence[int]) -> str:
    """1-based line numbers for a message: "4", "4 and 9", "4, 9 and 12"."""
    names = [str(p + 1) for p in positions]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


_TELL_APART = "Add context lines (or an '@@' line) that occur only where the change goes."


# --------------------------------------------------------------------------- applying


class _Reading(NamedTuple):  # (a tuple: one is made for every hunk, and cheaply)
    """One reading of a hunk's ``@@`` lines: where they leave the cursor, and how."""

    cursor: int  # the hunk's old block is searched from here
    first: int | None = None  # the line its first anchor located: the next hunk's scope
    line: int | None = None  # the line its last anchor located
    passed: str | None = None  # its last anchor, when that one was already passed (see _readings)
    until: int | None = None  # then: that anchor's next occurrence, which the block must precede
    # (anchor, earlier line, next line) of an anchor both passed and further down, for messages
    fork: tuple[str, int, int] | None = None
    moved: bool = False  # an anchor moved the cursor: the stack's next ones must come after it


def _readings(
    path: str, hunk: Hunk, total: int, m: _Matcher, cursor: int, scope: int
) -> list[_Reading]:
    """Every reading of the hunk's anchors, the one that moves the cursor at each step first.

    An anchor found at or after the cursor moves the cursor past it. An anchor that occurs
    before the cursor was already passed: models repeat a function's anchor for every hunk in
    it. Read that way it keeps the cursor; the hunk's last anchor may only be passed at or after
    ``scope`` (where the previous anchored hunk's first anchor led: further back would be going
    back in the file), an earlier one of its stack anywhere (``@@ class A:`` then ``@@ def g():``
    after a hunk in A.f). An anchor can be read both ways when it occurs on either side.
    """
    readings = [_Reading(cursor)]
    for i, anchor in enumerate(hunk.anchors):
        bound = scope if i == len(hunk.anchors) - 1 else 0
        following: list[_Reading] = []
        for r in readings:
            # The best tier that matches on either side decides: exact beats fuzzy.
            pos, earlier = m.around(anchor, r.cursor, None if r.moved else bound)
            if pos is not None:
                first = pos if r.first is None else r.first
                following.append(_Reading(pos + 1, first, pos, fork=r.fork, moved=True))
            if earlier is not None:
                first = earlier if r.first is None else r.first
                fork = r.fork or ((anchor, earlier, pos) if pos is not None else None)
                following.append(_Reading(r.cursor, first, earlier, anchor, pos, fork))
        if not following:
            r = readings[0]
            where = 0 if r.moved else scope  # after a stacked move, "above" is the stack's fault
            raise ContextNotFound(_anchor_message(path, hunk, total, m, anchor, r.cursor, where))
        readings = following
    return readings


_Lines = tuple[tuple[LineKind, str], ...]


def _places(hunk: Hunk, m: _Matcher, r: _Reading) -> list[tuple[int, _Lines]]:
    """Where the hunk's old block may start under one reading, with the hunk lines matched."""
    body = hunk.lines
    old = [text for kind, text in body if kind != "+"]
    cursor = r.cursor
    if r.passed is not None and not hunk.eof:
        # The anchor says nothing new: the block goes where its lines are, which must be
        # unambiguous; a pure insertion must directly follow the anchor.
        if not old:
            return [(cursor, body)] if r.line is not None and cursor == r.line + 1 else []
        for drop in range(hunk.optional_tail + 1):
            lines = body[: len(body) - drop] if drop else body
            block = [text for kind, text in lines if kind != "+"]
            found = m.find(block, cursor, limit=3, stop=r.until)
            if found:
                return [(pos, lines) for pos in found]
        return []
    if hunk.hint is not None and hunk.hint >= cursor:
        if not old:
            return [(min(hunk.hint, len(m.lines)), body)]
        if m.at(old, hunk.hint):
            return [(hunk.hint, body)]
    # Try the block as written, then without its optional trailing blank lines.
    tails = range(hunk.optional_tail + 1) if old else range(1)
    for drop in tails:
        lines = body[: len(body) - drop] if drop else body
        block = [text for kind, text in lines if kind != "+"]
        pos = m.seek(block, cursor, eof=hunk.eof)
        if pos is not None:
            return [(pos, lines)]
    return []


def _ambiguous(hunk: Hunk, total: int, readings: list[_Reading], places: list[int]) -> str:
    label = _hunk_label(hunk, total)
    fork = next((r.fork for r in readings if r.fork is not None), None)
    if fork is not None:
        anchor, earlier, later = fork
        return (
            f"{label}: '@@ {anchor}' was already passed (line {earlier + 1}) and occurs again "
            f"at line {later + 1}; the hunk's lines occur in both blocks (lines "
            f"{_numbers(places)}), so which one is meant cannot be told. {_TELL_APART}"
        )
    r = next(r for r in readings if r.passed is not None)
    return (
        f"{label}: '@@ {r.passed}' (line {(r.line or 0) + 1}) was already passed, so this "
        f"hunk is placed by its own lines, and they occur more than once at or after line "
        f"{r.cursor + 1}: at lines {_numbers(places)}. {_TELL_APART}"
    )


def _locate(
    path: str, hunk: Hunk, total: int, m: _Matcher, cursor: int, scope: int
) -> tuple[int, _Lines, int]:
    """Where the hunk's old block starts, the hunk lines that matched there, the next scope.

    Every reading of the anchors proposes places; exactly one distinct place must remain.
    """
    readings = _readings(path, hunk, total, m, cursor, scope)
    found: dict[int, tuple[_Lines, _Reading]] = {}
    for r in readings:
        for pos, lines in _places(hunk, m, r):
            found.setdefault(pos, (lines, r))
    if len(found) > 1:
        raise ContextNotFound(_ambiguous(hunk, total, readings, sorted(found)))
    if found:
        ((pos, (lines, r)),) = found.items()
        return pos, lines, scope if r.first is None else r.first
    r = readings[0]
    old = [text for kind, text in hunk.lines if kind != "+"]
    if not old and r.passed is not None:
        raise ContextNotFound(
            f"{_hunk_label(hunk, total)}: a hunk of only '+' lines goes right after its '@@' "
            f"line, but '@@ {r.passed}' (line {(r.line or 0) + 1}) was already passed by an "
            f"earlier hunk, which ends at line {r.cursor}. Add a context line to show where "
            "the new lines go."
        )
    raise ContextNotFound(_miss_message(path, hunk, total, m, old, r.cursor))


def _own_endings(
    hunk: Hunk, lines: Sequence[tuple[LineKind, str]], text: _Text, start: int
) -> tuple[str | None, ...]:
    """The diff's own line endings for the hunk located at ``start``, or () to use the file's.

    A unified diff's endings are kept (``git apply`` writes added lines byte for byte) as long
    as its old lines spell the same endings as the file has there: a diff that disagrees
    (an LF diff on a CRLF file, which git would refuse) evidently lost them in transport.
    """
    j = start
    # ``lines`` may lack the hunk's optional tail; V4A hunks have no endings at all.
    for (kind, _), eol in zip(lines, hunk.eols, strict=False):
        if kind != "+":
            if eol is not None and eol != text.endings[j]:
                return ()
            j += 1
    return hunk.eols


def apply_hunks(
    data: bytes, hunks: Sequence[Hunk], path: str, *, final_newline: bool | None = None
) -> Applied:
    """Apply ``hunks`` to a file's bytes. Raises BinaryFile or ContextNotFound."""
    text = decode_text(data, path)
    m = _Matcher(text.lines)
    # (content, ending); ending None = "the file's style", decided once the layout is known.
    out: list[tuple[str, str | None]] = []
    cursor = 0  # everything before it is settled: copied or replaced
    scope = 0  # where the last anchored hunk's first anchor led: see _readings
    added = removed = 0

    def copy(start: int, stop: int) -> None:
        out.extend((text.lines[i], text.endings[i] or None) for i in range(start, stop))

    for hunk in hunks:
        start, lines, scope = _locate(path, hunk, len(hunks), m, cursor, scope)
        copy(cursor, start)
        own = _own_endings(hunk, lines, text, start)
        j = start
        for k, (kind, content) in enumerate(lines):
            if kind == " ":
                out.append((text.lines[j], text.endings[j] or None))  # the file's bytes
                j += 1
            elif kind == "-":
                j += 1
                removed += 1
            else:
                out.append((content, (own[k] or None) if own else None))
                added += 1
        cursor = j
    copy(cursor, len(text.lines))

    keep_final = text.final_newline if final_newline is None else final_newline
    pieces: list[str] = [_BOM] if text.bom else []
    last = len(out) - 1
    for i, (content, ending) in enumerate(out):
        pieces.append(content)
        if i < last or keep_final:
            pieces.append(ending or text.eol)
    return Applied("".join(pieces).encode("utf-8"), added, removed)

