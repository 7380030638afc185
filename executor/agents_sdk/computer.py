"""The ComputerTool's computer: sandloop's computer behind the SDK's ``AsyncComputer``.

The SDK calls one method per action, then ``screenshot()``; the actions are queued and run as
one batch by ``screenshot()`` — exactly the batch sandloop's own computer handler gives the
computer (a browser: with the same domain rules on every request, the policy's ``[browser]``
section) and the same modifier keys held for the duration of a mouse action. ``screenshot()``
returns bare base64 PNG (the SDK adds the ``data:`` prefix). What the computer could not do is
logged; an error it raises is shown to the model as a screenshot of its text, as sandloop does.

Pending safety checks go to :meth:`SandboxComputer.on_safety_check`, answered like sandloop's
own (the policy's ``browser.safety_checks``: acknowledge, ask the approvals, or refuse); the SDK
stops the run on a refusal.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, cast, get_args

from agents.computer import AsyncComputer, Button, Environment
from agents.tool import ComputerToolSafetyCheckData

from executor.handlers.computer import error_screenshot_url
from executor.safety import SafetyCallback, SafetyDecision, refuse_all
from sandbox.computer import Computer
from sandloop.errors import SandloopError, describe

__all__ = ["SandboxComputer"]

log = logging.getLogger("sandloop.agents_sdk")


class SandboxComputer(AsyncComputer):
    def __init__(self, computer: Computer, safety: SafetyCallback | None = None) -> None:
        self.computer = computer
        self.safety = safety or refuse_all
        self._queued: list[dict[str, Any]] = []

    @property
    def environment(self) -> Environment | None:
        """The environment that really runs, where the SDK has a name for it: it has no "linux",
        and a Linux desktop is what its "ubuntu" means."""
        environment = self.computer.environment
        if environment == "linux" and "ubuntu" in get_args(Environment):
            environment = "ubuntu"
        return cast(Environment, environment) if environment in get_args(Environment) else None

    @property
    def dimensions(self) -> tuple[int, int]:
        return self.computer.screen

    def _queue(self, action: dict[str, Any], keys: list[str] | None = None) -> None:
        if keys:
            action["keys"] = list(keys)
        self._queued.append(action)

    async def screenshot(self) -> str:
        actions, self._queued = self._queued, []
        try:
            shot = await self.computer.perform(actions)
        except SandloopError as exc:
            log.warning("computer actions failed: %s", exc)
            return error_screenshot_url(describe(exc)).split(",", 1)[1]
        for note in shot.notes:
            log.info("computer action note: %s", note)
        return base64.b64encode(shot.png).decode("ascii")

    async def click(self, x: int, y: int, button: Button, *, keys: list[str] | None = None) -> None:
        self._queue({"type": "click", "x": x, "y": y, "button": button}, keys)

    async def double_click(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        self._queue({"type": "double_click", "x": x, "y": y}, keys)

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int, *,
                     keys: list[str] | None = None) -> None:
        self._queue({"type": "scroll", "x": x, "y": y, "scroll_x": scroll_x, "scroll_y": scroll_y}, keys)

    async def type(self, text: str) -> None:
        self._queue({"type": "type", "text": text})

    async def wait(self) -> None:
        self._queue({"type": "wait"})

    async def move(self, x: int, y: int, *, keys: list[str] | None = None) -> None:
        self._queue({"type": "move", "x": x, "y": y}, keys)

    async def keypress(self, keys: list[str]) -> None:
        self._queue({"type": "keypress", "keys": list(keys)})

    async def drag(self, path: list[tuple[int, int]], *, keys: list[str] | None = None) -> None:
        self._queue({"type": "drag", "path": [{"x": x, "y": y} for x, y in path]}, keys)

    async def on_safety_check(self, data: ComputerToolSafetyCheckData) -> bool:
        """``ComputerTool(on_safety_check=...)``: True acknowledges the check."""
        url = await self.computer.current_url()
        answer = await self.safety(data.safety_check, data.tool_call, url)
        acknowledged = answer.decision is SafetyDecision.ACKNOWLEDGE
        log.info("safety check %s %s: %s", data.safety_check.id,
                 "acknowledged" if acknowledged else "refused", answer.reason)
        return acknowledged
