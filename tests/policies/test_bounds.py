"""What is too big to follow is not followed: a line over 64 KiB, over 10 000 syntax nodes or
nested over 100 levels is UNKNOWN — asked about, or denied when no one can be asked — and a
line within the bounds is still decided command by command."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from policies import shell_parse
from policies.engine import load_policy
from sandloop.verdict import Decision

UNATTENDED = 'version = 1\nextends = ["default"]\nunattended = true\n'


def _nested(levels: int, inner: str = "rm -rf x") -> str:
    return "echo $(" * levels + inner + ")" * levels


@pytest.mark.parametrize(("line", "why"), [
    ("echo " + "w" * shell_parse.MAX_LINE_BYTES, "bytes"),
    ("echo " + "w " * (shell_parse.MAX_NODES + 10), "syntax nodes"),
    ("true && " * (shell_parse.MAX_NESTING + 5) + "ls", "levels deep"),
    (_nested(shell_parse.MAX_NESTING), "levels deep"),
], ids=["size", "nodes", "a long && chain", "substitutions"])
def test_past_a_bound_is_asked_or_denied_when_unattended(line: str, why: str,
                                                         write_policy: Callable[[str], Path]) -> None:
    (cmd,) = shell_parse.parse(line)
    assert cmd.unknown is not None and why in cmd.unknown
    verdict = load_policy("default").shell(line)
    assert verdict.decision is Decision.PROMPT and why in verdict.justification
    assert load_policy(write_policy(UNATTENDED)).shell(line).decision is Decision.DENY


def test_within_the_bounds_every_command_is_still_found() -> None:
    # 20 levels of substitutions, a line of 9 000 nodes, 60 KiB of heredoc: all followed
    deep = shell_parse.parse(_nested(20))
    assert [c.argv[:2] for c in deep if c.argv and c.argv[0] == "rm"] == [("rm", "-rf")]
    many = shell_parse.parse("ls; " * 2000 + "rm -rf x")
    assert len(many) == 2001 and many[-1].argv == ("rm", "-rf", "x") and not many[-1].unknown
    heredoc = shell_parse.parse("cat <<'EOF' > notes.txt\n" + "text\n" * 12_000 + "EOF")
    assert heredoc[0].argv == ("cat",) and not heredoc[0].unknown
    assert load_policy("default").shell(_nested(20)).rule_id == "rm"


def test_a_line_that_runs_out_of_stack_within_the_bounds_is_unknown_not_a_crash() -> None:
    # `sh -c` strings nest trees in trees; whatever still exhausts Python's stack is refused.
    line = _nested(30, "ls") + " # unique to this test"
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 100)  # a small stack: room for the parse to start, not finish
    try:
        (cmd,) = shell_parse.parse(line)
    finally:
        sys.setrecursionlimit(limit)
    assert cmd.unknown is not None and "nested too deeply" in cmd.unknown


def test_cd_that_may_fail_keeps_a_bounded_set_of_places() -> None:
    # Each `cd X;` may fail, so the shell may be in either place: the places double. Past
    # MAX_PLACES a write's file is unknown (asked about), as after popd.
    engine = load_policy("strict")
    few = "".join(f"cd d{i}; " for i in range(3)) + "echo x > f"
    (write,) = [c for c in shell_parse.parse(few) if c.writes and not c.argv]
    assert write.writes is not None and write.writes[0].cwds is not None
    assert len(write.writes[0].cwds) == 8
    many = "".join(f"cd d{i}; " for i in range(40)) + "echo x > f"
    (write,) = [c for c in shell_parse.parse(many) if c.writes and not c.argv]
    assert write.writes is not None and write.writes[0].cwds is None
    assert engine.shell(many).rule_id == "files.unknown_path"
