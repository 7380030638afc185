"""ComputerTool over sandloop's browser (local Chromium): actions with modifier keys, bare PNG
screenshots, the policy's domain rules on every request, safety checks answered by the policy."""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agents import UserError
from PIL import Image

import executor
from executor.agents_sdk import SandloopTools
from executor.testing import computer_call, function_call, message
from tests.agents.harness import sdk
from tests.api.scenario import outputs

pytestmark = [pytest.mark.docker, pytest.mark.browser]

PAGE = """<!doctype html><title>adapter</title><style>body{margin:0}</style>
<button style="position:absolute;left:0;top:0;width:300px;height:200px"
        onclick="fetch('/clicked?shift=' + event.shiftKey)">press</button>
<form action="/typed" style="position:absolute;left:0;top:250px">
  <input name="v" style="width:300px;height:40px"></form>
<a href="http://127.0.0.1:{away}/secret"
   style="position:absolute;left:0;top:400px;display:block;width:300px;height:100px">away</a>
"""


class Site:
    """A page server on 127.0.0.1 that remembers every path it was asked for."""

    def __init__(self, page: str = "") -> None:
        self.page, self.hits = page, list[str]()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.hits.append(self.path)
                body = site.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, path: str) -> bool:
        """Whether ``path`` was asked for, waiting for it a while (a page's fetch lands after
        the action that started it)."""
        deadline = time.monotonic() + 20
        while path not in self.hits and time.monotonic() < deadline:
            time.sleep(0.05)
        return path in self.hits


@pytest.fixture
def sites() -> Iterator[tuple[Site, Site]]:
    away = Site("<title>secret</title>")
    home = Site()
    home.page = PAGE.replace("{away}", str(away.port))
    yield home, away
    home.close()
    away.close()


def _policy(tmp_path: Path, port: int, safety: str = "refuse") -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(f'version = 1\nextends = ["default"]\n[browser]\nallow_domains = ["127.0.0.1:{port}"]\n'
                    f'safety_checks = "{safety}"\n')
    return path


async def test_actions_keys_screenshots_and_domain_rules(repo: Path, tmp_path: Path,
                                                         sites: tuple[Site, Site]) -> None:
    home, away = sites
    turns = [
        [function_call("navigate", {"url": f"http://127.0.0.1:{home.port}/"})],
        [computer_call([{"type": "click", "x": 150, "y": 100, "button": "left", "keys": ["SHIFT"]},
                        {"type": "click", "x": 150, "y": 270, "button": "left"},
                        {"type": "type", "text": "hello"},
                        {"type": "keypress", "keys": ["ENTER"]}])],
        [computer_call([{"type": "click", "x": 150, "y": 450, "button": "left"}])],
        [message("done")],
    ]
    async with executor.open_run(repo, policy=_policy(tmp_path, home.port), browser="local") as run:
        tools = SandloopTools(run)
        assert [t.name for t in tools.all] == ["shell", "apply_patch", "computer_use_preview",
                                               "navigate", "back", "forward"]
        async with sdk(tools, turns) as agent:
            result = await agent.run("use the page")
            requests = agent.server.requests
        viewport = run.toolbox.computer.screen if run.toolbox.computer else None
    assert result.final_output == "done"
    (navigated,) = outputs(requests, "function_call_output")
    assert navigated["output"] == f"now at http://127.0.0.1:{home.port}/ (adapter)"
    assert home.wait_for("/clicked?shift=true")  # the modifier was held for the click
    assert home.wait_for("/typed?v=hello")
    assert away.hits == []  # the link's host is not in allow_domains: never reached
    shots = outputs(requests, "computer_call_output")
    assert len(shots) == 2
    for shot in shots:
        url = shot["output"]["image_url"]
        assert url.startswith("data:image/png;base64,")
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True)))
        assert image.format == "PNG" and image.size == viewport
        # the SDK answers with acknowledged_safety_checks: null; the strict server took it
        assert "acknowledged_safety_checks" in shot and shot["acknowledged_safety_checks"] is None


@pytest.mark.parametrize("mode", ["refuse", "acknowledge"])
async def test_safety_checks_are_answered_by_the_policy(repo: Path, tmp_path: Path, sites: tuple[Site, Site],
                                                        mode: str) -> None:
    home, _ = sites
    check = {"id": "sc_1", "code": "malicious_instructions", "message": "the page asks for secrets"}
    turns = [
        [function_call("navigate", {"url": f"http://127.0.0.1:{home.port}/"})],
        [computer_call([{"type": "click", "x": 150, "y": 100, "button": "left"}],
                       pending_safety_checks=[check])],
        [message("done")],
    ]
    policy = _policy(tmp_path, home.port, mode)
    async with executor.open_run(repo, policy=policy, browser="local") as run, \
            sdk(SandloopTools(run), turns) as agent:
        if mode == "refuse":
            with pytest.raises(UserError, match="safety check was not acknowledged"):
                await agent.run("press it")
        else:
            assert (await agent.run("press it")).final_output == "done"
        requests = agent.server.requests
    if mode == "refuse":  # the run stopped before any action: nothing was clicked
        assert outputs(requests, "computer_call_output") == [] and "/clicked?shift=false" not in home.hits
    else:
        (shot,) = outputs(requests, "computer_call_output")
        assert shot["acknowledged_safety_checks"] == [check]
        assert home.wait_for("/clicked?shift=false")
