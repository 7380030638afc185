"""The capture fitted to the declared display; the display the model's coordinates are in."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from sandbox.computer.screen import Screenshot, declared, fitted, png_size, scale


def _png(size: tuple[int, int], colour: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


async def test_a_capture_is_fitted_to_the_display() -> None:
    png = _png((1280, 800))
    assert await fitted(png, (1280, 800)) is png  # already the size: not decoded, not copied
    smaller = await fitted(png, (640, 400))
    assert png_size(smaller) == (640, 400)
    with Image.open(io.BytesIO(smaller)) as image:
        assert image.format == "PNG" and image.convert("RGB").getpixel((320, 200)) == (255, 0, 0)


def test_the_declared_display_or_the_screen() -> None:
    assert declared(None, (1280, 800)) == (1280, 800)
    assert declared((1024, 768), (1280, 800)) == (1024, 768)
    with pytest.raises(ValueError, match="must be positive"):
        declared((0, 768), (1280, 800))
    assert scale((1280, 800), (640, 200)) == (2.0, 4.0)


def test_a_screenshot_is_a_data_url() -> None:
    shot = Screenshot(png=b"\x89PNG", size=(1, 1))
    assert shot.data_url == "data:image/png;base64,iVBORw==" and shot.url == "" and shot.notes == ()
