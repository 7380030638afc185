"""The container placement: hardened Chromium in the browser image, attached over CDP."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import docker
import pytest
import pytest_asyncio

from executor.handlers.computer import handle_computer_call
from sandbox.browser import BrowserConfig, ContainerBrowser, open_browser
from tests.browser.conftest import Site, domain_rules, host_rules, pixel, png_size
from tests.browser.test_handler import call, decode

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SESSION = f"test-browser-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    leaked = client.containers.list(all=True, filters={"label": f"sandloop.session={SESSION}"})
    for container in leaked:
        container.remove(force=True)
    client.close()
    assert not leaked, "containers leaked"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(engine: docker.DockerClient) -> AsyncIterator[ContainerBrowser]:
    config = BrowserConfig(allow_url=domain_rules, extra_args=(host_rules(),))
    b = open_browser(config, placement="container", session_id=SESSION)
    assert isinstance(b, ContainerBrowser)
    await b.start()
    yield b
    await b.close()
    assert engine.containers.list(all=True, filters={"label": f"sandloop.session={SESSION}"}) == []


def _listening_on(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp*) that listen on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                found.add(address)
    return found


async def test_container_is_hardened(browser: ContainerBrowser, engine: docker.DockerClient) -> None:
    info = engine.containers.get(browser.container_id).attrs
    host = info["HostConfig"]
    assert info["Config"]["User"] == "1000:1000"
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    assert host["ReadonlyRootfs"] is True
    assert set(host["Tmpfs"]) == {"/tmp", "/home/sandbox"}
    assert host["PidsLimit"] > 0 and host["Memory"] > 0
    labels = info["Config"]["Labels"]
    assert labels["sandloop.session"] == SESSION and int(labels["sandloop.expires"]) > 0
    assert labels["sandloop.owner_pid"].isdigit()
    args = info["Config"]["Cmd"]
    assert "--remote-debugging-address=127.0.0.1" in args
    port = int(next(a for a in args if a.startswith("--remote-debugging-port=")).split("=")[1])
    assert _listening_on(port) == {"0100007F"}  # 127.0.0.1 only


async def test_form_through_the_handler(browser: ContainerBrowser, site: Site) -> None:
    await browser.navigate(site.url("/form", host="allowed.test"))
    actions = [{"type": "click", "button": "left", "x": 200, "y": 65},
               {"type": "type", "text": "hello"},
               {"type": "keypress", "keys": ["CTRL", "A"]},
               {"type": "keypress", "keys": ["BACKSPACE"]},
               {"type": "type", "text": "container"},
               {"type": "keypress", "keys": ["ENTER"]}]
    out = await handle_computer_call(call(actions=actions), browser, safety=None, display=None)
    assert png_size(decode(out)) == (1280, 800)
    assert ("POST", f"allowed.test:{site.port}", "/submitted", "name=container") in site.hits


async def test_scaled_click_and_mask(browser: ContainerBrowser, site: Site) -> None:
    await browser.navigate(site.url("/grid", host="allowed.test"))
    shot = await browser.perform([{"type": "click", "button": "left", "x": 110, "y": 70}],
                                 display=(640, 400))
    assert png_size(shot.png) == (640, 400)
    assert await browser.evaluate("window.hit") == "b12"
    await browser.navigate(site.url("/secret", host="allowed.test"))
    shot = await browser.screenshot()
    assert pixel(shot.png, 200, 120) == (0, 0, 0) and pixel(shot.png, 290, 205) == (255, 255, 255)


async def test_blocked_fetch_and_link(browser: ContainerBrowser, site: Site) -> None:
    await browser.navigate(site.url("/links", host="allowed.test"))
    result = await browser.evaluate(
        f"fetch('http://blocked.test:{site.port}/api?c=1').then(() => 'loaded', () => 'failed')")
    assert result == "failed"
    shot = await browser.perform([{"type": "click", "button": "left", "x": 100, "y": 70}])
    assert "Blocked by sandloop" in await browser.evaluate("document.body.innerText")
    assert shot.url.startswith("http://blocked.test")
    assert "/api?c=1" not in site.paths() and "/forbidden" not in site.paths()
    assert (await browser.navigate("file:///etc/passwd")).blocked is not None


async def test_killed_container_is_replaced(
    browser: ContainerBrowser, engine: docker.DockerClient, site: Site
) -> None:
    first = browser.container_id
    assert first is not None
    engine.containers.get(first).kill()
    shot = await browser.perform([{"type": "screenshot"}])
    assert png_size(shot.png) == (1280, 800)
    assert any("restarted" in note for note in shot.notes)
    assert browser.container_id not in (None, first)
    assert engine.containers.list(all=True, filters={"id": first}) == []  # the dead one is gone
    await browser.navigate(site.url("/hello", host="allowed.test"))
    assert await browser.evaluate("document.title") == "hello"
