"""The helper's own PNG encoder and its desktop request's validation: what a capture is made of,
checked against PIL's decoder, and what a malformed request is answered with."""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from sandbox.helper import wire
from sandbox.helper.desktop import keysym_for
from sandbox.helper.framebuffer import encode_png


@pytest.mark.parametrize("pad", [0, 12])  # rows exactly 4 x width, or padded
def test_x_pixels_become_the_same_rgb_png(pad: int) -> None:
    width, height = 37, 11
    stride = width * 4 + pad
    pixels = bytearray(os.urandom(stride * height))
    png = encode_png(bytes(pixels), width, height, stride)
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == (width, height) and image.mode == "RGB"
        for y in range(height):
            for x in range(width):
                b, g, r = pixels[y * stride + 4 * x:y * stride + 4 * x + 3]
                assert image.getpixel((x, y)) == (r, g, b)


def test_every_character_has_a_keysym() -> None:
    names = {"Return": 0xFF0D, "space": 0x20}
    assert keysym_for("Enter", names.get) == 0xFF0D and keysym_for("Space", names.get) == 0x20
    assert keysym_for("a", names.get) == ord("a") and keysym_for("é", names.get) == 0xE9  # Latin-1: itself
    assert keysym_for("→", names.get) == 0x01000000 + ord("→")
    assert keysym_for("😀", names.get) == 0x01000000 + 0x1F600
    assert keysym_for("\n", names.get) == 0xFF0D
    with pytest.raises(wire.OpError):
        keysym_for("NotAKey", names.get)


@pytest.mark.parametrize(("fields", "field"), [
    ({"steps": "click", "settle_s": 1, "size": [1280, 800], "env": {}}, "steps"),
    ({"steps": [["move", 1, 2]], "settle_s": 1, "size": [1280, 800], "env": {}}, "steps"),
    ({"steps": [], "settle_s": -1, "size": [1280, 800], "env": {}}, "settle_s"),
    ({"steps": [], "settle_s": 1, "size": [1280], "env": {}}, "size"),
    ({"steps": [], "settle_s": 1, "size": [99999, 800], "env": {}}, "size"),
    ({"steps": [], "settle_s": 1, "size": [1280, 800], "env": {"A=B": "x"}}, "env"),
])
def test_a_malformed_desktop_request_is_a_bad_request(fields: dict[str, object], field: str) -> None:
    with pytest.raises(wire.OpError) as refused:
        wire.parse_request({"id": 1, "op": "desktop", **fields})
    assert refused.value.kind == "bad_request" and repr(field) in str(refused.value)
