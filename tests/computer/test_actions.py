"""Both tools' action shapes, read and checked before anything runs: what may run, and the one
note for the first action that may not."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import ResponseComputerToolCall
from openai.types.responses import computer_action as ca

from sandbox.computer.actions import ActionRefused, call_actions, parse_action, validate

DISPLAY = (1280, 800)


def _call(**fields: Any) -> ResponseComputerToolCall:
    return ResponseComputerToolCall.model_validate({
        "type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
        "pending_safety_checks": [], **fields})


def test_the_ga_batch_and_the_preview_action_read_alike() -> None:
    click = {"type": "click", "button": "back", "x": 5, "y": 6, "keys": ["CTRL"]}
    batch = call_actions(_call(actions=[click, {"type": "type", "text": "hi"}]))
    single = call_actions(_call(action=click))
    assert [parse_action(a) for a in single] == [parse_action(batch[0])] == [ca.Click.model_validate(click)]
    assert call_actions(_call()) == []


@pytest.mark.parametrize(("raw", "why"), [
    ({"type": "hover", "x": 1, "y": 1}, "unknown action type 'hover'"),
    ({"type": "click", "x": 1}, "malformed click action (button: Field required; y: Field required)"),
    ({"type": "drag", "path": []}, "drag action has an empty path"),
    ({"type": "scroll", "x": 1280, "y": 0, "scroll_x": 0, "scroll_y": 10}, "(1280, 0) is outside the 1280x800 display"),
    ({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 3, "y": 900}]}, "(3, 900) is outside the 1280x800 display"),
    ({"type": "keypress", "keys": ["CTRL", "HYPER"]}, "unknown key name 'HYPER'"),
    ({"type": "move", "x": 1, "y": 1, "keys": ["NOPE"]}, "unknown key name 'NOPE'"),
])
def test_the_first_action_that_cannot_run_ends_the_batch_with_a_note(raw: dict[str, Any], why: str) -> None:
    wait, shot = {"type": "wait"}, {"type": "screenshot"}
    batch = validate([wait, raw, shot, wait], DISPLAY)
    assert batch.actions == (ca.Wait(type="wait"),)  # the one before it still runs
    assert batch.refused == f"action 2 not run: {why}; actions 3..4 were not run either"
    alone = validate([raw], DISPLAY)
    assert alone.actions == () and alone.refused == f"action 1 not run: {why}"


def test_parsing_refuses_what_no_tool_sends() -> None:
    with pytest.raises(ActionRefused, match="unknown action type None"):
        parse_action({"x": 1})


def test_a_valid_batch_runs_whole_and_failures_name_the_rest() -> None:
    raw = [{"type": "click", "button": "left", "x": 0, "y": 0}, {"type": "keypress", "keys": ["ctrl+a"]},
           {"type": "double_click", "x": 1279, "y": 799}]
    batch = validate(raw, DISPLAY)
    assert len(batch.actions) == 3 and batch.refused is None
    assert batch.failed(1, "boom") == "action 1 failed: boom; actions 2..3 were not run either"
    assert batch.failed(3, "boom") == "action 3 failed: boom"
    # the declared display decides the bounds, not the screen behind it
    assert validate(raw, (640, 400)).refused == "action 3 not run: (1279, 799) is outside the 640x400 display"
