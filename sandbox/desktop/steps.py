"""The computer's input, written down as steps for the helper instead of played one by one.

:func:`sandbox.computer.input.perform_action` plays each action on an
:class:`~sandbox.computer.input.InputDevice`; :class:`StepRecorder` is one that only records
what it was asked (pointer moves with their intermediate points, buttons, keys, text), so a
whole batch travels to the helper as one request and is played there against X without a
round trip per action. The steps are :mod:`sandbox.helper.desktop`'s.
"""

from __future__ import annotations

from typing import Any

from sandbox.computer.input import Button

__all__ = ["WHEEL_PX", "StepRecorder"]

#: Pixels one wheel click scrolls (what a browser scrolls per notch, about).
WHEEL_PX = 100
_BUTTONS: dict[Button, int] = {"left": 1, "wheel": 2, "right": 3, "back": 8, "forward": 9}


def _clicks(pixels: float) -> int:
    return 0 if pixels == 0 else max(1, round(abs(pixels) / WHEEL_PX))


class StepRecorder:
    """An InputDevice that records steps, each tagged with the action (``index``) it belongs to."""

    def __init__(self) -> None:
        self.steps: list[list[Any]] = []
        self.index = 0
        self._at = (0.0, 0.0)

    def _add(self, *step: Any) -> None:
        self.steps.append([self.index, *step])

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        x0, y0 = self._at
        for i in range(1, steps + 1):  # the whole path, for programs that sample the pointer
            self._add("move", round(x0 + (x - x0) * i / steps), round(y0 + (y - y0) * i / steps))
        self._at = (x, y)

    async def click(self, x: float, y: float, button: Button) -> None:
        await self.move(x, y)
        self._add("button", _BUTTONS[button], True)
        self._add("button", _BUTTONS[button], False)

    async def double_click(self, x: float, y: float) -> None:
        await self.click(x, y, "left")
        self._add("button", 1, True)
        self._add("button", 1, False)

    async def down(self) -> None:
        self._add("button", 1, True)

    async def up(self) -> None:
        self._add("button", 1, False)

    async def wheel(self, dx: float, dy: float) -> None:
        # X's wheel is buttons: 4 up, 5 down, 6 left, 7 right, one click each
        for button, count in ((5 if dy > 0 else 4, _clicks(dy)), (7 if dx > 0 else 6, _clicks(dx))):
            for _ in range(count):
                self._add("button", button, True)
                self._add("button", button, False)

    async def key_down(self, key: str) -> None:
        self._add("key", key, True)

    async def key_up(self, key: str) -> None:
        self._add("key", key, False)

    async def type(self, text: str) -> None:
        self._add("type", text)

    def wait(self, seconds: float) -> None:
        self._add("wait", seconds)
