"""Computer actions drawn over the screenshot they applied to: click points, drag paths, scroll
arrows, typed text and keys as labels, each numbered in the order the actions ran.

Everything is in the screenshot's own pixel space (an action's x/y are screenshot pixels for
both computer tools), so one SVG with ``viewBox="0 0 W H"`` lies exactly over the thumbnail
and over the full-size image alike. Sizes scale with the image, so marks read the same at
any size. The text of a label is data for the template, which escapes it like all text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Circle", "Label", "Overlay", "Poly", "describe", "overlay"]


@dataclass(frozen=True)
class Circle:
    cx: float
    cy: float
    r: float
    cls: str


@dataclass(frozen=True)
class Poly:
    """A polyline (``closed=False``) or a filled polygon (an arrowhead)."""

    points: str
    cls: str
    closed: bool = False


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    w: float
    h: float
    text: str
    cls: str

    @property
    def baseline(self) -> float:
        return self.y + self.h * 0.74


@dataclass
class Overlay:
    width: int
    height: int
    font: float
    stroke: float
    shapes: list[Circle | Poly | Label] = field(default_factory=list)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _point(action: dict[str, Any]) -> tuple[float, float] | None:
    x, y = _num(action.get("x")), _num(action.get("y"))
    return (x, y) if x is not None and y is not None else None


def _keys(action: dict[str, Any]) -> str:
    keys = action.get("keys")
    return "+".join(str(k) for k in keys) if isinstance(keys, list) and keys else ""


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(action: dict[str, Any]) -> str:
    """One line for a person: what the action did, where."""
    kind = str(action.get("type"))
    at = _point(action)
    where = f" at ({at[0]:g}, {at[1]:g})" if at else ""
    held = f" holding {_keys(action)}" if kind != "keypress" and _keys(action) else ""
    if kind == "click":
        button = action.get("button") or "left"
        return f"click {button}{where}{held}"
    if kind == "double_click":
        return f"double click{where}{held}"
    if kind == "move":
        return f"move to{where[3:]}{held}"
    if kind == "scroll":
        return f"scroll by ({action.get('scroll_x', 0)}, {action.get('scroll_y', 0)}){where}{held}"
    if kind == "drag":
        path = [p for p in action.get("path") or [] if isinstance(p, dict) and _point(p)]
        if path:
            first, last = _point(path[0]), _point(path[-1])
            assert first is not None and last is not None
            return (f"drag from ({first[0]:g}, {first[1]:g}) to ({last[0]:g}, {last[1]:g}) "
                    f"through {len(path)} points{held}")
        return f"drag{held}"
    if kind == "type":
        return f"type {str(action.get('text', ''))!r}"
    if kind == "keypress":
        return f"press {_keys(action) or '(no keys)'}"
    return kind


def overlay(actions: list[dict[str, Any]], width: int, height: int) -> Overlay:
    """The marks for ``actions`` over a ``width`` × ``height`` screenshot."""
    unit = max(width, height) / 100
    marks = Overlay(width, height, font=2.1 * unit, stroke=0.32 * unit)
    pointer: tuple[float, float] | None = None
    loose = 0  # labels with no pointer to stand by, stacked from the top left

    def label(x: float, y: float, text: str, cls: str) -> None:
        w = 0.62 * marks.font * len(text) + marks.font * 0.8
        h = marks.font * 1.4
        x = min(max(0.0, x), max(0.0, width - w))
        y = min(max(0.0, y), max(0.0, height - h))
        marks.shapes.append(Label(x, y, w, h, text, cls))

    def number(n: int, at: tuple[float, float]) -> None:
        label(at[0] + 1.2 * unit, at[1] - 3.2 * unit, str(n), "num")

    def arrow(start: tuple[float, float], end: tuple[float, float], cls: str) -> None:
        marks.shapes.append(Poly(f"{start[0]:.1f},{start[1]:.1f} {end[0]:.1f},{end[1]:.1f}", cls))
        angle = math.atan2(end[1] - start[1], end[0] - start[0])
        size = 2.2 * unit
        wings = [(end[0] - size * math.cos(angle - s), end[1] - size * math.sin(angle - s))
                 for s in (0.45, -0.45)]
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in [end, *wings])
        marks.shapes.append(Poly(points, cls + " head", closed=True))

    for n, action in enumerate(actions, start=1):
        kind = action.get("type")
        at = _point(action)
        if kind in ("click", "double_click", "move") and at is not None:
            cls = {"click": "click", "double_click": "click", "move": "move"}[str(kind)]
            if kind == "click" and action.get("button") not in (None, "left"):
                cls += " alt"
            marks.shapes.append(Circle(at[0], at[1], 1.6 * unit, cls))
            marks.shapes.append(Circle(at[0], at[1], 0.35 * unit, cls + " dot"))
            if kind == "double_click":
                marks.shapes.append(Circle(at[0], at[1], 2.4 * unit, cls))
            number(n, at)
            pointer = at
        elif kind == "scroll" and at is not None:
            dx, dy = _num(action.get("scroll_x")) or 0.0, _num(action.get("scroll_y")) or 0.0
            length = math.hypot(dx, dy)
            if length:
                reach = min(max(length / 4, 6 * unit), 20 * unit)
                arrow(at, (at[0] + dx / length * reach, at[1] + dy / length * reach), "scroll")
            marks.shapes.append(Circle(at[0], at[1], 0.6 * unit, "scroll dot"))
            number(n, at)
            pointer = at
        elif kind == "drag":
            points = [p for p in (_point(p) for p in action.get("path") or [] if isinstance(p, dict))
                      if p is not None]
            if len(points) >= 2:
                marks.shapes.append(Poly(" ".join(f"{x:.1f},{y:.1f}" for x, y in points[:-1]), "drag"))
                arrow(points[-2], points[-1], "drag")
                marks.shapes.append(Circle(points[0][0], points[0][1], 0.8 * unit, "drag dot"))
                number(n, points[0])
                pointer = points[-1]
        elif kind in ("type", "keypress"):
            text = (f"{n} type {_clip(str(action.get('text', '')))}" if kind == "type"
                    else f"{n} keys {_keys(action) or '?'}")
            if pointer is not None:
                label(pointer[0] + 2.2 * unit, pointer[1] + 1.4 * unit, text, str(kind))
                pointer = (pointer[0], pointer[1] + 3.4 * unit)  # the next label goes below
            else:
                label(unit, unit + loose * 3.4 * unit, text, str(kind))
                loose += 1
    return marks
