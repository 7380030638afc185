"""The action vocabulary of both computer tools, read and checked before anything runs.

The GA ``computer`` tool sends a batch (``actions``), ``computer_use_preview`` one ``action``;
both are the same nine kinds (click with any of five buttons, double_click, drag along a path,
move, scroll on both axes, type, keypress, wait, screenshot), validated here against the SDK's
GA models whichever shape they came in, as models or as plain dicts. :func:`validate` turns a
batch into the actions that may run and, for the first that may not (unknown type, malformed,
off the display, an unknown key name), the note that says why: the actions before it still
run, as the model asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openai.types.responses import ResponseComputerToolCall
from openai.types.responses import computer_action as ca
from pydantic import BaseModel, ValidationError

from sandbox.computer import keys, notes
from sandbox.computer.screen import Size
from sandloop.errors import UnknownKey

__all__ = [
    "Action",
    "ActionLike",
    "ActionRefused",
    "Batch",
    "call_actions",
    "check_bounds",
    "chord",
    "moves_content",
    "parse_action",
    "points",
    "validate",
]

#: An action as it arrives: the SDK's model (either tool's) or its JSON.
ActionLike = BaseModel | Mapping[str, Any]
Action = ca.Click | ca.DoubleClick | ca.Drag | ca.Move | ca.Scroll | ca.Keypress | ca.Type | ca.Wait | ca.Screenshot

_ACTIONS: dict[str, type[Action]] = {
    "click": ca.Click,
    "double_click": ca.DoubleClick,
    "drag": ca.Drag,
    "move": ca.Move,
    "scroll": ca.Scroll,
    "keypress": ca.Keypress,
    "type": ca.Type,
    "wait": ca.Wait,
    "screenshot": ca.Screenshot,
}


class ActionRefused(Exception):
    """An action that cannot run as given; the message goes to the notes."""


def call_actions(call: ResponseComputerToolCall) -> Sequence[ActionLike]:
    """The actions of a computer_call in either shape: the GA batch, or the preview's one."""
    if call.actions is not None:
        return call.actions
    return [call.action] if call.action is not None else []


def parse_action(raw: ActionLike) -> Action:
    if not isinstance(raw, BaseModel | Mapping):  # JSON from elsewhere may be anything
        raise ActionRefused("not an action object")
    data = raw.model_dump(exclude_none=True) if isinstance(raw, BaseModel) else dict(raw)
    kind = data.get("type")
    cls = _ACTIONS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ActionRefused(f"unknown action type {kind!r}")
    try:
        action = cls.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'action'}: {err['msg']}" for err in exc.errors()
        )
        raise ActionRefused(f"malformed {kind} action ({problems})") from None
    if isinstance(action, ca.Drag) and not action.path:
        raise ActionRefused("drag action has an empty path")
    return action


def points(action: Action) -> list[tuple[int, int]]:
    """Where on the display the action points (display coordinates)."""
    if isinstance(action, ca.Drag):
        return [(p.x, p.y) for p in action.path]
    if isinstance(action, ca.Click | ca.DoubleClick | ca.Move | ca.Scroll):
        return [(action.x, action.y)]
    return []


def check_bounds(action: Action, display: Size) -> None:
    width, height = display
    for x, y in points(action):
        if not (0 <= x < width and 0 <= y < height):
            raise ActionRefused(f"({x}, {y}) is outside the {width}x{height} display")


def chord(names: Sequence[str]) -> list[str]:
    """The canonical key names of a chord (:func:`sandbox.computer.keys.chord`), or ActionRefused."""
    try:
        return keys.chord(names)
    except UnknownKey as exc:
        raise ActionRefused(str(exc)) from None


def _check_keys(action: Action) -> None:
    if isinstance(action, ca.Keypress):
        chord(action.keys)
    elif not isinstance(action, ca.Type | ca.Wait | ca.Screenshot) and action.keys:
        chord(action.keys)  # held for the duration of a mouse action


def moves_content(action: Action) -> bool:
    """Whether the action moves what is on screen (so a capture waits a frame for it to land)."""
    return isinstance(action, ca.Scroll | ca.Drag)


@dataclass(frozen=True)
class Batch:
    """A batch as it may run: the actions up to the first that cannot, and the note for that one."""

    actions: tuple[Action, ...]
    total: int
    refused: str | None = None

    def failed(self, index: int, why: str) -> str:
        """The note for action ``index`` (1-based) that was tried and failed."""
        return notes.failed(index, self.total, why)


def validate(raw: Sequence[ActionLike], display: Size) -> Batch:
    """Every action parsed and checked against ``display`` (its points) and the key table."""
    actions: list[Action] = []
    for index, item in enumerate(raw, 1):
        try:
            action = parse_action(item)
            check_bounds(action, display)
            _check_keys(action)
        except ActionRefused as refused:
            return Batch(tuple(actions), len(raw), notes.not_run(index, len(raw), str(refused)))
        actions.append(action)
    return Batch(tuple(actions), len(raw))
