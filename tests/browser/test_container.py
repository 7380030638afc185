"""The container placement: hardened Chromium in the browser image, no network, driven over a pipe."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import docker
import pytest
import pytest_asyncio

from executor.handlers.computer import handle_computer_call
from sandbox.browser import BrowserConfig, ContainerBrowser, open_browser
from sandbox.browser.relay import PROFILE, chromium_command
from tests.browser.conftest import RESOLVE, Site, domain_rules, pixel, png_size
from tests.browser.sockets import Echo, check_blocked, check_echo_and_close, socket_page, wait_page
from tests.browser.test_handler import call, decode

pytestmark = [pytest.mark.docker, pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

SESSION = f"test-browser-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    client = docker.from_env()
    yield client
    leaked = client.api.containers(all=True, filters={"label": f"sandloop.session={SESSION}"})
    for row in leaked:
        client.api.remove_container(row["Id"], force=True)
    client.close()
    assert not leaked, "containers leaked"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(engine: docker.DockerClient) -> AsyncIterator[ContainerBrowser]:
    config = BrowserConfig(allow_url=domain_rules, resolve=RESOLVE)
    b = open_browser(config, placement="container", session_id=SESSION)
    assert isinstance(b, ContainerBrowser)
    await b.start()
    yield b
    await b.close()
    assert engine.api.containers(all=True, filters={"label": f"sandloop.session={SESSION}"}) == []


def _in_container(engine: docker.DockerClient, container_id: str, *command: str) -> str:
    result = engine.containers.get(container_id).exec_run(list(command))
    assert result.exit_code == 0, result.output
    return str(result.output.decode())


def _listening(tables: str) -> list[str]:
    """The local addresses in /proc/net/tcp*-style text that are in the LISTEN state."""
    rows = [line.split() for line in tables.splitlines() if line.strip() and not line.lstrip().startswith("sl")]
    return [row[1] for row in rows if row[3] == "0A"]


async def test_chromium_command_maps_the_profile_and_keeps_the_rest() -> None:
    command = chromium_command("chromium", ["--headless", "--user-data-dir=/tmp/pw-x", "--remote-debugging-pipe"])
    assert command[:2] == ["sh", "-c"] and "3<&0 4>&1" in command[2]
    assert command[3:] == ["chromium", "--headless", f"--user-data-dir={PROFILE}", "--remote-debugging-pipe"]


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
    # the reaper can tell a dead owner (pid + its start time on this host), not only an expiry
    from sandbox.lifecycle import stale_reason

    assert labels["sandloop.owner_host"] and labels["sandloop.owner_start"]
    assert stale_reason(labels, "running") is None
    assert stale_reason({**labels, "sandloop.owner_start": "reused"}, "running") is not None
    args = info["Config"]["Cmd"]
    assert "--remote-debugging-pipe" in args and not any(a.startswith("--remote-debugging-port") for a in args)


async def test_container_has_no_network(browser: ContainerBrowser, engine: docker.DockerClient, site: Site) -> None:
    assert browser.container_id is not None
    info = engine.containers.get(browser.container_id).attrs
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert _in_container(engine, browser.container_id, "ls", "/sys/class/net").split() == ["lo"]
    # nothing listens inside: no debugging port (nor anything else)
    tables = _in_container(engine, browser.container_id, "cat", "/proc/net/tcp", "/proc/net/tcp6")
    assert _listening(tables) == []
    # the test server on the host's loopback is out of reach from in there (it was reachable
    # when the container shared the host's namespace): only the host-side fetch gets to it
    probe = (f"import socket\ntry: socket.create_connection(('127.0.0.1', {site.port}), 2)\n"
             "except OSError as e: print(type(e).__name__)\nelse: print('connected')")
    assert _in_container(engine, browser.container_id, "python3", "-c", probe).strip() == "ConnectionRefusedError"


async def test_page_traffic_is_fetched_on_the_host(browser: ContainerBrowser, site: Site) -> None:
    nav = await browser.navigate(site.url("/hello", host="allowed.test"))
    assert nav.blocked is None and nav.title == "hello"
    assert ("GET", f"allowed.test:{site.port}", "/hello", "") in site.hits
    ok = await browser.evaluate("fetch('/api?from=container').then(r => r.json()).then(j => j.ok)")
    assert ok is True and "/api?from=container" in site.paths()
    nav = await browser.navigate(site.url("/redirect?to=/hello?via=redirect", host="allowed.test"))
    assert nav.url == site.url("/hello?via=redirect", host="allowed.test") and nav.title == "hello"


async def test_websocket_is_bridged_through_the_host(browser: ContainerBrowser, site: Site, echo: Echo) -> None:
    """The page has no network: its allowed socket reaches the echo server only via the host."""
    await check_echo_and_close(browser, echo, site.url("", host="allowed.test"), "/container")


async def test_websocket_to_blocked_host_never_reaches_the_server(
    browser: ContainerBrowser, site: Site, echo: Echo
) -> None:
    await check_blocked(browser, echo, site.url("", host="allowed.test"), "/container-blocked")


async def test_server_close_reaches_the_page(browser: ContainerBrowser, site: Site, echo: Echo) -> None:
    await browser.navigate(socket_page(site.url("", host="allowed.test"), echo.url("/bye-container"), sid="c"))
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == (
        "closed 4000 server says bye")


async def test_form_through_the_handler(browser: ContainerBrowser, site: Site) -> None:
    await browser.navigate(site.url("/form", host="allowed.test"))
    actions = [{"type": "click", "button": "left", "x": 200, "y": 65},
               {"type": "type", "text": "hello"},
               {"type": "keypress", "keys": ["CTRL", "A"]},
               {"type": "keypress", "keys": ["BACKSPACE"]},
               {"type": "type", "text": "container"},
               {"type": "keypress", "keys": ["ENTER"]}]
    out = (await handle_computer_call(call(actions=actions), browser, safety=None, display=None)).output
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
    result = await browser.evaluate(  # a redirect to a blocked host is checked at its hop
        f"fetch('/redirect?to=http://blocked.test:{site.port}/api?c=2').then(() => 'loaded', () => 'failed')")
    assert result == "failed" and "/api?c=2" not in site.paths()
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
    assert engine.api.containers(all=True, filters={"id": first}) == []  # the dead one is gone
    await browser.navigate(site.url("/hello", host="allowed.test"))
    assert await browser.evaluate("document.title") == "hello"
