"""Parser and applier details the fixture scenarios do not pin down."""

from __future__ import annotations

import re

import pytest

from sandbox.patch import v4a
from sandloop.errors import BinaryFile, ContextNotFound, PatchParseError


def apply(text: str, diff: str) -> str:
    return v4a.apply_hunks(text.encode(), v4a.parse_update(diff, "f"), "f").content.decode()


def test_hunks_keep_their_numbers_lines_and_anchors() -> None:
    hunks = v4a.parse_update("@@ class A\n@@\n@@   def f():\n a\n-b\n+c\n@@\n+d\n*** End of File\n", "f")
    assert [(h.number, h.diff_line, h.anchors, h.eof) for h in hunks] == [
        (1, 1, ("class A", "  def f():"), False),
        (2, 7, (), True),
    ]
    assert hunks[0].lines == ((" ", "a"), ("-", "b"), ("+", "c"))
    assert (hunks[0].added, hunks[0].removed) == (1, 1)


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        ("", "has no hunks"),
        ("@@\n", "has an '@@' line but no"),
        ("@@ a\n-a\n@@ b\n", "hunk 2 (diff line 3) has an '@@' line but no"),
        ("@@x\n-a\n", "not a valid hunk header"),
        ("*** End of File\n", "must end a hunk's lines"),
        ("@@\n-a\n*** End of File\n-b\n", "only an '@@' line may follow"),
        ("@@\n-a\n*** Add File: b\n", "exactly one file"),
        ("@@\n-a\n*** Something\n", "the only '***' line allowed"),
        ("*** Begin Patch\n*** Update File: f\n@@\n-a\n", "does not end with '*** End Patch'"),
        ("*** Begin Patch\n*** Add File: f\n+a\n*** End Patch\n", "expects '*** Update File: f'"),
        # Padded markers fail like plain ones.
        ("@@\n-a\n  *** Add File: b\n", "exactly one file"),
        ("@@\n-a\n\t*** Update File: b\n", "exactly one file"),
        ("@@\n-a\n *** Move to: b\n", "'*** Move to:' is not supported here"),
        ("@@\n-a\n  *** Begin Patch\n", "may only open/close an envelope"),
        ("  *** End of File\n", "must end a hunk's lines"),
    ],
)
def test_parse_errors(diff: str, message: str) -> None:
    with pytest.raises(PatchParseError, match=re.escape(message)):
        v4a.parse_update(diff, "f")


def test_envelope_path_is_compared_normalized() -> None:
    diff = "*** Begin Patch\n*** Update File: ./src//a.py\n@@\n-x\n+y\n*** End Patch\n"
    assert len(v4a.parse_update(diff, "src/a.py")) == 1


def test_unknown_operation_type() -> None:
    with pytest.raises(PatchParseError, match="unknown operation type 'move_file'"):
        v4a.from_api("move_file", "a", "")


MAIN = "def main():\n    a = 1\n    b = 2\n    c = 3\n"


def test_a_repeated_anchor_stays_in_the_block_it_located() -> None:
    # Each hunk names its function again; the second one is already inside it.
    diff = "@@ def main():\n-    a = 1\n+    a = 10\n@@ def main():\n-    b = 2\n+    b = 20\n"
    assert apply(MAIN, diff) == "def main():\n    a = 10\n    b = 20\n    c = 3\n"
    three = diff + "@@ def main():\n     b = 2\n-    c = 3\n+    c = 30\n"
    with pytest.raises(ContextNotFound):  # b = 2 was consumed by hunk 2: not found again
        apply(MAIN, three)
    three = diff + "@@ def main():\n-    c = 3\n+    c = 30\n"
    assert apply(MAIN, three) == "def main():\n    a = 10\n    b = 20\n    c = 30\n"


CLASSES = (
    "class A:\n    def f(self):\n        x = 1\n        y = 2\n    def g(self):\n        z = 3\n"
    "class B:\n    def f(self):\n        x = 1\n        w = 4\n"
)


IN_A_F = "@@ class A:\n@@     def f(self):\n-        x = 1\n+        x = 10\n"


@pytest.mark.parametrize(
    ("second", "old", "new"),
    [
        # The whole stack again.
        ("@@ class A:\n@@     def f(self):\n-        y = 2\n+        y = 20\n", "y = 2", "y = 20"),
        # The class again, then a method further down: the passed anchor keeps the cursor.
        ("@@ class A:\n@@     def g(self):\n-        z = 3\n+        z = 30\n", "z = 3", "z = 30"),
        # The method again while B.f follows: y = 2 is only in A.f, so the hunk stays there.
        ("@@     def f(self):\n-        y = 2\n+        y = 20\n", "y = 2", "y = 20"),
        # w = 4 is only in B.f: the anchor's next occurrence is the one meant.
        ("@@     def f(self):\n-        w = 4\n+        w = 40\n", "w = 4", "w = 40"),
    ],
)
def test_a_second_hunk_after_one_in_a_method(second: str, old: str, new: str) -> None:
    expected = CLASSES.replace("x = 1", "x = 10", 1).replace(old, new, 1)
    assert apply(CLASSES, IN_A_F + second) == expected


def test_an_anchor_on_a_line_the_previous_hunk_consumed() -> None:
    diff = "@@\n def main():\n-    a = 1\n+    a = 10\n@@     a = 1\n-    c = 3\n+    c = 30\n"
    assert apply(MAIN, diff) == "def main():\n    a = 10\n    b = 2\n    c = 30\n"


