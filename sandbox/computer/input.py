"""What each action does with a pointer and a keyboard, the same on every placement.

A placement gives an :class:`InputDevice` — Playwright's mouse and keyboard for a page, XTEST for
an X display — and :func:`perform_action` plays one validated action on it: modifier keys held
for exactly the duration of a mouse action, a drag moved through intermediate points (pages and
programs that sample the pointer see the whole path), a chord pressed in order and released in
reverse. Coordinates arrive in the declared display's space and leave in the screen's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Literal, Protocol

from openai.types.responses import computer_action as ca

from sandbox.computer.actions import Action, chord

__all__ = ["Button", "InputDevice", "perform_action"]

Button = Literal["left", "right", "wheel", "back", "forward"]


class InputDevice(Protocol):
    """A pointer and a keyboard, in screen pixels; key names are canonical (:mod:`sandbox.computer.keys`)."""

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        """Move the pointer there, through ``steps`` intermediate positions."""

    async def click(self, x: float, y: float, button: Button) -> None:
        """Move there and click ``button`` (``back`` / ``forward``: the side buttons)."""

    async def double_click(self, x: float, y: float) -> None: ...

    async def down(self) -> None:
        """Press the left button where the pointer is."""

    async def up(self) -> None: ...

    async def wheel(self, dx: float, dy: float) -> None:
        """Scroll by this many pixels where the pointer is."""

    async def key_down(self, key: str) -> None: ...

    async def key_up(self, key: str) -> None: ...

    async def type(self, text: str) -> None:
        """Type the text as the keyboard would, character by character."""


async def perform_action(device: InputDevice, action: Action, scale: tuple[float, float], *, wait_s: float) -> None:
    """Play one validated action (:func:`sandbox.computer.actions.validate`) on ``device``."""
    sx, sy = scale
    if isinstance(action, ca.Click):
        async with _held(device, action.keys):
            await device.click(action.x * sx, action.y * sy, action.button)
    elif isinstance(action, ca.DoubleClick):
        async with _held(device, action.keys):
            await device.double_click(action.x * sx, action.y * sy)
    elif isinstance(action, ca.Drag):
        async with _held(device, action.keys):
            await _drag(device, [(p.x * sx, p.y * sy) for p in action.path])
    elif isinstance(action, ca.Move):
        async with _held(device, action.keys):
            await device.move(action.x * sx, action.y * sy)
    elif isinstance(action, ca.Scroll):
        async with _held(device, action.keys):
            await device.move(action.x * sx, action.y * sy)
            await device.wheel(action.scroll_x * sx, action.scroll_y * sy)
    elif isinstance(action, ca.Keypress):
        names = chord(action.keys)
        for name in names:
            await device.key_down(name)
        for name in reversed(names):
            await device.key_up(name)
    elif isinstance(action, ca.Type):
        await device.type(action.text)
    elif isinstance(action, ca.Wait):
        await asyncio.sleep(wait_s)  # the API gives no duration
    # ca.Screenshot: nothing to do, the capture follows


async def _drag(device: InputDevice, points: list[tuple[float, float]]) -> None:
    await device.move(*points[0])
    await device.down()
    previous = points[0]
    for point in points[1:]:
        # intermediate moves, so what samples the pointer sees the whole path
        steps = max(1, min(20, int(math.dist(previous, point) / 10)))
        await device.move(*point, steps=steps)
        previous = point
    await device.up()


@asynccontextmanager
async def _held(device: InputDevice, names: Sequence[str] | None) -> AsyncIterator[None]:
    """Hold modifier keys for exactly the duration of one mouse action."""
    held = chord(names) if names else []
    pressed: list[str] = []
    try:
        for name in held:
            await device.key_down(name)
            pressed.append(name)
        yield
    finally:
        for name in reversed(pressed):
            await device.key_up(name)
