"""computer_call: safety checks, then the actions on the computer, then one screenshot output.

The GA tool (``{"type": "computer"}``) sends ``actions``; the preview tool
(``computer_use_preview``) sends one ``action`` — both become one list for the computer
(:func:`sandbox.computer.actions.call_actions`). The output echoes
``acknowledged_safety_checks`` exactly as the callback acknowledged them, and nothing is
acknowledged silently: every pending check goes to the :data:`SafetyCallback` (none configured
means refuse). A refusal raises :class:`SafetyCheckRefused` *before* any action runs, so the loop
stops without sending a falsely acknowledged output. An output can only carry a screenshot, so
what the model must also know (an action that did not run, a browser that crashed and was
restarted on a fresh page) comes back as notes beside it.

Everything here is the :class:`~sandbox.computer.Computer` interface, whichever placement runs
it; the tool declared names that placement's ``environment``. A browser's navigation tools are
:mod:`executor.navigation`.
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Sequence
from typing import Any

from openai.types.responses import ResponseComputerToolCall

from executor.gate import Gate
from executor.items import COMPUTER, Output, ResourceKey, echo_caller
from executor.kinds import Answer, ToolKind
from executor.safety import SafetyCallback, SafetyDecision, refuse_all
from sandbox.computer import Computer
from sandbox.computer.actions import call_actions
from sandloop.errors import SafetyCheckRefused

__all__ = ["ComputerCallKind", "error_screenshot_url", "handle_computer_call"]

log = logging.getLogger("sandloop.computer")


async def _acknowledged(
    item: ResponseComputerToolCall, computer: Computer, safety: SafetyCallback | None
) -> list[dict[str, Any]]:
    """Every pending check, acknowledged one by one, or SafetyCheckRefused."""
    if not item.pending_safety_checks:
        return []
    ask = safety or refuse_all
    url = await computer.current_url()
    acknowledged: list[dict[str, Any]] = []
    for check in item.pending_safety_checks:
        answer = await ask(check, item, url)
        if answer.decision is not SafetyDecision.ACKNOWLEDGE:
            raise SafetyCheckRefused(check.id, check.code, check.message, answer.reason or "refused")
        log.info("safety check %s (%s) acknowledged: %s", check.id, check.code, answer.reason)
        # Exactly what the server sent: unset fields stay unset, nulls stay null.
        acknowledged.append(check.model_dump(mode="json", exclude_unset=True))
    return acknowledged


async def handle_computer_call(
    item: ResponseComputerToolCall,
    computer: Computer,
    *,
    safety: SafetyCallback | None,
    display: tuple[int, int] | None,
    detail_original: bool = True,
    gate: Gate | None = None,
) -> Answer:
    """One computer_call → its computer_call_output (never with ``id``), and the notes the
    computer made (an action it could not run, a restart) for the model.

    ``display`` is the size the tool declared (preview tool: display_width/height); None means
    the GA tool, whose screenshots are the computer's own screen size.
    """
    acknowledged = await _acknowledged(item, computer, safety)
    shot = await computer.perform(call_actions(item), display=display)
    if gate is not None:  # where the actions left the screen, beside the URL decisions they caused
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
    the computer cannot produce one the model is shown the error instead."""
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
        if tb.computer is None:
            return []
        if tb.computer_display is not None:
            # The preview tool (computer-use-preview models) declares its display and the
            # environment that really runs; the GA tool declares neither and gets screenshots at
            # the computer's screen size.
            width, height = tb.computer_display
            return [{"type": "computer_use_preview", "display_width": width,
                     "display_height": height, "environment": tb.computer.environment}]
        return [{"type": "computer"}]

    def unavailable(self, call: ResponseComputerToolCall) -> str | None:
        return self.toolbox.unavailable("computer use", "computer")

    def resources(self, call: ResponseComputerToolCall) -> Sequence[ResourceKey]:
        return [COMPUTER]

    async def handle(self, call: ResponseComputerToolCall) -> Answer:
        tb = self.toolbox
        assert tb.computer is not None  # unavailable() said so
        return await handle_computer_call(call, tb.computer, safety=tb.computer_safety,
                                          display=tb.computer_display, gate=tb.gate)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return echo_caller(item, {
            "type": "computer_call_output", "call_id": self.call_id(item),
            "output": {"type": "computer_screenshot", "image_url": error_screenshot_url(text)}})

    def outcome(self, output: Output) -> tuple[bool, str]:
        return True, "screenshot"
