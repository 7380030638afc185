"""One approvals interface: the question a PROMPT verdict (or a pending safety check) raises,
and who answers it.

An :class:`Approvals` is any async callable ``(ApprovalRequest) -> ApprovalAnswer``. Three are
provided: :class:`DenyAll`, the non-interactive default (nobody is there to say yes);
:class:`Callback`, which adapts a plain sync or async function; and :class:`TerminalPrompt`,
a rich prompt for a person at the terminal (it denies when stdin is not a terminal).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck
from rich.console import Console
from rich.prompt import Confirm

from executor.safety import SafetyAnswer, SafetyCallback, SafetyDecision
from executor.terminal import shown
from sandloop.verdict import Verdict

__all__ = [
    "ApprovalAnswer",
    "ApprovalKind",
    "ApprovalRequest",
    "Approvals",
    "Callback",
    "DenyAll",
    "TerminalPrompt",
    "safety_callback",
]

ApprovalKind = Literal["shell", "patch", "url", "function", "mcp", "safety_check"]


@dataclass(frozen=True)
class ApprovalRequest:
    kind: ApprovalKind
    subject: str  # the command line, the path, the URL, "server.tool", the check's message
    call_id: str
    verdict: Verdict | None = None  # the PROMPT verdict that raised the question, if any
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalAnswer:
    approved: bool
    reason: str


class Approvals(Protocol):
    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer: ...


class DenyAll:
    """The non-interactive default: every question is answered no."""

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        return ApprovalAnswer(False, "no approver available (non-interactive): denied by default")


class Callback:
    """Wrap ``fn(request) -> bool | ApprovalAnswer`` (sync or async) as an :class:`Approvals`."""

    def __init__(
        self, fn: Callable[[ApprovalRequest], bool | ApprovalAnswer
                           | Awaitable[bool | ApprovalAnswer]]
    ) -> None:
        self.fn = fn

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        answer = self.fn(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ApprovalAnswer):
            return answer
        return ApprovalAnswer(bool(answer), "approved by callback" if answer
                              else "denied by callback")


class TerminalPrompt:
    """Ask the person at the terminal; one question at a time even with parallel calls."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._lock = asyncio.Lock()

    async def __call__(self, request: ApprovalRequest) -> ApprovalAnswer:
        if not sys.stdin.isatty():
            return await DenyAll()(request)
        async with self._lock:
            why = request.verdict.justification if request.verdict is not None else ""
            # Everything after the label comes from the model or the policy: never markup, so a
            # command cannot hide part of itself from the person approving it.
            self.console.print(f"[bold yellow]approval needed[/] ({shown(request.kind)}) "
                               f"[cyan]{shown(request.subject)}[/]"
                               + (f"\n  rule: {shown(why)}" if why else ""))
            try:
                ok = await asyncio.to_thread(Confirm.ask, "Allow?", console=self.console,
                                             default=False)
            except EOFError:  # the terminal's input ended: nobody is there to say yes
                return ApprovalAnswer(False, "denied: the terminal's input ended before an answer")
        return ApprovalAnswer(ok, "approved at the terminal" if ok else "denied at the terminal")


def safety_callback(approvals: Approvals) -> SafetyCallback:
    """The computer handler's pending-safety-check callback, answered by ``approvals``: one
    interface for every question, so a refused check and a refused command look alike."""

    async def ask(check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str) -> SafetyAnswer:
        subject = f"{check.code or 'safety check'}: {check.message or ''} (page {url or '?'})"
        answer = await approvals(ApprovalRequest(
            "safety_check", subject, call.call_id,
            details={"check_id": check.id, "code": check.code, "url": url}))
        decision = SafetyDecision.ACKNOWLEDGE if answer.approved else SafetyDecision.REFUSE
        return SafetyAnswer(decision, answer.reason)

    return ask
