"""A page's mouse and keyboard as a computer's input device (:mod:`sandbox.computer.input`)."""

from __future__ import annotations

from typing import Literal

from playwright.async_api import Page

from sandbox.computer.input import Button

__all__ = ["PageInput"]

_MOUSE_BUTTONS: dict[str, Literal["left", "right", "middle"]] = {
    "left": "left",
    "right": "right",
    "wheel": "middle",
}


class PageInput:
    """The page's mouse and keyboard as a computer's input device (sandbox.computer.input)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.mouse = page.mouse
        self.keyboard = page.keyboard

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        await self.mouse.move(x, y, steps=steps)

    async def click(self, x: float, y: float, button: Button) -> None:
        if button in ("back", "forward"):
            # Chromium handles mouse buttons 4/5 in its window, which a headless page has not:
            # do what the button means, history navigation.
            await self.mouse.move(x, y)
            go = self.page.go_back if button == "back" else self.page.go_forward
            await go(wait_until="commit")
        else:
            await self.mouse.click(x, y, button=_MOUSE_BUTTONS[button])

    async def double_click(self, x: float, y: float) -> None:
        await self.mouse.dblclick(x, y)

    async def down(self) -> None:
        await self.mouse.down()

    async def up(self) -> None:
        await self.mouse.up()

    async def wheel(self, dx: float, dy: float) -> None:
        await self.mouse.wheel(dx, dy)

    async def key_down(self, key: str) -> None:
        await self.keyboard.down(key)

    async def key_up(self, key: str) -> None:
        await self.keyboard.up(key)

    async def type(self, text: str) -> None:
        await self.keyboard.type(text)
