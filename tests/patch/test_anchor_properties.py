"""Anchors the way models write them: repeated per hunk, stacked, enclosing (generated cases)."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, event, given, settings

from sandbox.patch import v4a
from sandbox.patch.apply import apply_operations
from sandloop.errors import ContextNotFound
from tests.patch.anchor_cases import Case, cases
from tests.patch.conftest import allow_all
from tests.patch.doubles import InMemorySessionDouble


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(unique=True))
def test_unique_lines_apply_exactly_however_the_hunks_are_anchored(case: Case) -> None:
    # With no line occurring twice, every placement is unambiguous: each hunk must land where
    # it was written for, repeated and stacked anchors included.
    for style in case.anchors:
        event(style)
    out = v4a.apply_hunks(case.text.encode(), v4a.parse_update(case.diff, "f.py"), "f.py")
    assert out.content.decode() == case.expected_text, case.diff


REASONS = [
    ("occur more than once", "repeated anchor, lines not unique"),
    ("cannot be told", "repeated anchor that also occurs further down"),
    ("only '+' lines", "insertion after a passed anchor"),
    ("not go back further", "anchor further back than an earlier hunk's"),
    ("expected lines were not found", "lines not found"),
    ("was not found", "anchor not found"),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(unique=False))
def test_repeated_lines_apply_or_fail_cleanly(case: Case) -> None:
    # Duplicated names and statements: a hunk may be ambiguous. It applies, or the whole
    # operation fails with ContextNotFound and writes nothing.
    session = InMemorySessionDouble({"f.py": case.text.encode()})
    op = v4a.from_api("update_file", "f.py", case.diff)
    try:
        asyncio.run(apply_operations(session, [op], allow=allow_all))
    except ContextNotFound as exc:
        event("refused: " + next((why for key, why in REASONS if key in str(exc)), "other"))
        assert session.commits == [] and session.files == {"f.py": case.text.encode()}
        return
    event("applied as written" if session.files["f.py"] == case.expected_text.encode() else "applied elsewhere")
