"""The screen a computer shows the model: its size, and one capture fitted to the declared display.

The model's coordinates are in the display the tool declared (the preview tool's
``display_width`` × ``display_height``; the GA tool declares none and gets the screen's own size).
A placement captures at its screen's size; :func:`fitted` scales that capture to the display, and
:func:`scale` scales the model's coordinates back to the screen.
"""

from __future__ import annotations

import asyncio
import base64
import io
from dataclasses import dataclass

from PIL import Image

__all__ = ["Screenshot", "Size", "declared", "fitted", "png_size", "resize", "scale"]

#: (width, height) in pixels
Size = tuple[int, int]


@dataclass(frozen=True)
class Screenshot:
    """One capture, already sized to the display the tool declared, and what the model must also
    hear about the actions before it (an action that did not run, a restart)."""

    png: bytes
    size: Size
    #: where the screen is, for the log and the safety checks: the page's URL ("" where none)
    url: str = ""
    notes: tuple[str, ...] = ()

    @property
    def data_url(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


def declared(display: Size | None, screen: Size) -> Size:
    """The display the model's coordinates are in: the declared one, else the screen's own."""
    display = display or screen
    if display[0] <= 0 or display[1] <= 0:
        raise ValueError(f"display size must be positive, got {display}")
    return display


def scale(screen: Size, display: Size) -> tuple[float, float]:
    """Screen pixels per display pixel, on each axis."""
    return screen[0] / display[0], screen[1] / display[1]


def png_size(png: bytes) -> Size:
    with Image.open(io.BytesIO(png)) as image:  # reads the header, decodes nothing
        return image.size


def resize(png: bytes, display: Size) -> bytes:
    """The capture at exactly the display size (the model's coordinate space)."""
    with Image.open(io.BytesIO(png)) as image:
        resized = image.convert("RGB").resize(display, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    resized.save(out, format="PNG", compress_level=1)  # speed over a few % of size
    return out.getvalue()


async def fitted(png: bytes, display: Size) -> bytes:
    """``png`` at the display size; a header read when it already is (only a real resize is worth
    a thread)."""
    if png_size(png) == display:
        return png
    return await asyncio.to_thread(resize, png, display)
