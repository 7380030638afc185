"""Unified diffs: git headers, renames, modes, quoted names and refusals."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.patch import unified
from sandbox.patch.apply import apply_operations
from sandloop.errors import PatchParseError
from tests.patch.conftest import allow_all
from tests.patch.doubles import InMemorySessionDouble


def test_git_rename_with_changes_and_mode() -> None:
    diff = (
        "diff --git a/old.sh b/new.sh\nold mode 100644\nnew mode 100755\n"
        "similarity index 80%\nrename from old.sh\nrename to new.sh\n"
        "--- a/old.sh\n+++ b/new.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo a\n+echo b\n"
    )
    (op,) = unified.parse(diff)
    assert (op.kind, op.path, op.move_to, op.mode) == ("update_file", "old.sh", "new.sh", 0o755)
    assert op.hunks[0].lines == ((" ", "#!/bin/sh"), ("-", "echo a"), ("+", "echo b"))
    assert op.hunks[0].hint == 0


def test_quoted_names_and_plain_diff_without_prefixes() -> None:
    diff = '--- "a/caf\\303\\251.txt"\n+++ "b/caf\\303\\251.txt"\n@@ -1 +1 @@\n-a\n+b\n'
    (op,) = unified.parse(diff)
    assert op.path == "café.txt" and op.move_to is None
    (plain,) = unified.parse("--- src/x.c\n+++ src/x.c\n@@ -3,0 +4 @@\n+int y;\n")
    assert plain.path == "src/x.c" and plain.hunks[0].hint == 3


def test_no_newline_markers() -> None:
    added = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n"
    (op,) = unified.parse(added)
    assert op.final_newline is True
    (new,) = unified.parse("--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n")
    assert new.kind == "create_file" and new.content == "x"


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        ("diff --git a/i.png b/i.png\nindex 1..2 100644\nBinary files a/i.png and b/i.png differ\n",
         "binary diffs"),
        ("just some text\n", "no file diffs found"),
        ("--- a/f\n+++ b/f\n@@ -1,3 +1,1 @@\n-a\n", "unified diff"),
    ],
)
def test_refusals(diff: str, message: str) -> None:
    with pytest.raises(PatchParseError, match=message):
        unified.parse(diff)


def _apply(files: dict[str, bytes], diff: str) -> dict[str, bytes]:
    session = InMemorySessionDouble(files)
    asyncio.run(apply_operations(session, unified.parse(diff), allow=allow_all))
    return session.files


@pytest.mark.parametrize(
    ("before", "diff", "after"),
    [
        # Whole-file conversions: the diff spells the new endings out.
        (b"a\nb\n", "@@ -1,2 +1,2 @@\n-a\n-b\n+a\r\n+b\r\n", b"a\r\nb\r\n"),
        (b"a\r\nb\r\n", "@@ -1,2 +1,2 @@\r\n-a\r\n-b\r\n+a\n+b\n", b"a\nb\n"),
        # One CRLF line added to an LF file, and one LF line to a CRLF file.
        (b"a\nb\n", "@@ -1,2 +1,3 @@\n a\n+x\r\n b\n", b"a\nx\r\nb\n"),
        (b"a\r\nb\r\n", "@@ -1,2 +1,3 @@\n a\r\n+x\n b\r\n", b"a\r\nx\nb\r\n"),
        # Without a final newline, a CR before the diff's own newline is part of the line.
        (b"a\n", "@@ -1 +1 @@\n-a\n+a\r\n\\ No newline at end of file\n", b"a\r"),
        (b"a\r", "@@ -1 +1 @@\n-a\r\n\\ No newline at end of file\n+a\r\n", b"a\r\n"),
        # Only the diff's last newline is its own: "x\r" + CRLF is a line ending in CR.
        (b"a\n", "@@ -1 +1,2 @@\n a\n+x\r\r\n", b"a\nx\r\r\n"),
    ],
)
def test_added_lines_keep_the_endings_the_diff_spells(before: bytes, diff: str, after: bytes) -> None:
    header = "--- a/f.txt\r\n+++ b/f.txt\r\n" if "@@\r\n" in diff else "--- a/f.txt\n+++ b/f.txt\n"
    assert _apply({"f.txt": before}, header + diff) == {"f.txt": after}


def test_a_diff_whose_old_lines_disagree_with_the_file_keeps_the_file_endings() -> None:
    # git would refuse this LF diff on a CRLF file; sandloop matches it (the text is the same)
    # and, since the diff's endings evidently are not the file's, new lines follow the file.
    diff = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n a\n+x\n b\n"
    assert _apply({"f.txt": b"a\r\nb\r\n"}, diff) == {"f.txt": b"a\r\nx\r\nb\r\n"}


def test_a_diff_saved_with_crlf_throughout_parses_its_headers() -> None:
    diff = (
        "diff --git a/new.txt b/new.txt\r\nnew file mode 100755\r\nindex 0000000..1111111\r\n"
        "--- /dev/null\r\n+++ b/new.txt\r\n@@ -0,0 +1,2 @@\r\n+a\r\n+b\r\n"
        "--- a/f.txt\r\n+++ b/f.txt\r\n@@ -1 +1 @@\r\n-x\r\n+y\r\n"
    )
    created, updated = unified.parse(diff)
    assert (created.kind, created.path, created.content, created.mode) == (
        "create_file", "new.txt", "a\r\nb\r\n", 0o755
    )
    assert (updated.kind, updated.path) == ("update_file", "f.txt")
    assert _apply({"f.txt": b"x\r\n"}, diff) == {"f.txt": b"y\r\n", "new.txt": b"a\r\nb\r\n"}


def test_created_file_keeps_a_cr_before_the_missing_final_newline() -> None:
    (op,) = unified.parse("--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+a\r\n+b\r\n\\ No newline at end of file\n")
    assert op.content == "a\r\nb\r"
