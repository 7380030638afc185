"""The issue's classes of input beyond its quoted examples, on a real desktop: every key dialect
in both tool shapes (checked through the bytes xterm sends for them, written by ``cat``), every
button, long drag paths, scrolls both ways on both axes, text the US layout has no keys for,
coordinates at and beyond the edges, oversized batches, and an X server or window manager
killed between two calls. Each bad input is a clear note and the session lives on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from openai.types.responses import ResponseComputerToolCall

from sandbox.computer.actions import call_actions
from sandbox.desktop import Desktop
from sandbox.desktop.placement import MAX_ACTIONS, MAX_STEPS, MAX_WAIT_S
from tests.desktop.conftest import file_appears, run_in_terminal


async def _still_works(desktop: Desktop, workspace: Path, name: str) -> None:
    shot = await run_in_terminal(desktop, f"echo alive > {name}")
    assert shot.notes == ()
    assert await file_appears(workspace / name) == "alive\n"


def _preview(action: dict[str, Any]) -> list[Any]:
    """The actions of a ``computer_use_preview`` call (one ``action``), as the SDK parses it."""
    call = ResponseComputerToolCall.model_validate({
        "type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
        "pending_safety_checks": [], "action": action})
    return list(call_actions(call))


async def _cat_into(desktop: Desktop, name: str) -> None:
    shot = await run_in_terminal(desktop, f"stty -echo; cat > {name}; stty echo")
    assert shot.notes == ()


async def _end_cat(desktop: Desktop) -> None:
    shot = await desktop.perform([{"type": "keypress", "keys": ["ENTER"]}, {"type": "keypress", "keys": ["ctrl", "d"]}])
    assert shot.notes == ()


# key name as a model sends it -> what xterm sends for it (after Ctrl+V, so the tty keeps it)
_QUOTED_KEYS: dict[str, tuple[bytes, ...]] = {
    "ESC": (b"\x1b",), "Escape": (b"\x1b",), "TAB": (b"\t",), "SPACE": (b" ",),
    "BACKSPACE": (b"\x7f", b"\x08"), "DELETE": (b"\x1b[3~",), "INSERT": (b"\x1b[2~",),
    "ArrowUp": (b"\x1b[A", b"\x1bOA"), "UP": (b"\x1b[A", b"\x1bOA"), "DOWN": (b"\x1b[B", b"\x1bOB"),
    "LEFT": (b"\x1b[D", b"\x1bOD"), "ArrowRight": (b"\x1b[C", b"\x1bOC"),
    "PAGEUP": (b"\x1b[5~",), "PageDown": (b"\x1b[6~",), "PGDN": (b"\x1b[6~",),
    "HOME": (b"\x1b[H", b"\x1bOH", b"\x1b[1~"), "END": (b"\x1b[F", b"\x1bOF", b"\x1b[4~"),
    "F1": (b"\x1bOP",), "F4": (b"\x1bOS",), "F5": (b"\x1b[15~",), "F12": (b"\x1b[24~",),
}


async def test_every_key_dialect_in_the_ga_shape_reaches_the_application(desktop: Desktop, workspace: Path) -> None:
    await _cat_into(desktop, "keys.bin")
    actions: list[dict[str, Any]] = []
    for name in _QUOTED_KEYS:
        actions += [{"type": "keypress", "keys": ["CTRL", "V"]}, {"type": "keypress", "keys": [name]},
                    {"type": "keypress", "keys": ["Return"]}]
    # control chords in every spelling, Shift chords, three-key chords
    actions += [{"type": "keypress", "keys": ["Control", "v"]}, {"type": "keypress", "keys": ["ctrl", "a"]},
                {"type": "keypress", "keys": ["CONTROL", "V"]}, {"type": "keypress", "keys": ["Ctrl", "B"]},
                {"type": "keypress", "keys": ["SHIFT", "q"]}, {"type": "keypress", "keys": ["shift", "1"]},
                {"type": "keypress", "keys": ["CTRL+V"]}, {"type": "keypress", "keys": ["CTRL", "SHIFT", "TAB"]},
                {"type": "keypress", "keys": ["ENTER"]}]
    shot = await desktop.perform(actions)
    assert shot.notes == ()
    await _end_cat(desktop)
    lines = (await _bytes_appear(workspace / "keys.bin", len(_QUOTED_KEYS) + 2)).split(b"\n")
    for (name, expected), got in zip(_QUOTED_KEYS.items(), lines, strict=False):
        assert got in expected, (name, got)
    chords = lines[len(_QUOTED_KEYS)]
    assert chords.startswith(b"\x01\x02Q!"), chords


async def _bytes_appear(path: Path, lines: int, timeout: float = 10.0) -> bytes:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= lines:
            return path.read_bytes()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name}: {path.read_bytes() if path.exists() else b'missing'}")


async def test_the_preview_shape_one_action_per_call(desktop: Desktop, workspace: Path) -> None:
    for action in ({"type": "click", "x": 300, "y": 200, "button": "left"}, {"type": "keypress", "keys": ["ESC"]},
                   {"type": "keypress", "keys": ["ctrl", "u"]}, {"type": "type", "text": "echo preview > preview.txt"},
                   {"type": "keypress", "keys": ["ENTER"]}):
        shot = await desktop.perform(_preview(action))
        assert shot.notes == ()
    assert await file_appears(workspace / "preview.txt") == "preview\n"
    for action in ({"type": "wait"}, {"type": "screenshot"}, {"type": "move", "x": 5, "y": 5},
                   {"type": "keypress", "keys": ["META"]}, {"type": "keypress", "keys": ["SUPER"]},
                   {"type": "keypress", "keys": ["CMD"]}, {"type": "keypress", "keys": ["WIN"]},
                   {"type": "keypress", "keys": ["ALT"]}, {"type": "keypress", "keys": ["SHIFT"]},
                   {"type": "scroll", "x": 600, "y": 400, "scroll_x": -300, "scroll_y": -200},
                   {"type": "drag", "path": [{"x": 1000, "y": 600}, {"x": 1100, "y": 700}]}):
        shot = await desktop.perform(_preview(action))
        assert shot.notes == (), action
    await _still_works(desktop, workspace, "after-preview.txt")


async def test_text_with_tabs_newlines_and_no_keys_on_the_layout(desktop: Desktop, workspace: Path) -> None:
    # more distinct characters than the layout has spare keycodes: spares are mapped again
    cjk = "".join(chr(0x4E00 + i) for i in range(300))
    text = f"a\tb\nçà 漢字かな 👍🏽 e\u0301 n\u0303 ¿¡ Ωω\n{cjk}\n"
    await run_in_terminal(desktop, "cat > typed.txt")
    shot = await desktop.perform([{"type": "type", "text": text}])
    assert shot.notes == ()
    await desktop.perform([{"type": "keypress", "keys": ["ctrl", "d"]}])
    assert await file_appears(workspace / "typed.txt", timeout=20) == text


async def test_every_button_a_long_drag_and_scrolls_both_ways(desktop: Desktop, workspace: Path) -> None:
    path = [{"x": 600 + (i % 50) * 4, "y": 300 + i // 50 * 10} for i in range(500)]
    shot = await desktop.perform([
        *({"type": "click", "x": 1000, "y": 650, "button": b} for b in ("left", "wheel", "back", "forward")),
        {"type": "click", "x": 1000, "y": 650, "button": "right"},  # openbox's menu ...
        {"type": "keypress", "keys": ["Escape"]},                    # ... closed again
        {"type": "drag", "path": path},
        {"type": "scroll", "x": 300, "y": 200, "scroll_x": -250, "scroll_y": -300},
        {"type": "scroll", "x": 300, "y": 200, "scroll_x": 250, "scroll_y": 300},
        {"type": "double_click", "x": 1200, "y": 700},
    ])
    assert shot.notes == ()
    # The batch's Escape can reach openbox before its menu (right button) is mapped on a busy
    # machine; a menu left open holds the keyboard. Once the screen has settled it is on show:
    # closed here, as a model seeing it in the screenshot would.
    await desktop.perform([{"type": "keypress", "keys": ["Escape"]}, {"type": "keypress", "keys": ["Escape"]}])
    await _still_works(desktop, workspace, "after-buttons.txt")


async def test_coordinates_on_at_and_beyond_the_edges(desktop: Desktop, workspace: Path) -> None:
    w, h = desktop.screen
    on_edge = await desktop.perform([{"type": "move", "x": 0, "y": 0}, {"type": "move", "x": w - 1, "y": h - 1},
                                     {"type": "click", "x": w - 1, "y": h - 1, "button": "left"}])
    assert on_edge.notes == ()
    for x, y in ((-1, 10), (10, -5), (w, 0), (0, h), (-100000, 10**9)):
        shot = await desktop.perform([{"type": "click", "x": x, "y": y, "button": "left"}])
        assert shot.notes == (f"action 1 not run: ({x}, {y}) is outside the {w}x{h} display",)
    fraction = await desktop.perform([{"type": "move", "x": 10.5, "y": 3}])
    assert len(fraction.notes) == 1 and fraction.notes[0].startswith("action 1 not run: malformed move action (x:")
    drag = await desktop.perform([{"type": "drag", "path": [{"x": 10, "y": 10}, {"x": w + 1, "y": 10}]}])
    assert drag.notes == (f"action 1 not run: ({w + 1}, 10) is outside the {w}x{h} display",)
    await _still_works(desktop, workspace, "after-edges.txt")


async def test_malformed_and_oversized_batches_are_clear_notes(desktop: Desktop, workspace: Path) -> None:
    cases: list[tuple[list[Any], str]] = [
        ([{"type": "click"}], "action 1 not run: malformed click action (button: Field required; x: Field"),
        (["click"], "action 1 not run: not an action object"),
        ([{"type": "keypress", "keys": []}], "action 1 not run: empty key chord"),
        ([{"type": "keypress", "keys": ["CTRL", "HYPER_X"]}], "action 1 not run: unknown key name 'HYPER_X'"),
        ([{"type": "scroll", "x": 5, "y": 5, "scroll_x": 0, "scroll_y": 10**9}], "action 1 not run: scroll"),
        ([{"type": "drag", "path": [{"x": i % 1000, "y": 5} for i in range(100_000)]}], "action 1 not run: drag"),
        ([{"type": "move", "x": 7, "y": 7}] * (MAX_ACTIONS + 5),
         f"action {MAX_ACTIONS + 1} not run: a call may carry {MAX_ACTIONS} actions"),
        ([{"type": "wait"}] * (MAX_ACTIONS + 5),
         f"action {int(MAX_WAIT_S) + 1} not run: wait would bring the call's waiting to"),
    ]
    for actions, note in cases:
        shot = await desktop.perform(actions)
        assert len(shot.notes) == 1 and shot.notes[0].startswith(note), shot.notes
    # many actions, each within bounds, whose steps together are too many
    # (over the terminal: a wheel on the bare desktop is openbox's switch to the next desktop)
    many = [{"type": "scroll", "x": 300, "y": 200, "scroll_x": 0, "scroll_y": 9000}] * (MAX_ACTIONS - 1)
    shot = await desktop.perform(many)
    assert len(shot.notes) == 1 and f"one call may play {MAX_STEPS} input events" in shot.notes[0], shot.notes
    await _still_works(desktop, workspace, "after-oversized.txt")


async def test_an_x_server_killed_between_calls_is_restarted_and_told(desktop: Desktop, workspace: Path) -> None:
    killed = await desktop.session.run("pkill -KILL -x Xvfb; echo $?")
    assert killed.stdout.text.strip() == "0"
    await asyncio.sleep(0.3)
    shot = await desktop.perform([{"type": "screenshot"}])
    assert shot.notes == ("the desktop X server died; it was restarted on a fresh display (its open windows and "
                          "anything unsaved in them are gone)",)
    await _still_works(desktop, workspace, "after-x.txt")


async def test_x_and_window_manager_killed_together_between_calls(desktop: Desktop, workspace: Path) -> None:
    await desktop.session.run("pkill -KILL -x openbox; pkill -KILL -x Xvfb")
    await asyncio.sleep(0.3)
    shot = await run_in_terminal(desktop, "echo back > both.txt")
    assert len(shot.notes) == 1 and "X server died" in shot.notes[0], shot.notes
    assert await file_appears(workspace / "both.txt") == "back\n"
    # and the window manager alone, twice in a row
    for name in ("wm1.txt", "wm2.txt"):
        await desktop.session.run("pkill -KILL -x openbox")
        await asyncio.sleep(0.2)
        shot = await desktop.perform([{"type": "wait"}])
        assert len(shot.notes) == 1 and "window manager died" in shot.notes[0], shot.notes
        await _still_works(desktop, workspace, name)


async def test_control_characters_and_a_lone_surrogate_in_typed_text(desktop: Desktop, workspace: Path) -> None:
    # JSON may carry a lone surrogate ("\ud800"); NUL, ESC and DEL are characters a model may send
    for text in ("a\ud800b", "x\x00\x1b\x7fy"):
        shot = await desktop.perform([{"type": "type", "text": text}, {"type": "keypress", "keys": ["ctrl", "u"]}])
        assert all("not run" in note or "failed" in note for note in shot.notes), shot.notes
    await _still_works(desktop, workspace, "after-control.txt")
