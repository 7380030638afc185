"""The Agents SDK's ComputerTool over the desktop: the adapter names it as the SDK can ("ubuntu"),
and the SDK's one-call-per-action interface drives the real terminal."""

from __future__ import annotations

from pathlib import Path

from executor.agents_sdk.computer import SandboxComputer
from sandbox.desktop import Desktop
from tests.desktop.conftest import file_appears


async def test_the_sdk_computer_types_into_the_desktop(desktop: Desktop, workspace: Path) -> None:
    computer = SandboxComputer(desktop)
    assert computer.environment == "ubuntu" and computer.dimensions == (1280, 800)
    await computer.click(300, 200, "left")
    await computer.type("echo through the sdk > sdk.txt")
    await computer.keypress(["ENTER"])
    assert await computer.screenshot()  # the queued actions run here, as one batch
    assert await file_appears(workspace / "sdk.txt") == "through the sdk\n"
