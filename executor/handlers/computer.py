"""computer_call: safety checks, then the actions on the browser, then one screenshot output.

The GA tool (``{"type": "computer"}``) sends ``actions``; the preview tool
(``computer_use_preview``) sends one ``action`` — both become one list for the browser. The
output echoes ``acknowledged_safety_checks`` exactly as the callback acknowledged them, and
nothing is acknowledged silently: every pending check goes to the :data:`SafetyCallback`
(none configured means refuse). A refusal raises :class:`SafetyCheckRefused` *before* any
action runs, so the loop stops without sending a falsely acknowledged output. An output can only
carry a screenshot, so what the model must also know (an action that did not run, a browser
that crashed and was restarted on a fresh page) comes back as notes beside it.

The browser environment also gets three function tools — ``navigate(url)``, ``back()``,
``forward()`` — as the public computer-use samples offer them (:func:`navigation_tools`).
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Sequence
from typing import Any

from openai.types.responses import ResponseComputerToolCall

from executor.gate import Gate
from executor.items import Output, ResourceKey, echo_caller
from executor.kinds import Answer, ToolKind
from executor.safety import SafetyCallback, SafetyDecision, refuse_all
from executor.tools import FunctionTool
from sandbox.browser import Browser, Navigation
from sandloop.errors import SafetyCheckRefused

__all__ = [
    "NAVIGATION_TOOL_NAMES",
    "ComputerCallKind",
    "error_screenshot_url",
    "handle_computer_call",
    "handle_navigation",
    "navigation_tool_params",
    "navigation_tools",
]

log = logging.getLogger("sandloop.computer")


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
    gate: Gate | None = None,
) -> Answer:
    """One computer_call → its computer_call_output (never with ``id``), and the notes the
    browser made (an action it could not run, a restart) for the model.

    ``display`` is the size the tool declared (preview tool: display_width/height); None means
    the GA tool, whose screenshots are the browser's viewport.
    """
    acknowledged = await _acknowledged(item, browser, safety)
    shot = await browser.perform(_actions(item), display=display)
    if gate is not None:  # where the actions left the page, beside the URL decisions they caused
        await gate.outcome("computer", shot.url, call_id=item.call_id, ok=True, notes=list(shot.notes))
    for note in shot.notes:
        log.info("computer_call %s: %s", item.call_id, note)
    screenshot: dict[str, Any] = {"type": "computer_screenshot", "image_url": shot.data_url}
    if detail_original and item.actions is not None:
        # Not in the SDK's 3.57 type; the current computer-use guide recommends it for the GA
        # tool, so the model sees the screenshot at full resolution.
        screenshot["detail"] = "original"
    output: Output = {"type": "computer_call_output", "call_id": item.call_id, "output": screenshot}
    if acknowledged:
        output["acknowledged_safety_checks"] = acknowledged
    return Answer(output, tuple(shot.notes))


def error_screenshot_url(text: str) -> str:
    """A PNG data URL showing ``text``: computer_call_output must carry a screenshot, so when
    the browser cannot produce one the model is shown the error instead."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (640, 120), "white")
    draw = ImageDraw.Draw(image)
    lines = [text[i : i + 90] for i in range(0, min(len(text), 450), 90)] or [""]
    draw.multiline_text((10, 10), "\n".join(lines), fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class ComputerCallKind(ToolKind[ResponseComputerToolCall]):
    call_type = "computer_call"
    output_type = "computer_call_output"
    model = ResponseComputerToolCall

    def summary(self, item: dict[str, Any]) -> str:
        actions = item.get("actions") or ([item["action"]] if item.get("action") else [])
        if not isinstance(actions, list):
            return self.call_type
        return ", ".join(str(a.get("type")) if isinstance(a, dict) else "?" for a in actions) or "screenshot"

    def tool_params(self) -> list[dict[str, Any]]:
        tb = self.toolbox
        if tb.browser is None:
            return []
        if tb.computer_display is not None:
            # The preview tool (computer-use-preview models) declares its display; the GA tool
            # declares nothing and gets screenshots at the browser's viewport.
            width, height = tb.computer_display
            return [{"type": "computer_use_preview", "display_width": width,
                     "display_height": height, "environment": "browser"}]
        return [{"type": "computer"}]

    def unavailable(self, call: ResponseComputerToolCall) -> str | None:
        return self.toolbox.unavailable("computer use", "browser")

    def resources(self, call: ResponseComputerToolCall) -> Sequence[ResourceKey]:
        return [("browser",)]

    async def handle(self, call: ResponseComputerToolCall) -> Answer:
        tb = self.toolbox
        assert tb.browser is not None  # unavailable() said so
        return await handle_computer_call(call, tb.browser, safety=tb.computer_safety,
                                          display=tb.computer_display, gate=tb.gate)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return echo_caller(item, {
            "type": "computer_call_output", "call_id": self.call_id(item),
            "output": {"type": "computer_screenshot", "image_url": error_screenshot_url(text)}})

    def outcome(self, output: Output) -> tuple[bool, str]:
        return True, "screenshot"


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