def test_pure_insertion_after_a_repeated_anchor() -> None:
    ins = "@@ def main():\n+    first = 0\n@@ def main():\n+    second = 0\n"
    assert apply(MAIN, ins) == "def main():\n    first = 0\n    second = 0\n    a = 1\n    b = 2\n    c = 3\n"


@pytest.mark.parametrize(
    ("text", "diff", "needles"),
    [
        pytest.param(
            "def main():\n    a = 1\n    x = 0\n    x = 0\n",
            "@@ def main():\n-    a = 1\n+    a = 10\n@@ def main():\n-    x = 0\n+    x = 9\n",
            ["hunk 2 of 2 (diff line 4)", "'@@ def main():' (line 1) was already passed",
             "occur more than once at or after line 3: at lines 3 and 4"],
            id="passed anchor, lines twice after the cursor",
        ),
        pytest.param(
            CLASSES.replace("w = 4", "y = 2"),
            IN_A_F + "@@     def f(self):\n-        y = 2\n+        y = 20\n",
            ["'@@     def f(self):' was already passed (line 2) and occurs again at line 8",
             "lines 4 and 10"],
            id="passed anchor also further down, lines in both blocks",
        ),
        pytest.param(
            "def f():\n    a = 1\ndef g():\n    a = 1\n    b = 2\n",
            "@@ def g():\n-    a = 1\n+    a = 10\n@@ def f():\n-    b = 2\n+    b = 20\n",
            ["the anchor '@@ def f():' was not found at or after line 5",
             "It occurs at line 1, above line 3 where an earlier hunk's '@@' lines led"],
            id="going back above an earlier hunk's anchor",
        ),
        pytest.param(
            MAIN,
            "@@ def main():\n-    a = 1\n+    a = 10\n@@ def main():\n+    second = 0\n",
            ["a hunk of only '+' lines goes right after its '@@' line",
             "'@@ def main():' (line 1) was already passed"],
            id="pure insertion not right after a passed anchor",
        ),
        pytest.param(
            MAIN,
            "@@ def main():\n-    a = 1\n+    a = 10\n@@ c = 3\n@@ def main():\n-    b = 2\n+    b = 20\n",
            ["'@@ def main():' was not found at or after line 5",
             "It occurs at line 1, above the '@@' line before it"],
            id="stacked anchor above the one before it",
        ),
    ],
)
def test_anchor_refusals_say_why(text: str, diff: str, needles: list[str]) -> None:
    with pytest.raises(ContextNotFound) as info:
        apply(text, diff)
    for needle in needles:
        assert needle in str(info.value)


def test_exact_match_later_beats_fuzzy_match_earlier() -> None:
    # Tiers go in order over the whole range: an exact match wins over an earlier fuzzy one.
    assert apply("x  \ny\nx\ny\n", "@@\n x\n-y\n+z\n") == "x  \ny\nx\nz\n"


def test_trailing_blank_line_is_used_when_the_file_has_it() -> None:
    assert apply("a\n\nb\n", "@@\n-a\n+A\n\n") == "A\n\nb\n"
    assert apply("a\nb\n", "@@\n-a\n+A\n\n") == "A\nb\n"


def test_pure_insertion_after_previous_hunk_without_anchor() -> None:
    assert apply("a\nb\nc\n", "@@\n-a\n+A\n@@\n+after A\n") == "A\nafter A\nb\nc\n"


def test_mixed_endings_keep_each_line_and_new_lines_use_the_first() -> None:
    assert apply("a\r\nb\nc\n", "@@\n b\n+x\n c\n") == "a\r\nb\nx\r\nc\n"


def test_bom_with_crlf_and_no_final_newline() -> None:
    data = b"\xef\xbb\xbfa\r\nb"
    out = v4a.apply_hunks(data, v4a.parse_update("@@\n a\n-b\n+c\n+d\n", "f"), "f")
    assert out.content == b"\xef\xbb\xbfa\r\nc\r\nd"
    assert (out.added, out.removed) == (2, 1)


def test_binary_and_invalid_utf8_are_refused() -> None:
    with pytest.raises(BinaryFile, match="NUL"):
        v4a.decode_text(b"a\0b", "x.bin")
    with pytest.raises(BinaryFile, match="not valid UTF-8"):
        v4a.decode_text(b"\xff\xfe", "x.bin")


def test_no_line_in_common_is_said_plainly() -> None:
    with pytest.raises(ContextNotFound, match=r"None of these lines occurs in f \(2 lines\)"):
        apply("a\nb\n", "@@\n-q\n+r\n")


def test_closest_region_lists_at_most_three_differences() -> None:
    text = "".join(f"l{i}\n" for i in range(10))
    diff = "@@\n l1\n-X2\n-X3\n-X4\n-X5\n l6\n+new\n"
    with pytest.raises(ContextNotFound) as info:
        apply(text, diff)
    msg = str(info.value)
    assert "Closest region: lines 2-7 (2 of 6 lines match)" in msg
    assert "line 3: the file has 'l2' where the hunk expects 'X2'" in msg
    assert "… and 1 more differing lines" in msg


def test_create_file_rules() -> None:
    assert v4a.parse_create("", "f") == ""
    assert v4a.parse_create("+a\n+b", "f") == "a\nb\n"
    assert v4a.parse_create("*** Begin Patch\n*** Add File: f\n+x\n*** End Patch\n", "f") == "x\n"
    with pytest.raises(PatchParseError, match="does not start with"):
        v4a.parse_create("+a\n*** End of File\n", "f")
