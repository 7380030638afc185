"""Property tests: a generated V4A diff reproduces the edit; corrupted context never writes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.patch import v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import ContextNotFound
from tests.patch.conftest import allow_all
from tests.patch.doubles import InMemorySessionDouble

# Line text: spaces, tabs, unicode punctuation and non-ASCII, never a line break.
TEXT = st.text(alphabet=" \tab—“”é🙂-+@*x", max_size=12)


@dataclass
class Case:
    lines: list[str]
    eol: str
    bom: bool
    final_newline: bool
    new_lines: list[str]
    diff: str
    edited_context: bool  # whether some hunk has a context or '-' line to corrupt

    def encode(self, lines: list[str], eol: str) -> bytes:
        body = eol.join(lines) + (eol if lines and self.final_newline else "")
        return (b"\xef\xbb\xbf" if self.bom else b"") + body.encode("utf-8")

    @property
    def original(self) -> bytes:
        return self.encode(self.lines, self.eol)

    @property
    def expected(self) -> bytes:
        endings = len(self.lines) - (0 if self.final_newline else 1)
        # New lines take the file's first ending; a file without any ending gets LF.
        return self.encode(self.new_lines, self.eol if endings > 0 else "\n")


@st.composite
def cases(draw: st.DrawFn) -> Case:
    # Unique prefixes make every old block occur exactly once: the property is then exact.
    lines = [f"{i}:{t}" for i, t in enumerate(draw(st.lists(TEXT, max_size=80)))]
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    bom = draw(st.booleans())
    final_newline = draw(st.booleans()) or not lines
    n = len(lines)
    edits: list[tuple[int, int, list[str]]] = []
    start = draw(st.integers(0, 3))
    while start <= n and len(edits) < 6:
        delete = draw(st.integers(0, min(3, n - start)))
        insert = [f"new:{t}" for t in draw(st.lists(TEXT, min_size=0 if delete else 1, max_size=3))]
        edits.append((start, delete, insert))
        # The next edit starts far enough away that hunks (3 context lines each side) stay apart.
        start += delete + 7 + draw(st.integers(0, 8))
    if not edits:
        edits.append((0, 0, ["new:only"]))  # every case edits something
    new_lines = list(lines)
    for start, delete, insert in reversed(edits):
        new_lines[start : start + delete] = insert
    diff: list[str] = []
    cursor = 0
    edited_context = False
    for start, delete, insert in edits:
        before = draw(st.integers(0, min(3, start - cursor)))
        after = draw(st.integers(0, min(3, n - start - delete)))
        top = start - before
        if before == 0 and delete == 0 and after == 0 and start > 0:
            diff.append(f"@@ {lines[start - 1]}")  # a pure insertion goes right after its anchor
        elif draw(st.booleans()) and top - cursor >= 1:
            anchor = draw(st.integers(cursor, top - 1))
            diff.append(f"@@ {lines[anchor]}")
        else:
            diff.append("@@")
        diff += [f" {line}" for line in lines[top:start]]
        diff += [f"-{line}" for line in lines[start : start + delete]]
        diff += [f"+{line}" for line in insert]
        diff += [f" {line}" for line in lines[start + delete : start + delete + after]]
        edited_context |= before + delete + after > 0
        cursor = start + delete + after
    return Case(lines, eol, bom, final_newline, new_lines, "\n".join(diff) + "\n", edited_context)


def _apply(session: InMemorySessionDouble, diff: str) -> None:
    op = v4a.from_api("update_file", "f.txt", diff)
    asyncio.run(apply_operations(session, [op], allow=allow_all))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_generated_diff_reproduces_the_edit(case: Case) -> None:
    session = InMemorySessionDouble({"f.txt": case.original})
    _apply(session, case.diff)
    assert session.files["f.txt"] == case.expected
    assert len(session.commits) <= 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.data())
def test_corrupted_context_fails_and_writes_nothing(case: Case, data: st.DataObject) -> None:
    lines = case.diff.splitlines()
    targets = [i for i, line in enumerate(lines) if line[:1] in (" ", "-")]
    if not targets:
        return
    i = data.draw(st.sampled_from(targets))
    # A line no tier can match: the prefix "corrupt#" never occurs in generated files.
    lines[i] = lines[i][0] + "corrupt#" + lines[i][1:]
    session = InMemorySessionDouble({"f.txt": case.original})
    with pytest.raises(ContextNotFound) as info:
        _apply(session, "\n".join(lines) + "\n")
    assert session.commits == []
    assert session.files == {"f.txt": case.original}
    assert "hunk" in str(info.value) and "No file was changed" in str(info.value)
