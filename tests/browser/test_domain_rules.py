"""Domain rules on a real Chromium: allowed.test and blocked.test both resolve to 127.0.0.1
(--host-resolver-rules), so only the rules can keep a request from reaching the test server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox.browser import BlockedRequest, BrowserConfig, LocalBrowser
from tests.browser.conftest import Site, domain_rules, host_rules

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

reported: list[BlockedRequest] = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[LocalBrowser]:
    config = BrowserConfig(allow_url=domain_rules, on_block=reported.append,
                           extra_args=(host_rules(),))
    b = LocalBrowser(config)
    yield b
    await b.close()


async def test_allowed_host_loads(browser: LocalBrowser, site: Site) -> None:
    nav = await browser.navigate(site.url("/hello", host="allowed.test"))
    assert nav.blocked is None and nav.title == "hello"
    assert ("GET", f"allowed.test:{site.port}", "/hello", "") in site.hits


async def test_link_to_blocked_host_shows_the_rule(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/links", host="allowed.test"))
    shot = await browser.perform([{"type": "click", "button": "left", "x": 100, "y": 70}])
    assert shot.url == site.url("/forbidden", host="blocked.test")
    text = await browser.evaluate("document.body.innerText")
    assert "Blocked by sandloop" in text and "rule test.block at test:1" in text
    assert "/forbidden" not in site.paths()  # the server never saw it
    assert any(r.url.endswith("/forbidden") and r.navigation for r in reported)


async def test_fetch_to_blocked_host_fails_and_same_origin_works(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/hello", host="allowed.test"))
    ok = await browser.evaluate("fetch('/api').then(r => r.json()).then(j => j.ok)")
    assert ok is True
    blocked = await browser.evaluate(
        f"fetch('http://blocked.test:{site.port}/api?x=1').then(() => 'loaded', e => 'failed: ' + e.name)")
    assert blocked == "failed: TypeError"
    assert "/api?x=1" not in site.paths()
    assert any(r.url.endswith("/api?x=1") and not r.navigation for r in reported)


async def test_websocket_to_blocked_host_is_closed(browser: LocalBrowser, site: Site) -> None:
    await browser.navigate(site.url("/hello", host="allowed.test"))
    code = await browser.evaluate(
        f"new Promise(r => {{ const ws = new WebSocket('ws://blocked.test:{site.port}/ws');"
        " ws.onclose = e => r(e.code); })")
    assert code == 1008
    assert any(r.kind == "websocket" and "blocked.test" in r.url for r in reported)


async def test_file_scheme_refused(browser: LocalBrowser, site: Site) -> None:
    nav = await browser.navigate("file:///etc/passwd")
    assert nav.blocked is not None and nav.blocked.rule_id == "browser.scheme"
    assert "root:" not in await browser.evaluate("document.documentElement.innerText")
    assert "Blocked by sandloop" in await browser.evaluate("document.body.innerText")
    # a link to it from an allowed page goes nowhere either
    await browser.navigate(site.url("/links", host="allowed.test"))
    shot = await browser.perform([{"type": "click", "button": "left", "x": 100, "y": 170}])
    assert not shot.url.startswith("file:")
    assert "root:" not in await browser.evaluate("document.documentElement.innerText")


async def test_unlisted_host_refused_by_the_default(browser: LocalBrowser, site: Site) -> None:
    nav = await browser.navigate("http://elsewhere.test/")
    assert nav.blocked is not None and nav.blocked.rule_id is None
    assert "rule default at test:default" in nav.describe()
