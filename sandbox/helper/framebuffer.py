"""Xvfb's screen as the helper reads it: the file Xvfb keeps its framebuffer in (``-fbdir``,
XWD format), mapped, and a PNG encoder for its pixels. Standard library only (shipped with the
helper): the capture costs a copy of memory and one encoding, no X round trip.
"""

from __future__ import annotations

import mmap
import struct
import zlib

from sandbox.helper.wire import OpError

__all__ = ["Framebuffer", "encode_png"]


def encode_png(pixels: bytes, width: int, height: int, stride: int) -> bytes:
    """X's 32-bit BGRX pixels (``stride`` bytes a row) as an RGB PNG: strided copies in C, one
    filter byte per row, zlib at its fastest level (speed over a few % of size)."""
    row = width * 3
    out = bytearray((row + 1) * height)
    if stride == width * 4:
        rgb = bytearray(row * height)
        rgb[0::3], rgb[1::3], rgb[2::3] = pixels[2::4], pixels[1::4], pixels[0::4]
        view = memoryview(rgb)
        for y in range(height):
            start = y * (row + 1) + 1
            out[start:start + row] = view[y * row:(y + 1) * row]
    else:
        for y in range(height):
            line = pixels[y * stride:y * stride + width * 4]
            start = y * (row + 1) + 1
            out[start:start + row:3], out[start + 1:start + row:3], out[start + 2:start + row:3] = (
                line[2::4], line[1::4], line[0::4])

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(out, 1)) + chunk(b"IEND", b"")


class Framebuffer:
    """Xvfb's screen file, mapped: the pixels as they are now, without asking the server."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        fields = struct.unpack_from(">25I", self._map, 0)
        header_size, ncolors = fields[0], fields[19]
        self.width, self.height, self.stride = fields[4], fields[5], fields[12]
        if fields[11] != 32 or fields[7] != 0:  # bits per pixel, byte order (LSBFirst)
            raise OpError("internal", f"desktop: unexpected framebuffer format {fields[11]} bpp")
        self._start = header_size + ncolors * 12
        self._end = self._start + self.stride * self.height

    def pixels(self) -> bytes:
        return self._map[self._start:self._end]

    def close(self) -> None:
        self._map.close()
