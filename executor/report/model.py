"""A run as a timeline: turns, the entries in them (messages, reasoning, notes, calls), and for
each call what it did and what the policy decided about it. Built by :mod:`executor.report.load`;
laid out by :mod:`executor.report.render`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.report.files import RunFiles

__all__ = ["AuditCheck", "Call", "Command", "ComputerView", "Decision", "Entry", "FilePatch",
           "GenericView", "Message", "Note", "PatchView", "Reasoning", "Run", "SafetyCheck",
           "ShellView", "Turn", "View"]


@dataclass
class Decision:
    """One answer of the policy (or of the person it asked), as the decision log holds it."""

    what: str  # shell | patch | url | function | mcp | safety_check
    subject: str
    decision: str  # the final one: allow | deny (acknowledge | refuse for safety checks)
    policy_decision: str | None = None  # what the policy said: allow | prompt | deny
    rule_id: str | None = None
    source: str | None = None  # "policy file:line"
    justification: str = ""
    approval: str | None = None  # who decided a prompt, and how
    seq: int | None = None

    @property
    def prompted(self) -> bool:
        return self.policy_decision == "prompt"

    @property
    def denied(self) -> bool:
        return self.decision in ("deny", "refuse")


@dataclass
class Command:
    """One command of a shell call, as it ran."""

    command: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    answered: bool = False  # the output carries an entry for it
    decision: Decision | None = None
    duration_s: float | None = None

    @property
    def denied(self) -> bool:
        return self.decision is not None and self.decision.denied


@dataclass
class ShellView:
    commands: list[Command]
    timeout_ms: int | None = None
    max_output_length: int | None = None


@dataclass
class FilePatch:
    """One file's part of a patch: its lines, each marked add | del | ctx | hunk | meta."""

    op: str  # create_file | update_file | delete_file (or Add/Update/Delete for an envelope)
    path: str
    move_to: str | None = None
    lines: list[tuple[str, str]] = field(default_factory=list)
    decision: Decision | None = None

    @property
    def added(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "add")

    @property
    def removed(self) -> int:
        return sum(1 for kind, _ in self.lines if kind == "del")


@dataclass
class PatchView:
    files: list[FilePatch]
    status: str | None  # completed | failed | None (no status: a custom tool's text)
    message: str


@dataclass
class SafetyCheck:
    id: str
    code: str
    message: str
    answer: str  # acknowledged | refused | unanswered
    by: str | None = None  # who answered, when the logs say


@dataclass
class ComputerView:
    actions: list[dict[str, Any]]
    #: the screenshot the actions applied to (the previous computer_call_output's)
    before: str | None
    after: str | None
    url: str | None
    url_known_from: str | None
    safety: list[SafetyCheck]


@dataclass
class GenericView:
    """Function, custom, MCP, tool search and any call we have no better view for."""

    name: str
    arguments: str
    output: str
    images: list[str] = field(default_factory=list)


View = ShellView | PatchView | ComputerView | GenericView


@dataclass
class Call:
    call_id: str
    type: str
    turn: int
    item: dict[str, Any]
    output: dict[str, Any] | None
    decisions: list[Decision]
    view: View
    #: the run summary's record of this call (duration_s, ok, outcome …), when there is one
    record: dict[str, Any] = field(default_factory=dict)
    background: bool = False

    @property
    def duration_s(self) -> float | None:
        value = self.record.get("duration_s")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def denied(self) -> bool:
        if any(d.denied for d in self.decisions):
            return True
        if self.type == "mcp_approval_request" and self.output is not None:
            return self.output.get("approve") is False
        return isinstance(self.view, ComputerView) and any(
            c.answer == "refused" for c in self.view.safety)

    @property
    def prompted(self) -> bool:
        return any(d.prompted for d in self.decisions)

    @property
    def timed_out(self) -> bool:
        return isinstance(self.view, ShellView) and any(c.timed_out for c in self.view.commands)

    @property
    def failed(self) -> bool:
        """It went wrong for a reason other than a refusal (the denied filter shows those): no
        answer, a non-zero exit or a timeout of a command that was allowed, a failed patch no
        decision refused, a failure the call's kind reports."""
        if self.output is None:
            return not self.background and not self.denied
        view = self.view
        if isinstance(view, ShellView):
            return any(c.timed_out or (c.exit_code not in (0, None) and not c.denied)
                       for c in view.commands)
        if isinstance(view, PatchView):
            return view.status == "failed" and not any(f.decision and f.decision.denied for f in view.files)
        return self.record.get("ok") is False and not self.denied

    @property
    def flags(self) -> list[str]:
        """What the filters select on: denied, error, prompted."""
        marks = []
        if self.denied:
            marks.append("denied")
        if self.failed or self.timed_out:
            marks.append("error")
        if self.prompted:
            marks.append("prompted")
        return marks

    @property
    def status(self) -> str:
        """One word for the badge."""
        if self.denied:  # a refused safety check leaves the call unanswered: refused is the news
            return "denied"
        if self.output is None:
            return "running" if self.background else "unanswered"
        if self.timed_out:
            return "timeout"
        return "failed" if self.failed else "ok"

    @property
    def summary(self) -> str:
        text = self.record.get("summary")
        if isinstance(text, str) and text:
            return text
        view = self.view
        if isinstance(view, ShellView):
            # As the progress line says it: several commands ran one by one, not as `a && b`;
            # the body lists each with its exit code.
            commands = view.commands
            return commands[0].command if len(commands) == 1 else f"{len(commands)} commands"
        if isinstance(view, PatchView):
            return ", ".join(f"{f.op} {f.path}" for f in view.files)
        if isinstance(view, ComputerView):
            return ", ".join(str(a.get("type")) for a in view.actions) or "screenshot"
        return view.name


