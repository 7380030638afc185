"""Every action on a real X display: typed commands that write files, Unicode, drags, double
clicks and scrolling, checked through the files the terminal writes or through how the
screenshots differ — never through a mock of X."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.desktop import Desktop, DesktopConfig, open_desktop
from tests.desktop.conftest import changed, file_appears, image, run_in_terminal

# Where the terminal is: xterm -geometry +40+40 in openbox's frame, the 6x13 font
FIRST_ROW_Y = 69
TITLE_BAR_Y = 49


async def test_a_command_typed_into_the_terminal_writes_its_file(desktop: Desktop, workspace: Path) -> None:
    before = await desktop.screenshot()
    shot = await run_in_terminal(desktop, "echo typed by the model > typed.txt")
    assert shot.notes == ()
    # the answer shows what the typing did, not the moment before the terminal drew it
    assert changed(before, shot, pointer=(300, 200)) is not None
    assert await file_appears(workspace / "typed.txt") == "typed by the model\n"


async def test_unicode_without_a_keysym_on_the_layout_lands_as_typed(desktop: Desktop, workspace: Path) -> None:
    text = "é ß → 😀 Ж"
    await run_in_terminal(desktop, f"printf '%s\\n' '{text}' > unicode.txt")
    assert await file_appears(workspace / "unicode.txt") == text + "\n"


async def test_key_names_of_every_dialect_and_chords(desktop: Desktop, workspace: Path) -> None:
    # Ctrl+U clears what was typed; Return (xdotool) and ENTER (shouty) both run the line
    await desktop.perform([
        {"type": "click", "x": 300, "y": 200, "button": "left"},
        {"type": "type", "text": "echo wrong > keys.txt"},
        {"type": "keypress", "keys": ["CTRL", "U"]},
        {"type": "type", "text": "echo right > keys.txt"},
        {"type": "keypress", "keys": ["Return"]},
    ])
    assert await file_appears(workspace / "keys.txt") == "right\n"


async def test_drag_selects_and_the_middle_button_pastes_it(desktop: Desktop, workspace: Path) -> None:
    # A line of x's across the terminal, selected by a drag along it; pasted back with the wheel
    # button after "echo ", it becomes the command's argument.
    await run_in_terminal(desktop, "clear; printf 'x%.0s' $(seq 60); echo")
    before = await desktop.screenshot()
    top = FIRST_ROW_Y
    # waited first: a press soon after the last click would count as xterm's double click
    after = await desktop.perform([{"type": "wait"}, {"type": "drag", "path": [
        {"x": 45, "y": top}, {"x": 200, "y": top}, {"x": 330, "y": top}]}])
    box = changed(before, after)
    assert box is not None and box[1] <= top <= box[3], "the dragged text was not highlighted"
    # Two calls, as a model makes them: a paste is asynchronous in X (xterm asks the selection's
    # owner and writes what comes back later), so keys sent in the same breath can reach the
    # shell before the pasted text does. The first call's screenshot waits for the screen to settle.
    await desktop.perform([{"type": "type", "text": "echo "}, {"type": "click", "x": 300, "y": 300, "button": "wheel"}])
    await desktop.perform([{"type": "type", "text": " > dragged.txt"}, {"type": "keypress", "keys": ["ENTER"]}])
    pasted = (await file_appears(workspace / "dragged.txt")).strip()
    assert pasted and set(pasted) == {"x"} and 10 <= len(pasted) <= 60


async def test_double_click_on_the_title_bar_maximizes_the_window(desktop: Desktop) -> None:
    before = await desktop.screenshot()
    corner = (desktop.screen[0] - 20, desktop.screen[1] - 20)
    terminal = image(before).getpixel((300, 200))
    assert image(before).getpixel(corner) != terminal  # the desktop shows there, not the terminal
    after = await desktop.perform([{"type": "double_click", "x": 300, "y": TITLE_BAR_Y}])
    assert image(after).getpixel(corner) == terminal


async def test_scroll_moves_the_terminal_back_and_forth(desktop: Desktop) -> None:
    await run_in_terminal(desktop, "seq 1 400")
    bottom = await desktop.screenshot()
    up = await desktop.perform([{"type": "scroll", "x": 300, "y": 200, "scroll_x": 0, "scroll_y": -500}])
    assert changed(bottom, up, pointer=(300, 200)) is not None
    down = await desktop.perform([{"type": "scroll", "x": 300, "y": 200, "scroll_x": 0, "scroll_y": 500}])
    assert changed(bottom, down, pointer=(300, 200)) is None  # back where it was


async def test_wait_move_and_a_right_click_are_answered(desktop: Desktop) -> None:
    shot = await desktop.perform([
        {"type": "move", "x": 700, "y": 600},
        {"type": "wait"},
        {"type": "click", "x": 900, "y": 650, "button": "right"},  # openbox's menu on the desktop
        {"type": "scroll", "x": 900, "y": 650, "scroll_x": 300, "scroll_y": 0},
        {"type": "screenshot"},
    ])
    assert shot.notes == ()
    assert shot.size == desktop.screen


async def test_a_root_owned_checkout_gets_a_terminal_too(desktop_image_name: str, tmp_path: Path) -> None:
    """As uid 0 (a root-owned checkout, every capability dropped) xterm cannot start a shell
    itself; the helper starts it on a pty that xterm drives, and typing works the same."""
    if os.getuid() != 0:
        pytest.skip("only a root test runner can make a root-owned checkout")
    root_owned = tmp_path / "root-owned"
    root_owned.mkdir()
    desktop = await open_desktop(root_owned, DesktopConfig())
    try:
        await run_in_terminal(desktop, "printf 'typed as uid %s\\n' \"$(id -u)\" > root.txt")
        assert await file_appears(root_owned / "root.txt") == "typed as uid 0\n"
    finally:
        await desktop.close()
