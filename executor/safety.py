"""Computer-use safety checks: who answers a pending check, and how.

A :data:`SafetyCallback` is asked once per pending check, with the call it belongs to and where
the screen is (:meth:`sandbox.computer.Computer.current_url`: the page's URL, or ""). Nothing is
acknowledged silently: with no callback the check is refused (:func:`refuse_all`), and the run
stops before any action runs.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck
from rich.console import Console
from rich.prompt import Confirm, Prompt

from executor.terminal import shown

__all__ = [
    "SafetyAnswer",
    "SafetyCallback",
    "SafetyDecision",
    "TerminalSafetyPrompt",
    "acknowledge_all",
    "refuse_all",
]


class SafetyDecision(enum.StrEnum):
    ACKNOWLEDGE = "acknowledge"
    REFUSE = "refuse"


@dataclass(frozen=True)
class SafetyAnswer:
    decision: SafetyDecision
    reason: str = ""


#: Asked once per pending check, with the call it belongs to and the screen's URL ("" if none).
SafetyCallback = Callable[[PendingSafetyCheck, ResponseComputerToolCall, str], Awaitable[SafetyAnswer]]


async def refuse_all(check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str) -> SafetyAnswer:
    """The default: no human is watching, so nothing is acknowledged."""
    return SafetyAnswer(SafetyDecision.REFUSE, "no one is available to acknowledge safety checks")


async def acknowledge_all(
    check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str
) -> SafetyAnswer:
    """Acknowledge everything: an explicit opt-in for unattended runs in throwaway sandboxes."""
    return SafetyAnswer(SafetyDecision.ACKNOWLEDGE, "acknowledged by configuration (acknowledge_all)")


class TerminalSafetyPrompt:
    """Ask the person at the terminal (rich) about each check; anything but yes refuses."""

    def __init__(self, console: Console | None = None, *, stream: Any = None) -> None:
        self.console = console or Console(stderr=True)
        self.stream = stream  # input stream for rich's prompt (a file-like; None: stdin)

    def _ask(self, check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str) -> SafetyAnswer:
        self.console.print(f"[bold yellow]Safety check[/] {shown(check.id)} "
                           f"[dim]({shown(check.code or 'no code')})[/]")
        if check.message:
            self.console.print(shown(check.message))
        self.console.print(shown(f"page: {url or 'unknown'}; call {call.call_id}"))
        if Confirm.ask("Acknowledge and let the model continue?", console=self.console,
                       default=False, stream=self.stream):
            return SafetyAnswer(SafetyDecision.ACKNOWLEDGE, "acknowledged at the terminal")
        reason = Prompt.ask("Reason (sent nowhere; for the log)", console=self.console,
                            default="refused at the terminal", stream=self.stream)
        return SafetyAnswer(SafetyDecision.REFUSE, reason)

    async def __call__(
        self, check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str
    ) -> SafetyAnswer:
        return await asyncio.to_thread(self._ask, check, call, url)
