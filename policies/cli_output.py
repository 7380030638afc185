"""What the policy commands print: verdicts as JSON and as plain lines.

Standard library and the shared vocabulary only: ``sandloop policy explain`` prints with this
and nothing heavier (rich is for the commands that print markup or tables).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sandloop.text import visible
from sandloop.verdict import Verdict

if TYPE_CHECKING:
    from policies.shell_words import SimpleCommand

__all__ = ["emit", "explained", "explained_lines", "json_line", "located", "summary_line", "verdict_data"]

#: Where a verdict with no file:line comes from: sandloop's own rule (a write outside the
#: workspace, a built-in default), not a line of any policy file.
BUILT_IN = "built-in"


def emit(data: Any) -> None:
    """One JSON document on stdout, indented for people."""
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def json_line(data: Any) -> str:
    """One JSON document on one line (JSON Lines: a record per input)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def verdict_data(v: Verdict) -> dict[str, str | None]:
    return {"decision": v.decision.value, "rule_id": v.rule_id, "source": v.source,
            "justification": v.justification}


def explained(subject: str, verdict: Verdict,
              commands: Sequence[tuple[SimpleCommand, Verdict]] = ()) -> dict[str, Any]:
    """``policy explain --json``: the input, its verdict, and each simple command's own."""
    return {"input": subject, "verdict": verdict_data(verdict),
            "commands": [{"command": cmd.text, "argv": [str(w) for w in cmd.argv],
                          "unknown": cmd.unknown, **verdict_data(v)} for cmd, v in commands]}


def located(v: Verdict) -> str:
    """Where the rule that decided ``v`` is written: ``file:line``, or ``built-in``."""
    return v.source or BUILT_IN


def summary_line(subject: str, verdict: Verdict) -> str:
    """The verdict on one input, on one line (control characters shown, never acted on)."""
    return visible(f"{subject!r} → {verdict.decision.value} by {verdict.rule_id or 'the default'} "
                   f"({located(verdict)}): {verdict.justification}")


def explained_lines(subject: str, verdict: Verdict,
                    commands: Sequence[tuple[SimpleCommand, Verdict]] = ()) -> list[str]:
    """``policy explain`` for people: each simple command with the rule that decides it, then
    the whole input's verdict."""
    lines = [visible(f"  {v.decision.value:<6} {cmd.text}\n         by {v.rule_id or 'the default'}"
                     f" at {located(v)}: {v.justification}") for cmd, v in commands]
    return [*lines, summary_line(subject, verdict)]
