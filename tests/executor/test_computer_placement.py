"""The loop with a computer that is not a browser: the front-end knows only sandbox.computer.

The placement here is the test's own and says so: a white screen that paints a black square
where it is clicked, built from the parts every placement shares (validate, perform_action,
fitted, the notes). Through the real loop and openai client it must be declared with its own
environment, be given the actions at its own scale, answer with its screenshot at the declared
size, and have its refusals and safety checks handled as the browser's are.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.response_computer_tool_call import PendingSafetyCheck
from PIL import Image

from executor.loop import ExitCode
from executor.safety import SafetyAnswer, SafetyDecision
from executor.testing import computer_call, message
from executor.toolbox import Toolbox
from sandbox.computer import ActionLike, Computer, Screenshot, Size
from sandbox.computer.actions import validate
from sandbox.computer.input import Button, perform_action
from sandbox.computer.screen import declared, fitted, scale
from tests.executor.conftest import run_loop


class _Pen:
    """The canvas's input device: a click paints a 5x5 black square; typing is kept."""

    def __init__(self, image: Image.Image) -> None:
        self.image = image
        self.typed = ""

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        pass

    async def click(self, x: float, y: float, button: Button) -> None:
        self.image.paste((0, 0, 0), (int(x) - 2, int(y) - 2, int(x) + 3, int(y) + 3))

    async def double_click(self, x: float, y: float) -> None:
        await self.click(x, y, "left")

    async def down(self) -> None:
        pass

    async def up(self) -> None:
        pass

    async def wheel(self, dx: float, dy: float) -> None:
        pass

    async def key_down(self, key: str) -> None:
        pass

    async def key_up(self, key: str) -> None:
        pass

    async def type(self, text: str) -> None:
        self.typed += text


class Canvas(Computer):
    environment = "linux"

    def __init__(self) -> None:
        self.screen = (400, 200)
        self.pen = _Pen(Image.new("RGB", self.screen, "white"))
        self.batches = 0

    async def perform(self, actions: Sequence[ActionLike], *, display: Size | None = None) -> Screenshot:
        display = declared(display, self.screen)
        batch = validate(actions, display)
        self.batches += 1
        for action in batch.actions:
            await perform_action(self.pen, action, scale(self.screen, display), wait_s=0)
        out = io.BytesIO()
        self.pen.image.save(out, format="PNG")
        notes = (batch.refused,) if batch.refused else ()
        return Screenshot(await fitted(out.getvalue(), display), display, notes=notes)

    async def close(self) -> None:
        pass


def _image(output: dict[str, Any]) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(output["output"]["image_url"].split(",", 1)[1]))).convert("RGB")


async def test_a_placement_of_its_own_is_declared_driven_and_shown() -> None:
    canvas = Canvas()
    actions = [{"type": "click", "button": "left", "x": 50, "y": 25}, {"type": "type", "text": "hi"},
               {"type": "click", "button": "left", "x": 250, "y": 10}]
    run = await run_loop([[computer_call(actions)], [message("done")]],
                         Toolbox(computer=canvas, computer_display=(200, 100)))
    assert run.result.exit_code is ExitCode.ANSWERED
    # the tool names the environment that really runs; a computer that is no browser has no
    # navigation tools beside it
    assert run.requests[0]["tools"] == [{"type": "computer_use_preview", "display_width": 200,
                                         "display_height": 100, "environment": "linux"}]
    (out,) = run.outputs(1)
    image = _image(out)
    assert image.size == (200, 100)  # the declared display, not the 400x200 screen
    assert image.getpixel((50, 25)) == (0, 0, 0) and image.getpixel((60, 25)) == (255, 255, 255)
    assert canvas.pen.image.getpixel((100, 50)) == (0, 0, 0)  # painted at the screen's scale
    assert canvas.pen.typed == "hi"  # the actions before the refused one ran
    note = next(i for i in run.requests[1]["input"] if isinstance(i, dict) and i.get("role") == "developer")
    assert "action 3 not run: (250, 10) is outside the 200x100 display" in str(note["content"])


async def test_its_safety_checks_are_answered_before_any_action_runs() -> None:
    canvas = Canvas()
    seen: list[tuple[str, str]] = []

    async def refuse(check: PendingSafetyCheck, call: ResponseComputerToolCall, url: str) -> SafetyAnswer:
        seen.append((check.id, url))
        return SafetyAnswer(SafetyDecision.REFUSE, "not today")

    check = {"id": "cu_sc_9", "code": "sensitive_domain", "message": "careful"}
    run = await run_loop(
        [[computer_call([{"type": "click", "button": "left", "x": 1, "y": 1}], pending_safety_checks=[check])]],
        Toolbox(computer=canvas, computer_safety=refuse))
    assert run.result.exit_code is ExitCode.REFUSED
    assert seen == [("cu_sc_9", "")]  # a placement with no page has no URL to show
    assert canvas.batches == 0
