"""computer_call: safety checks, then the actions on the browser, then one screenshot output.

protocol.md A.6. The GA tool (``{"type": "computer"}``) sends ``actions``; the preview tool
(``computer_use_preview``) sends one ``action`` — both become one list for the browser. The
output echoes ``acknowledged_safety_checks`` exactly as the callback acknowledged them, and
nothing is acknowledged silently: every pending check goes to the :data:`SafetyCallback`
(none configured means refuse). A refusal raises :class:`SafetyCheckRefused` *before* any
action runs, so the loop stops without sending a falsely acknowledged output.

The browser environment also gets three function tools — ``navigate(url)``, ``back()``,
``forward()`` — as the public computer-use samples offer them (:func:`navigation_tools`).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck
from rich.console import Console
from rich.prompt import Confirm, Prompt

from executor.handlers import Output
from executor.handlers.function import FunctionTool
from sandbox.browser import Browser, Navigation
from sandloop.errors import SafetyCheckRefused

__all__ = [
    "NAVIGATION_TOOL_NAMES",
    "SafetyAnswer",
    "SafetyCallback",
    "SafetyDecision",
    "TerminalSafetyPrompt",
    "acknowledge_all",
    "handle_computer_call",
    "handle_navigation",
    "navigation_tool_params",
    "navigation_tools",
    "refuse_all",
]

log = logging.getLogger("sandloop.computer")


class SafetyDecision(enum.StrEnum):
    ACKNOWLEDGE = "acknowledge"
    REFUSE = "refuse"


@dataclass(frozen=True)
class SafetyAnswer:
    decision: SafetyDecision
    reason: str = ""


#: Asked once per pending check, with the call it belongs to and the page's current URL.
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
        self.console.print(f"[bold yellow]Safety check[/] {check.id} [dim]({check.code or 'no code'})[/]")
        if check.message:
            self.console.print(check.message, markup=False)
        self.console.print(f"page: {url or 'unknown'}; call {call.call_id}", markup=False)
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


async def _acknowledged(
    item: ResponseComputerToolCall, browser: Browser, safety: SafetyCallback | None
) -> list[dict[str, Any]]:
    """Every pending check, acknowledged one by one, or SafetyCheckRefused."""
    if not item.pending_safety_checks:
        return []
    ask = safety or refuse_all
    url = await browser.current_url()
    acknowledged: list[dict[str, Any]] = []
    for check in item.pending_safety_checks:
        answer = await ask(check, item, url)
        if answer.decision is not SafetyDecision.ACKNOWLEDGE:
            raise SafetyCheckRefused(check.id, check.code, check.message, answer.reason or "refused")
        log.info("safety check %s (%s) acknowledged: %s", check.id, check.code, answer.reason)
        # Exactly what the server sent: unset fields stay unset, nulls stay null.
        acknowledged.append(check.model_dump(mode="json", exclude_unset=True))
    return acknowledged


def _actions(item: ResponseComputerToolCall) -> Sequence[Any]:
    if item.actions is not None:
        return item.actions
    return [item.action] if item.action is not None else []


async def handle_computer_call(
    item: ResponseComputerToolCall,
    browser: Browser,
    *,
    safety: SafetyCallback | None,
    display: tuple[int, int] | None,
    detail_original: bool = True,
) -> Output:
    """One computer_call → its computer_call_output (never with ``id``).

    ``display`` is the size the tool declared (preview tool: display_width/height); None means
    the GA tool, whose screenshots are the browser's viewport.
    """
    acknowledged = await _acknowledged(item, browser, safety)
    shot = await browser.perform(_actions(item), display=display)
    for note in shot.notes:
        log.warning("computer_call %s: %s", item.call_id, note)
    screenshot: dict[str, Any] = {"type": "computer_screenshot", "image_url": shot.data_url}
    if detail_original and item.actions is not None:
        # Not in the 3.57 type; the current guide recommends it for the GA tool (protocol.md).
        screenshot["detail"] = "original"
    output: Output = {"type": "computer_call_output", "call_id": item.call_id, "output": screenshot}
    if acknowledged:
        output["acknowledged_safety_checks"] = acknowledged
    return output


# -- navigation function tools -------------------------------------------------------------

NAVIGATION_TOOL_NAMES = ("navigate", "back", "forward")

_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}, "required": [],
                            "additionalProperties": False}
_DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "navigate": (
        "Open a URL in the browser (http or https only). Domain rules may block it.",
        {"type": "object",
         "properties": {"url": {"type": "string", "description": "The absolute http(s) URL to open."}},
         "required": ["url"], "additionalProperties": False},
    ),
    "back": ("Go back one page in the browser's history.", _NO_ARGS),
    "forward": ("Go forward one page in the browser's history.", _NO_ARGS),
}


def navigation_tool_params() -> list[dict[str, Any]]:
    """The strict function-tool definitions, as sent in ``tools``."""
    return [
        {"type": "function", "name": name, "description": description,
         "parameters": parameters, "strict": True}
        for name, (description, parameters) in _DEFINITIONS.items()
    ]


async def handle_navigation(name: str, arguments: str | dict[str, Any], browser: Browser) -> str:
    """Run one navigation call; the text is the function_call_output (errors included)."""
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) else dict(arguments)
    except json.JSONDecodeError as exc:
        return f"error: arguments are not valid JSON ({exc.msg})"
    result: Navigation
    if name == "navigate":
        url = args.get("url") if isinstance(args, dict) else None
        if not isinstance(url, str) or not url:
            return "error: navigate needs a url string"
        result = await browser.navigate(url)
    elif name == "back":
        result = await browser.back()
    elif name == "forward":
        result = await browser.forward()
    else:
        return f"error: unknown navigation tool {name!r}"
    return result.describe()


def navigation_tools(browser: Browser) -> list[FunctionTool]:
    """The three tools ready for ``FunctionTools.extend``; they share the browser's lock slot."""

    def make(name: str) -> FunctionTool:
        description, parameters = _DEFINITIONS[name]

        async def run(**kwargs: Any) -> str:
            return await handle_navigation(name, kwargs, browser)

        return FunctionTool(name=name, fn=run, description=description,
                            parameters=parameters, strict=True, resource=("browser",))

    return [make(name) for name in NAVIGATION_TOOL_NAMES]
