"""A multi-file patch in whichever format it is written: the envelope (``*** Begin Patch``) or
a unified diff (``--- a/x`` / ``+++ b/x``), told apart by their first lines."""

from __future__ import annotations

from typing import Literal

from sandbox.patch import envelope, unified, v4a

__all__ = ["Format", "parse"]

Format = Literal["auto", "envelope", "unified"]


def parse(text: str, fmt: Format = "auto") -> list[v4a.FileOp]:
    """The file operations of ``text``; ``auto`` reads a unified diff as one, anything else as
    an envelope (whose parser says what is wrong with a patch that is neither)."""
    if fmt == "auto":
        fmt = "unified" if not envelope.looks_like_envelope(text) and unified.looks_like_unified(text) else "envelope"
    return unified.parse(text) if fmt == "unified" else envelope.parse(text)
