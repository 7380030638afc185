"""Text that reaches a person's terminal shows what it says and does nothing else.

Model output, command lines and their output, page titles and file names can carry control
sequences: OSC 52 writes the terminal's clipboard, OSC 8 dresses a link as other text, OSC 0
retitles the window, CSI 2J clears the screen, a carriage return overwrites what was printed,
and a bidirectional override makes text read differently from what it is. :func:`visible` turns
every such character into a visible escape (``\\x1b``, ``\\u202e``) so the person sees it and the
terminal ignores it — on a TTY and when piped alike. Logs keep the raw text (JSON escapes it).
"""

from __future__ import annotations

__all__ = ["short_image", "visible"]

# Bidirectional controls (embeddings, overrides, isolates, marks).
_BIDI = (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _table(keep: str) -> dict[int, str]:
    table = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}
    table.update({c: f"\\u{c:04x}" for c in _BIDI})
    table.update({ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"})
    for ch in keep:
        table.pop(ord(ch))
    return table


_MULTI_LINE = _table("\n\t")
_ONE_LINE = _table("")


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character shown instead of acted on. Newlines and tabs stay
    unless ``one_line`` (a progress line must stay one line)."""
    return text.translate(_ONE_LINE if one_line else _MULTI_LINE)


def short_image(ref: str) -> str:
    """An image as a person reads it: a content id (``sha256:…``) cut to its first 12 hex
    digits, as ``docker images`` shows it; a name (``repo:tag``) whole, since a cut name can
    name another image."""
    return ref[:19] if ref.startswith("sha256:") else ref
