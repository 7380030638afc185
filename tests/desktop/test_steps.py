"""The recorder that turns a batch into the helper's steps: what each action becomes (the
shared perform_action drives it exactly as it drives a page)."""

from __future__ import annotations

from sandbox.computer.actions import validate
from sandbox.computer.input import perform_action
from sandbox.desktop.steps import WHEEL_PX, StepRecorder


async def _steps(action: dict[str, object]) -> list[list[object]]:
    recorder = StepRecorder()
    batch = validate([action], (1280, 800))
    assert batch.refused is None
    recorder.index = 1
    await perform_action(recorder, batch.actions[0], (1.0, 1.0), wait_s=0)
    return recorder.steps


async def test_scroll_on_both_axes_is_wheel_buttons() -> None:
    steps = await _steps({"type": "scroll", "x": 10, "y": 20, "scroll_x": -2 * WHEEL_PX, "scroll_y": 3 * WHEEL_PX})
    buttons = [s[2] for s in steps if s[1] == "button" and s[3]]
    assert buttons == [5, 5, 5, 6, 6]
    assert steps[0] == [1, "move", 10, 20]


async def test_a_drag_walks_its_whole_path_with_the_button_held() -> None:
    steps = await _steps({"type": "drag", "path": [{"x": 0, "y": 0}, {"x": 100, "y": 0}, {"x": 100, "y": 50}]})
    kinds = [s[1] for s in steps]
    assert kinds[1] == "button" and steps[1][3] is True and steps[-1] == [1, "button", 1, False]
    moves = [(s[2], s[3]) for s in steps if s[1] == "move"]
    assert moves[0] == (0, 0) and moves[-1] == (100, 50) and (50, 0) in moves and len(moves) > 5


async def test_modifiers_are_held_around_a_click_and_every_button_has_its_number() -> None:
    steps = await _steps({"type": "click", "x": 1, "y": 2, "button": "back", "keys": ["SHIFT"]})
    assert steps == [[1, "key", "Shift", True], [1, "move", 1, 2], [1, "button", 8, True], [1, "button", 8, False],
                     [1, "key", "Shift", False]]
