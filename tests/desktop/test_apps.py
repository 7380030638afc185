"""The desktop's own applications, started from its terminal as a model would: the editor saves
what was typed into it, and a Chromium window shows a page of the checkout."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sandbox.desktop import Desktop
from tests.desktop.conftest import file_appears, image, run_in_terminal

COLOUR = (255, 0, 170)


async def _until_screen_shows(desktop: Desktop, colour: tuple[int, int, int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shot = await desktop.screenshot()
        if colour in {c for _, c in image(shot).getcolors(1 << 20) or []}:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"the screen never showed {colour}")


async def test_the_editor_saves_what_was_typed_into_it(desktop: Desktop, workspace: Path) -> None:
    await run_in_terminal(desktop, "mousepad notes.txt &")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until its window has taken the focus (the title says it)
        shot = await desktop.screenshot()
        if image(shot).getpixel((300, 200)) != image(shot).getpixel((300, 420)):
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)
    await desktop.perform([{"type": "type", "text": "written in the editor\n"},
                           {"type": "keypress", "keys": ["CTRL", "S"]}])
    assert await file_appears(workspace / "notes.txt", timeout=20) == "written in the editor\n"


async def test_a_chromium_window_shows_a_page_of_the_checkout(desktop: Desktop, workspace: Path) -> None:
    r, g, b = COLOUR
    (workspace / "page.html").write_text(
        f"<!doctype html><body style='margin:0;background:rgb({r},{g},{b})'></body>")
    await run_in_terminal(desktop, "chromium --new-window file:///workspace/page.html >/dev/null 2>&1 &")
    await _until_screen_shows(desktop, COLOUR)
