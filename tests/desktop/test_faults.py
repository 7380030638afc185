"""What cannot run is a clear note beside a screenshot, and the desktop stays usable; an X server
or a window manager that dies is restarted and the model is told."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sandbox.desktop import Desktop
from sandbox.desktop.placement import MAX_TYPED_CHARS, NO_ACTIONS
from tests.desktop.conftest import file_appears, run_in_terminal


async def _still_works(desktop: Desktop, workspace: Path, name: str) -> None:
    shot = await run_in_terminal(desktop, f"echo alive > {name}")
    assert shot.notes == ()
    assert await file_appears(workspace / name) == "alive\n"


async def test_bad_inputs_are_notes_and_the_session_lives_on(desktop: Desktop, workspace: Path) -> None:
    off = await desktop.perform([{"type": "click", "x": 5000, "y": 10, "button": "left"}])
    assert off.notes == ("action 1 not run: (5000, 10) is outside the 1280x800 display",)
    key = await desktop.perform([{"type": "move", "x": 1, "y": 1}, {"type": "keypress", "keys": ["HYPERSPACE"]}])
    assert key.notes == ("action 2 not run: unknown key name 'HYPERSPACE'",)
    huge = await desktop.perform([{"type": "type", "text": "x" * (1 << 20)}, {"type": "wait"}])
    assert huge.notes == (f"action 1 not run: type text of {1 << 20} characters; one action may type "
                          f"{MAX_TYPED_CHARS}; actions 2..2 were not run either",)
    empty = await desktop.perform([])
    assert empty.notes == (NO_ACTIONS,)
    bad = await desktop.perform([{"type": "teleport"}])
    assert bad.notes == ("action 1 not run: unknown action type 'teleport'",)
    await _still_works(desktop, workspace, "after-bad.txt")


async def test_an_x_server_killed_mid_batch_is_answered_restarted_and_told(desktop: Desktop, workspace: Path) -> None:
    batch = asyncio.ensure_future(desktop.perform([
        {"type": "wait"}, {"type": "wait"}, {"type": "type", "text": "echo lost"},
        {"type": "keypress", "keys": ["ENTER"]},
    ]))
    await asyncio.sleep(0.5)  # into the first wait
    killed = await desktop.session.run("pkill -KILL -x Xvfb; echo $?")
    assert killed.stdout.text.strip() == "0"
    shot = await batch
    assert any("the desktop died during action" in note for note in shot.notes), shot.notes
    assert any("X server died; it was restarted on a fresh display" in note for note in shot.notes), shot.notes
    await _still_works(desktop, workspace, "after-x.txt")


async def test_a_dead_window_manager_is_restarted_and_the_next_output_says_so(desktop: Desktop,
                                                                             workspace: Path) -> None:
    await desktop.session.run("pkill -KILL -x openbox")
    await asyncio.sleep(0.2)
    shot = await desktop.screenshot()
    assert shot.notes == ("the desktop window manager died; it was restarted on the same display (no windows are "
                          "gone)",)
    await _still_works(desktop, workspace, "after-wm.txt")
