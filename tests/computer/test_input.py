"""What each action does with a pointer and a keyboard, in order: the part every placement shares.

The device here records the calls a placement's device receives (Chromium's and an X display's
alike); what those calls do on a real page is tests/browser/test_actions.py.
"""

from __future__ import annotations

import time
from typing import Any

from sandbox.computer.actions import validate
from sandbox.computer.input import Button, perform_action


class Recorder:
    """An InputDevice that writes down each call it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        self.calls.append(("move", x, y, steps))

    async def click(self, x: float, y: float, button: Button) -> None:
        self.calls.append(("click", x, y, button))

    async def double_click(self, x: float, y: float) -> None:
        self.calls.append(("double_click", x, y))

    async def down(self) -> None:
        self.calls.append(("down",))

    async def up(self) -> None:
        self.calls.append(("up",))

    async def wheel(self, dx: float, dy: float) -> None:
        self.calls.append(("wheel", dx, dy))

    async def key_down(self, key: str) -> None:
        self.calls.append(("key_down", key))

    async def key_up(self, key: str) -> None:
        self.calls.append(("key_up", key))

    async def type(self, text: str) -> None:
        self.calls.append(("type", text))


async def _play(raw: list[dict[str, Any]], scale: tuple[float, float] = (1.0, 1.0)) -> list[tuple[Any, ...]]:
    device = Recorder()
    batch = validate(raw, (1280, 800))
    assert batch.refused is None
    for action in batch.actions:
        await perform_action(device, action, scale, wait_s=0.01)
    return device.calls


async def test_modifiers_are_held_for_exactly_one_mouse_action() -> None:
    calls = await _play([{"type": "click", "button": "right", "x": 10, "y": 20, "keys": ["CTRL", "shift"]},
                         {"type": "double_click", "x": 1, "y": 2}])
    assert calls == [("key_down", "Control"), ("key_down", "Shift"), ("click", 10, 20, "right"),
                     ("key_up", "Shift"), ("key_up", "Control"), ("double_click", 1, 2)]


async def test_a_chord_is_pressed_in_order_and_released_in_reverse() -> None:
    calls = await _play([{"type": "keypress", "keys": ["CTRL+A"]}, {"type": "type", "text": "hé"}])
    assert calls == [("key_down", "Control"), ("key_down", "a"), ("key_up", "a"), ("key_up", "Control"),
                     ("type", "hé")]


async def test_coordinates_leave_in_screen_pixels() -> None:
    # the model's display is half the screen: every coordinate and scroll distance doubles
    calls = await _play([{"type": "scroll", "x": 100, "y": 50, "scroll_x": -3, "scroll_y": 40},
                         {"type": "move", "x": 7, "y": 9}], scale=(2.0, 2.0))
    assert calls == [("move", 200, 100, 1), ("wheel", -6, 80), ("move", 14, 18, 1)]


async def test_a_drag_walks_its_whole_path() -> None:
    calls = await _play([{"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 100, "y": 0}, {"x": 100, "y": 5}],
                          "keys": ["alt"]}])
    # one step per 10 px (at least 1, at most 20), so what samples the pointer sees the path
    assert calls == [("key_down", "Alt"), ("move", 0, 0, 1), ("down",), ("move", 100, 0, 10),
                     ("move", 100, 5, 1), ("up",), ("key_up", "Alt")]


async def test_wait_waits_and_screenshot_does_nothing() -> None:
    start = time.monotonic()
    assert await _play([{"type": "wait"}, {"type": "screenshot"}]) == []
    assert time.monotonic() - start >= 0.01
