"""A real desktop per test: the desktop image (built on first use), a hardened container, Xvfb,
openbox and xterm inside it, driven through the helper. Nothing of X is faked."""

from __future__ import annotations

import asyncio
import io
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops

from sandbox.computer.screen import Screenshot
from sandbox.desktop import Desktop, DesktopConfig, open_desktop
from sandbox.desktop.placement import desktop_image

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def desktop_image_name(docker_client: Any) -> str:
    return desktop_image()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "repo"
    ws.mkdir()
    os.chown(ws, 1000, 1000)  # a user's checkout: the container runs as its owner
    return ws


@pytest.fixture
async def desktop(desktop_image_name: str, workspace: Path) -> AsyncIterator[Desktop]:
    computer = await open_desktop(workspace, DesktopConfig())
    try:
        yield computer
    finally:
        await computer.close()


def image(shot: Screenshot) -> Image.Image:
    return Image.open(io.BytesIO(shot.png)).convert("RGB")


def changed(before: Screenshot, after: Screenshot, *, pointer: tuple[int, int] | None = None
            ) -> tuple[int, int, int, int] | None:
    """The box where two screenshots differ (None: identical), leaving out the pointer's own
    picture around ``pointer`` (the screen shows it, and its shape follows what is under it)."""
    diff = ImageChops.difference(image(before), image(after))
    if pointer is not None:
        x, y = pointer
        diff.paste((0, 0, 0), (x - 16, y - 16, x + 24, y + 24))
    return diff.getbbox()


async def file_appears(path: Path, timeout: float = 10.0) -> str:
    """The file's text once a command in the desktop wrote it (and finished writing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").endswith("\n"):
            return path.read_text()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path.name} never appeared")


async def run_in_terminal(desktop: Desktop, command: str) -> Screenshot:
    """Click into the terminal, type the command and press Enter: one batch."""
    return await desktop.perform([
        {"type": "click", "x": 300, "y": 200, "button": "left"},
        {"type": "type", "text": command},
        {"type": "keypress", "keys": ["ENTER"]},
    ])
