"""A policy with ``[computer] environment = "desktop"`` is enough: ``sandloop run``, ``sandloop
mcp`` and ``open_run`` drive a real desktop under it without ``--desktop`` (the terminal on it
writes into the checkout), and a browser asked for under it is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from executor import open_run
from executor.cli import main
from executor.testing import FakeResponsesServer, ScriptedModel, computer_call, message, shell_call
from sandloop.errors import ConfigError
from tests.desktop.conftest import file_appears
from tests.mcp_server.harness import stdio, structured

pytestmark = pytest.mark.docker

POLICY = """
version = 1
extends = ["ci"]
[files]
writable = ["**"]
[computer]
environment = "desktop"
settle_ms = 1500
"""


def _in_terminal(command: str) -> list[dict[str, Any]]:
    return [{"type": "click", "x": 300, "y": 200, "button": "left"}, {"type": "type", "text": command},
            {"type": "keypress", "keys": ["ENTER"]}]


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = tmp_path / "desk.toml"
    path.write_text(POLICY)
    return path


def test_run_drives_the_policys_desktop_without_the_flag(tmp_path: Path, workspace: Path, desktop_image_name: str,
                                                         desk: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-desktop-0000")
    turns = [[computer_call(_in_terminal("echo policy desktop > by-policy.txt"))],
             [shell_call(["cat by-policy.txt"])], [message("done")]]
    with FakeResponsesServer(ScriptedModel(turns)) as server:
        code = main(["run", "use the terminal", "--repo", str(workspace), "--base-url", server.base_url,
                     "--model", "scripted", "--policy", str(desk), "--log", str(tmp_path / "run" / "requests.jsonl")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert not server.rejections, server.rejections
    assert (workspace / "by-policy.txt").read_text() == "policy desktop\n"
    assert {"type": "computer"} in server.requests[0]["tools"]
    assert "Linux desktop" in server.requests[0]["instructions"]
    assert "✓ computer_call screenshot" in err and "not enabled" not in err and "✗" not in err, err
    start = json.loads((tmp_path / "run" / "requests.jsonl").read_text().splitlines()[0])
    assert start.get("placement") == "desktop", start


async def test_open_run_opens_the_policys_desktop(workspace: Path, desktop_image_name: str, desk: Path) -> None:
    with pytest.raises(ConfigError, match="--browser local"):
        await open_run(workspace, policy=str(desk), browser="local")
    async with open_run(workspace, policy=str(desk)) as run:
        assert run.toolbox.computer is not None and run.toolbox.computer.environment == "linux"
        assert run.placement == "desktop"
        await run.toolbox.computer.perform(_in_terminal("echo api > by-api.txt"))
        assert await file_appears(workspace / "by-api.txt") == "api\n"


async def test_mcp_serves_the_policys_desktop(workspace: Path, desktop_image_name: str, desk: Path) -> None:
    async with Client(stdio(workspace, "--policy", str(desk))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"shell", "apply_patch", "computer"}  # no navigation: no browser
        assert "Linux desktop" in (tools["computer"].description or "")
        result = await client.call_tool("computer", {"actions": _in_terminal("echo mcp > by-mcp.txt")})
        assert not result.is_error, result.content
        assert structured(result)["url"] == ""  # a desktop has no page, where a browser says about:blank
        assert await file_appears(workspace / "by-mcp.txt") == "mcp\n"
