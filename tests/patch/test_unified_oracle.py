"""``git apply`` as the oracle for unified diffs: byte for byte, line endings included.

Files and edits are generated with LF, CRLF and mixed endings, stray CRs and missing final
newlines; the diff is made by ``git diff --no-index`` or by :mod:`difflib` (with the endings
kept), applied by git and by sandloop, and the two results must be the same bytes.
"""

from __future__ import annotations

import asyncio
import difflib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sandbox.patch import unified
from sandbox.patch.apply import apply_operations
from tests.patch.conftest import allow_all
from tests.patch.doubles import InMemorySessionDouble

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is the oracle")

HEADER = b"--- a/f.txt\n+++ b/f.txt\n"
CREATE_HEADER = b"--- /dev/null\n+++ b/f.txt\n"
# Git must not touch the bytes: no configured filters, no end-of-line conversion.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": "/nonexistent",
           "PATH": "/usr/bin:/bin:/usr/local/bin"}

CONTENT = st.text(alphabet="ab \t\ré", max_size=4)
ENDING = st.sampled_from(["\n", "\r\n"])
LINE = st.tuples(CONTENT, ENDING).map("".join)


@dataclass
class Edit:
    old: bytes | None  # None: the diff creates the file
    new: bytes


def _join(lines: list[str], final_newline: bool) -> bytes:
    text = "".join(lines)
    if lines and not final_newline:
        text = text[: -2 if text.endswith("\r\n") else -1]
    return text.encode("utf-8")


@st.composite
def edits(draw: st.DrawFn) -> Edit:
    old_lines = draw(st.lists(LINE, max_size=24))
    new_lines: list[str] = []
    for line in old_lines:
        action = draw(st.sampled_from(["keep", "keep", "keep", "drop", "flip", "replace"]))
        if action == "keep":
            new_lines.append(line)
        elif action == "flip":  # the same text with the other ending
            body = line[:-2] if line.endswith("\r\n") else line[:-1]
            new_lines.append(body + ("\n" if line.endswith("\r\n") else "\r\n"))
        elif action == "replace":
            new_lines.append(draw(LINE))
        if draw(st.integers(0, 4)) == 0:
            new_lines.extend(draw(st.lists(LINE, min_size=1, max_size=3)))
    old_final, new_final = draw(st.booleans()), draw(st.booleans())
    creates = not old_lines and draw(st.booleans())
    return Edit(None if creates else _join(old_lines, old_final), _join(new_lines, new_final))


def _split(data: bytes) -> list[bytes]:
    """Lines split at LF only, each keeping its ending (bytes.splitlines would split at CR)."""
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def git_diff(work: Path, edit: Edit, context: int) -> bytes:
    (work / "old").write_bytes(edit.old or b"")
    (work / "new").write_bytes(edit.new)
    old = "/dev/null" if edit.old is None else "old"
    out = subprocess.run(
        [GIT or "git", "diff", "--no-index", "--text", "--no-color", f"-U{context}", old, "new"],
        cwd=work, capture_output=True, env=GIT_ENV, check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    body = out.stdout[out.stdout.find(b"\n@@") + 1 :] if b"\n@@" in out.stdout else b""
    return (CREATE_HEADER if edit.old is None else HEADER) + body if body else b""


def difflib_diff(edit: Edit, context: int) -> bytes:
    lines = difflib.diff_bytes(
        difflib.unified_diff, _split(edit.old or b""), _split(edit.new),
        b"/dev/null" if edit.old is None else b"a/f.txt", b"b/f.txt", n=context,
    )
    # difflib leaves a last line without its newline as it is; diffs mark it instead.
    return b"".join(
        line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n"
        for line in lines
    )


def git_apply(work: Path, edit: Edit, diff: bytes, context: int) -> bytes | None:
    target = work / "apply"
    target.mkdir()
    if edit.old is not None:
        (target / "f.txt").write_bytes(edit.old)
    (work / "p.diff").write_bytes(diff)
    out = subprocess.run(
        # Without context git wants to be told that such hunks are meant.
        [GIT or "git", "apply", "--whitespace=nowarn", *(["--unidiff-zero"] if not context else []),
         str(work / "p.diff")],
        cwd=target, capture_output=True, env=GIT_ENV, check=False,
    )
    assert out.returncode == 0, out.stderr  # the diffs are exact: git must apply them
    return (target / "f.txt").read_bytes() if (target / "f.txt").exists() else None


def sandloop_apply(edit: Edit, diff: bytes) -> bytes | None:
    session = InMemorySessionDouble({} if edit.old is None else {"f.txt": edit.old})
    asyncio.run(apply_operations(session, unified.parse(diff.decode("utf-8")), allow=allow_all))
    return session.files.get("f.txt")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits(), st.sampled_from(["git", "difflib"]), st.sampled_from([3, 1, 0]))
def test_sandloop_applies_unified_diffs_byte_for_byte_like_git(
    edit: Edit, maker: str, context: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        diff = git_diff(work, edit, context) if maker == "git" else difflib_diff(edit, context)
        if not diff:
            return  # nothing changed: no diff to apply
        expected = git_apply(work, edit, diff, context)
    # git's own diff does not always round-trip through git without context (a changed last
    # line next to a missing final newline); such a case says nothing about sandloop.
    assume(context > 0 or expected == edit.new)
    assert expected == edit.new  # the oracle reproduces the edit
    assert sandloop_apply(edit, diff) == expected, diff


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits())
def test_the_dry_run_preview_is_a_diff_git_applies_to_the_same_bytes(edit: Edit) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        diff = difflib_diff(edit, 3)
        if not diff:
            return
        session = InMemorySessionDouble({} if edit.old is None else {"f.txt": edit.old})
        ops = unified.parse(diff.decode("utf-8"))
        result = asyncio.run(apply_operations(session, ops, allow=allow_all, dry_run=True))
        assert session.commits == []
        preview = result.preview.encode("utf-8")
        assert git_apply(work, edit, preview, 3) == edit.new, preview
