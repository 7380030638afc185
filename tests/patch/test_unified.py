"""Unified diffs: git headers, renames, modes, quoted names and refusals."""

from __future__ import annotations

import pytest

from sandbox.patch import unified
from sandloop.errors import PatchParseError


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