@dataclass
class Message:
    role: str
    text: str
    refusal: bool = False
    phase: str | None = None


@dataclass
class Reasoning:
    texts: list[str]


@dataclass
class Note:
    """What sandloop told the model beside the outputs, or a record the report cannot place."""

    text: str
    kind: str = "note"  # note | hosted | error


Entry = Call | Message | Reasoning | Note


@dataclass
class Turn:
    index: int
    response_id: str | None = None
    status: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    request_s: float | None = None
    tools_s: float | None = None
    retried: bool = False
    entries: list[Entry] = field(default_factory=list)

    @property
    def calls(self) -> list[Call]:
        return [e for e in self.entries if isinstance(e, Call)]


@dataclass
class AuditCheck:
    path: Path | None
    problems: list[str] = field(default_factory=list)
    records: int = 0
    head_checked: bool = False
    #: records after the head (a later run appending to a shared log): the head does not cover them
    after_head: int | None = None

    @property
    def verified(self) -> bool | None:
        """True: the chain holds; False: it breaks (see problems); None: no decision log."""
        if self.path is None:
            return None
        return not self.problems


@dataclass
class Run:
    files: RunFiles
    run_id: str
    meta: dict[str, Any]
    result: dict[str, Any] | None
    turns: list[Turn]
    audit: AuditCheck
    #: decisions of this run that no call of the log claims
    stray_decisions: list[Decision] = field(default_factory=list)
    #: what could not be read (unparseable lines, other runs in the same log …)
    problems: list[str] = field(default_factory=list)
    #: images the log kept inline (not as screenshot files), by sha256
    images: dict[str, bytes] = field(default_factory=dict)

    @property
    def calls(self) -> list[Call]:
        return [c for t in self.turns for c in t.calls]

    @property
    def decisions(self) -> list[Decision]:
        return [d for c in self.calls for d in c.decisions] + self.stray_decisions

    def decision_counts(self) -> dict[str, int]:
        """allowed / prompted / denied, plus how prompts were answered."""
        decisions = self.decisions
        return {
            "allowed": sum(1 for d in decisions if not d.denied and not d.prompted),
            "prompted": sum(1 for d in decisions if d.prompted),
            "approved": sum(1 for d in decisions if d.prompted and not d.denied),
            "refused": sum(1 for d in decisions if d.prompted and d.denied),
            "denied": sum(1 for d in decisions if d.denied and not d.prompted),
        }

    def type_counts(self) -> dict[str, int]:
        return dict(Counter(c.type for c in self.calls))

    def flag_counts(self) -> dict[str, int]:
        return dict(Counter(flag for c in self.calls for flag in c.flags))

    def screenshots(self) -> list[str]:
        """Every screenshot the report shows, in order of first use."""
        seen: dict[str, None] = {}
        for call in self.calls:
            view = call.view
            refs = [view.before, view.after] if isinstance(view, ComputerView) else \
                view.images if isinstance(view, GenericView) else []
            for ref in refs:
                if ref is not None:
                    seen.setdefault(ref, None)
        return list(seen)
