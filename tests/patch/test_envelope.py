"""Envelope marker lines are recognized whatever whitespace surrounds them, everywhere."""

from __future__ import annotations

import re

import pytest

from sandbox.patch import envelope, v4a
from sandloop.errors import PatchParseError

PLAIN = """*** Begin Patch
*** Add File: new.txt
+hello
*** Delete File: gone.txt
*** Update File: src/a.py
*** Move to: src/b.py
@@ def f():
-    x = 1
+    x = 2
*** Update File: c.txt
@@
 last
+tail
*** End of File
*** End Patch
"""

MARKER = re.compile(r"^\*\*\* ", re.MULTILINE)


def padded(text: str, before: str, after: str = "") -> str:
    """``text`` with every marker line indented by ``before`` and followed by ``after``."""
    lines = text.split("\n")
    return "\n".join(f"{before}{line}{after}" if MARKER.match(line) else line for line in lines)


@pytest.mark.parametrize(
    ("before", "after"), [(" ", ""), ("  ", ""), ("\t", ""), (" \t ", ""), ("  ", " "), ("", "\t")]
)
def test_padded_markers_parse_like_plain_ones(before: str, after: str) -> None:
    assert envelope.parse(padded(PLAIN, before, after)) == envelope.parse(PLAIN)


@pytest.mark.parametrize(
    ("header", "body", "kind"),
    [
        ("Update File: b.txt", "@@\n-b\n+B\n", "update_file"),
        ("Add File: b.txt", "+b\n", "create_file"),
        ("Delete File: b.txt", "", "delete_file"),
    ],
)
def test_a_padded_header_after_a_hunk_starts_the_next_section(
    header: str, body: str, kind: str
) -> None:
    # After a hunk, " *** Update File: b.txt" could be read as a context line; it is a header,
    # as it would be without the padding.
    text = f"*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+A\n  *** {header}\n{body}*** End Patch\n"
    first, second = envelope.parse(text)
    assert first.hunks[0].lines == (("-", "a"), ("+", "A"))
    assert (second.kind, second.path) == (kind, "b.txt")


def test_padded_move_to_and_end_of_file() -> None:
    text = (
        "*** Begin Patch\n*** Update File: a.txt\n   *** Move to: b.txt\n@@\n x\n+y\n"
        "  *** End of File\n*** End Patch\n"
    )
    (op,) = envelope.parse(text)
    assert op.move_to == "b.txt"
    assert op.hunks[0].eof and op.hunks[0].lines == ((" ", "x"), ("+", "y"))


def test_api_diffs_accept_a_padded_envelope() -> None:
    update = "*** Begin Patch\n  *** Update File: f.txt\n@@\n-a\n+b\n  *** End of File\n *** End Patch\n"
    (hunk,) = v4a.parse_update(update, "f.txt")
    assert hunk.lines == (("-", "a"), ("+", "b")) and hunk.eof
    create = " *** Begin Patch\n\t*** Add File: f.txt\n+x\n*** End Patch \n"
    assert v4a.parse_create(create, "f.txt") == "x\n"


def test_padded_header_without_a_path_is_refused() -> None:
    with pytest.raises(PatchParseError, match="'\\*\\*\\* Delete File:' needs a path"):
        envelope.parse("*** Begin Patch\n  *** Delete File:  \n*** End Patch\n")
