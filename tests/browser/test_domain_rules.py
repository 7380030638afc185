"""Domain rules on a real Chromium: allowed.test and blocked.test both resolve to 127.0.0.1
(BrowserConfig.resolve, applied by the host-side fetch), so only the rules can keep a request
from reaching the test server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest
import pytest_asyncio

from sandbox.browser import BlockedRequest, BrowserConfig, LocalBrowser
from sandbox.browser.redirects import next_hop
from sandbox.browser.routing import fetch_target
from sandbox.browser.rules import is_ip_literal
from sandloop.verdict import Decision, Verdict
from tests.browser.conftest import RESOLVE, Site, domain_rules
from tests.browser.sockets import Echo, check_blocked, check_echo_and_close, closed_port, echoes, socket_page, wait_page

pytestmark = [pytest.mark.browser, pytest.mark.asyncio(loop_scope="module")]

reported: list[BlockedRequest] = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[LocalBrowser]:
    config = BrowserConfig(allow_url=domain_rules, on_block=reported.append,
                           resolve=RESOLVE)
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


async def test_websocket_echoes_through_the_host(browser: LocalBrowser, site: Site, echo: Echo) -> None:
    await check_echo_and_close(browser, echo, site.url("", host="allowed.test"), "/local")


async def test_blocked_websocket_never_reaches_the_server(browser: LocalBrowser, site: Site, echo: Echo) -> None:
    await check_blocked(browser, echo, site.url("", host="allowed.test"), "/local-blocked")
    assert any(r.kind == "websocket" and r.url == echo.url("/local-blocked", host="blocked.test") for r in reported)


async def test_websocket_server_close_reaches_the_page(browser: LocalBrowser, site: Site, echo: Echo) -> None:
    await browser.navigate(socket_page(site.url("", host="allowed.test"), echo.url("/bye-local"), sid="l"))
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == (
        "closed 4000 server says bye")
    assert await asyncio.to_thread(echo.wait_closed, "/bye-local") == (4000, "server says bye")


async def test_leaving_the_page_closes_the_upstream(browser: LocalBrowser, site: Site, echo: Echo) -> None:
    await browser.navigate(socket_page(site.url("", host="allowed.test"), echo.url("/leave"), sid="l"))
    assert await echoes(browser, 2) == ["text:hello", "binary:1,2,255"]
    await browser.navigate(site.url("/hello", host="allowed.test"))
    code, _ = await asyncio.to_thread(echo.wait_closed, "/leave")
    assert code in (1000, 1001)  # normal or "going away": a close frame, not a dropped link


async def test_unreachable_websocket_closes_like_a_browser(browser: LocalBrowser, site: Site) -> None:
    dead = f"ws://allowed.test:{closed_port()}/nobody"
    await browser.navigate(socket_page(site.url("", host="allowed.test"), dead, sid="l"))
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == "closed 1006"
    assert await browser.evaluate("echoes.textContent") == ""


async def test_websocket_redirect_is_not_followed(browser: LocalBrowser, site: Site, echo: Echo) -> None:
    """A browser fails a handshake answered with a redirect; the host-side client must too."""
    await browser.navigate(socket_page(site.url("", host="allowed.test"), echo.url("/moved"), sid="l"))
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == "closed 1006"
    assert "/moved" in echo.paths() and "/moved-target" not in echo.paths()


async def test_closing_the_browser_closes_its_websockets(site: Site, echo: Echo) -> None:
    b = LocalBrowser(BrowserConfig(allow_url=domain_rules, resolve=RESOLVE))
    try:
        await b.navigate(socket_page(site.url("", host="allowed.test"), echo.url("/shut"), sid="s"))
        assert await echoes(b, 2) == ["text:hello", "binary:1,2,255"]
    finally:
        await b.close()
    assert await asyncio.to_thread(echo.wait_closed, "/shut") == (1001, "browser closed")


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


async def test_redirect_to_blocked_host_is_checked_at_each_hop(browser: LocalBrowser, site: Site) -> None:
    to_blocked = site.url("/redirect?to=http://blocked.test:{port}/forbidden?via=redirect", host="allowed.test")
    nav = await browser.navigate(to_blocked)
    assert nav.blocked is not None and nav.title == "Blocked by sandloop"
    assert "blocked.test" in await browser.evaluate("document.body.innerText")
    assert "/forbidden?via=redirect" not in site.paths()
    assert any(r.url.endswith("via=redirect") and r.navigation for r in reported)
    # a fetch() whose redirect leads to a blocked host fails too; one to an allowed host lands
    result = await browser.evaluate(
        "fetch('/redirect?to=http://blocked.test:{port}/api?via=fetch-redirect')"
        ".then(() => 'loaded', () => 'failed')".replace("{port}", str(site.port)))
    assert result == "failed" and "/api?via=fetch-redirect" not in site.paths()
    nav = await browser.navigate(site.url("/redirect?to=/hello", host="allowed.test"))
    assert nav.url == site.url("/hello", host="allowed.test") and nav.title == "hello"


async def test_form_post_redirect_get(browser: LocalBrowser, site: Site) -> None:
    """A 303 after a form POST: the page lands on the target with a GET, through the routes."""
    await browser.navigate(site.url("/form", host="allowed.test"))
    await browser.evaluate("document.forms[0].action = '/redirect?to=/hello?prg=1'")
    shot = await browser.perform([{"type": "click", "button": "left", "x": 200, "y": 65},
                                  {"type": "type", "text": "abc"}, {"type": "keypress", "keys": ["ENTER"]}])
    assert shot.url == site.url("/hello?prg=1", host="allowed.test"), shot.notes
    assert ("POST", f"allowed.test:{site.port}", "/redirect?to=/hello?prg=1", "name=abc") in site.hits
    assert ("GET", f"allowed.test:{site.port}", "/hello?prg=1", "") in site.hits
    assert await browser.evaluate("history.length") >= 2 and await browser.evaluate("document.title") == "hello"


async def test_resolve_rewrites_only_the_connection() -> None:
    """The mapping changes where the fetch connects, never the URL the rules saw or the Host."""
    resolve, headers = {"allowed.test": "127.0.0.1"}, {"accept": "*/*"}
    assert fetch_target("http://allowed.test:8080/a?b=1", headers, resolve) == (
        "http://127.0.0.1:8080/a?b=1", {"accept": "*/*", "host": "allowed.test:8080"})
    assert fetch_target("http://other.test/x", headers, resolve) == ("http://other.test/x", headers)


async def test_next_hop_follows_the_fetch_standard() -> None:
    post = {"content-type": "application/x-www-form-urlencoded", "authorization": "Bearer t", "accept": "*/*"}
    a, b = "http://a.test/x", "http://b.test/y"
    assert next_hop(303, "POST", post, b"k=v", a, a) == ("GET", {"authorization": "Bearer t", "accept": "*/*"}, b"")
    assert next_hop(302, "POST", post, b"k=v", a, b) == ("GET", {"accept": "*/*"}, b"")
    assert next_hop(307, "POST", post, b"k=v", a, a + "2") == ("POST", post, b"k=v")
    assert next_hop(301, "GET", {"accept": "*/*"}, None, a, b) == ("GET", {"accept": "*/*"}, None)


async def test_redirect_loop_ends(browser: LocalBrowser, site: Site) -> None:
    before = site.paths().count("/loop?n=1")
    nav = await browser.navigate(site.url("/loop?n=1", host="allowed.test"))
    assert nav.url.startswith("chrome-error:")  # an error page, and the call returned
    assert 0 < site.paths().count("/loop?n=1") - before <= 25
    assert (await browser.navigate(site.url("/hello", host="allowed.test"))).title == "hello"


def _names_allowed_addresses_listed(listed: set[str]):  # type: ignore[no-untyped-def]
    """Like a policy with allow_domains = ["*", *listed]: any name, IP literals only if listed."""
    def check(url: str) -> Verdict:
        host = urlsplit(url).hostname or ""
        if is_ip_literal(host) and host not in listed:
            return Verdict(Decision.DENY, "addresses must be listed exactly", "test.ip", "test:3")
        return Verdict(Decision.ALLOW, "any name", "test.any", "test:4")

    return check


@pytest.mark.parametrize("listed", [set(), {"127.0.0.1"}])
async def test_a_name_that_resolves_to_loopback_needs_the_address_listed(site: Site, listed: set[str]) -> None:
    # The host opens every connection, so "localhost" (or the machine's own hostname) must not
    # hand a page the host's loopback services under a policy that allows any name.
    b = LocalBrowser(BrowserConfig(allow_url=_names_allowed_addresses_listed(listed)))
    try:
        path = f"/hello?listed={len(listed)}"
        nav = await b.navigate(site.url(path, host="localhost"))
        if listed:
            assert nav.blocked is None and nav.title == "hello"
        else:
            assert nav.blocked is not None and nav.blocked.rule_id == "browser.address"
            assert "resolves to 127.0.0.1" in nav.blocked.justification
            assert path not in site.paths()  # the server never saw it
    finally:
        await b.close()
