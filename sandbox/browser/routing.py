"""Every request a page makes, decided by the rules and fetched on the host.

Navigations, subresources and fetch() all come through Playwright routing to :class:`Router`. An
allowed request is fetched by Playwright's driver on the host (``route.fetch``) and handed to the
page (``route.fulfill``) in both placements: one code path, and the only way the network-less
container gets any bytes. A refused navigation gets the blocked page; a refused subresource is
aborted. Redirects are followed hop by hop, each checked first (:mod:`sandbox.browser.redirects`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from urllib.parse import urljoin, urlsplit, urlunsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Route

from sandbox.browser.redirects import MAX_REDIRECTS, REDIRECTS, RedirectChain, next_hop, stub
from sandbox.browser.rules import BlockedRequest, UrlRules, blocked_page, rule_text
from sandbox.browser.tracking import is_main_frame_navigation
from sandbox.computer.notes import first_line
from sandloop.verdict import Verdict

__all__ = ["Router", "fetch_target"]

log = logging.getLogger("sandloop.browser")


def fetch_target(url: str, headers: dict[str, str], resolve: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The URL the host-side fetch opens and the headers it sends (``BrowserConfig.resolve``)."""
    parts = urlsplit(url)
    address = resolve.get(parts.hostname or "")
    if address is None:
        return url, headers
    netloc = address + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc)), {**headers, "host": parts.netloc}


class Router:
    """The route every request of one browser takes (all its contexts, across restarts)."""

    def __init__(self, rules: UrlRules, *, navigation_timeout_s: float) -> None:
        self.rules = rules
        self.navigation_timeout_s = navigation_timeout_s
        self.chain = RedirectChain()
        self.blocked: dict[str, Verdict] = {}  # URLs whose navigation was served the blocked page

    async def on_route(self, route: Route) -> None:
        request = route.request
        verdict = await self.rules.check(request.url)
        try:
            if verdict.allowed:
                await self._forward(route)
            else:
                await self._refuse(route, request.url, verdict)
        except PlaywrightError as exc:  # the page went away while we decided
            log.debug("route for %s: %s", request.url, exc)

    async def _forward(self, route: Route) -> None:
        """Fetch an allowed request on the host and answer the page with the response.

        Playwright never routes the hops of a redirect the browser follows, so the fetch
        follows none (``max_redirects=0``) and every Location is checked here first. A blocked
        hop is blocked like the request itself. An allowed hop of a navigation is answered with
        a stub (:func:`~sandbox.browser.redirects.stub`), so the browser navigates to it
        (through this route again) and lands on its real URL; a subresource's hop is fetched
        here, and the page gets the last response under the first URL.
        """
        request = route.request
        navigation = request.is_navigation_request()
        main_frame = is_main_frame_navigation(request)
        hops = 0
        if navigation:  # what this URL does now decides; forget what it did last time
            self.blocked.pop(request.url, None)
            hops = self.chain.hops.pop(request.url, 0)
        if main_frame:
            self.chain.answering()  # any answer but a stub ends a redirect chain
        url, method, headers, post_data = request.url, request.method, request.headers, request.post_data_buffer
        for _ in range(MAX_REDIRECTS + 1):
            denied = await self.rules.address(url)
            if denied is not None:
                await self._refuse(route, url, denied)
                return
            fetch_url, fetch_headers = fetch_target(url, headers, self.rules.resolve)
            try:
                response = await route.fetch(
                    url=fetch_url, method=method, headers=fetch_headers, post_data=post_data,
                    max_redirects=0, timeout=self.navigation_timeout_s * 1000,
                )
            except PlaywrightError as exc:  # unreachable host, reset, timeout: a network error
                log.info("fetch of %s failed: %s", url, first_line(exc))
                await route.abort("failed")
                return
            location = response.headers.get("location")
            if response.status not in REDIRECTS or not location:
                await route.fulfill(response=response)
                return
            await response.dispose()
            target = urljoin(url, location)
            verdict = await self.rules.check(target)
            if not verdict.allowed:
                await self._refuse(route, target, verdict)
                return
            if navigation:
                if hops >= MAX_REDIRECTS:  # a loop across stubs (A -> B -> A ...)
                    break
                self.chain.hops[target] = hops + 1
                if main_frame:
                    self.chain.stub_sent()
                await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=stub(target))
                return
            method, headers, post_data = next_hop(response.status, method, headers, post_data, url, target)
            url = target
        log.info("too many redirects from %s", request.url)
        await route.abort("failed")

    async def _refuse(self, route: Route, url: str, verdict: Verdict) -> None:
        """Block ``route`` because of ``url`` (the request's own, or where it redirects)."""
        request = route.request
        nav = request.is_navigation_request()
        self.rules.report(BlockedRequest(url, verdict, nav, "navigation" if nav else "request"))
        if nav:  # a plain page that says which rule blocked it, instead of an error
            self.blocked[request.url] = verdict
            await route.fulfill(
                status=403,
                content_type="text/html; charset=utf-8",
                body=blocked_page(url, verdict),
            )
        else:
            await route.abort("blockedbyclient")

    async def landed(self, page: Page, deadline: float | None = None) -> bool:
        """Wait until a redirect the main frame is following has landed and loaded (by
        ``deadline``, loop time; default: a navigation timeout from now)."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.navigation_timeout_s
        return await self.chain.landed(page, deadline)

    async def show_blocked(self, page: Page, url: str, verdict: Verdict) -> None:
        """Replace ``page`` with the blocked page for ``url`` (a navigation refused up front)."""
        self.rules.report(BlockedRequest(url, verdict, True, "navigation"))
        await page.goto("about:blank")
        await page.set_content(blocked_page(url, verdict))

    async def recheck(self, page: Page) -> str | None:
        """After an action: is the page still somewhere the rules allow? Else replace it."""
        url = page.url
        if url == "about:blank" or url.startswith("chrome-error://") or url in self.blocked:
            return None
        verdict = await self.rules.check(url)
        if verdict.allowed:
            return None
        await self.show_blocked(page, url, verdict)
        return f"the page at {url} is not allowed ({rule_text(verdict)}); it was replaced"
