"""The computer tool over MCP: real Chromium (the host's, ``--browser local``), the policy's
[browser] rules on every request, the screenshot as an MCP image content block."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from PIL import Image

from tests.mcp_server.harness import sandboxes, stdio, structured, text, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.browser]

PAGE = (b"<!doctype html><title>red</title><body style='margin:0;background:#c00'>"
        b"<button id=b style='position:absolute;left:10px;top:10px;width:100px;height:40px'"
        b" onclick=\"document.body.style.background='#00c'\">blue</button>")


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _png(result: types.CallToolResult) -> Image.Image:
    (image,) = [c for c in result.content if isinstance(c, types.ImageContent)]
    assert image.mime_type == "image/png"
    return Image.open(io.BytesIO(base64.b64decode(image.data))).convert("RGB")


async def test_the_computer_tool_returns_the_screenshot_as_an_image(
        docker_client: Any, repo: Path, state: Path, tmp_path: Path, page: str) -> None:
    policy = tmp_path / "browser.toml"
    host = page.removeprefix("http://").rstrip("/")
    policy.write_text(f'version = 1\nextends = ["strict"]\n\n[browser]\nallow_domains = [{json.dumps(host)}]\n')
    async with Client(stdio(repo, "--policy", str(policy), "--browser", "local")) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"computer", "navigate", "back", "forward"} <= names

        result = await client.call_tool("navigate", {"url": page})
        assert structured(result)["url"] == page

        result = await client.call_tool("computer", {"actions": [{"type": "screenshot"}]})
        shot = _png(result)
        data = structured(result)
        assert shot.size == (data["width"], data["height"]) and data["url"] == page
        assert shot.getpixel((400, 300)) == (204, 0, 0)  # the page's red

        result = await client.call_tool("computer", {"actions": [{"type": "click", "x": 50, "y": 30,
                                                                   "button": "left"}]})
        assert _png(result).getpixel((400, 300)) == (0, 0, 204)  # the click ran in the page

        # A page the policy does not list is never fetched; the refusal names the rule.
        result = await client.call_tool("navigate", {"url": "http://127.0.0.2:9/"})
        assert "blocked: rule browser.default" in text(result)

        result = await client.call_tool("computer", {"actions": [{"type": "teleport"}]})
        assert result.is_error
    wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after the client left")


def test_no_computer_when_the_policy_lets_the_browser_open_nothing() -> None:
    from executor.mcp.tools import offered
    from policies.engine import load_policy

    strict = load_policy("strict").policy  # allow_domains = [], default deny
    default = load_policy("default").policy
    assert [t.name for t in offered("auto", strict)] == ["shell", "apply_patch"]
    assert [t.name for t in offered("off", default)] == ["shell", "apply_patch"]
    assert [t.name for t in offered("auto", default)] == ["shell", "apply_patch", "computer", "navigate",
                                                          "back", "forward"]
