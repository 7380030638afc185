"""One Chromium, its context, and the page the model sees: started, watched, restarted.

The context is the same in both placements: fixed viewport at device scale factor 1, downloads
and service workers refused, every request routed through the :class:`~sandbox.browser.routing.Router`
and every websocket through :class:`~sandbox.browser.sockets.Sockets`, the settle step's script
in every document. A popup replaces its opener on screen; a crashed or closed page is replaced by
a fresh one, a dead browser by a fresh browser, each with a note for the model.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable

from playwright.async_api import Browser as PWBrowser
from playwright.async_api import BrowserContext, Download, Frame, Page, Playwright, Request, async_playwright
from playwright.async_api import Error as PlaywrightError

from sandbox.browser.config import BrowserConfig
from sandbox.browser.routing import Router
from sandbox.browser.settle import WATCH_JS
from sandbox.browser.sockets import Sockets
from sandbox.browser.tracking import MainFrameNavigations, is_main_frame_navigation, navigated_away
from sandbox.computer import notes

__all__ = ["Chromium"]

log = logging.getLogger("sandloop.browser")

_INVALID_SELECTORS_JS = """sels => sels.filter(s => {
  try { document.querySelector(s); return false; } catch (e) { return true; } })"""


class Chromium:
    """The Chromium of one browser session; ``launch`` and ``release`` are its placement's."""

    def __init__(
        self,
        config: BrowserConfig,
        router: Router,
        *,
        launch: Callable[[Playwright], Awaitable[PWBrowser]],
        release: Callable[[], Awaitable[None]],
    ) -> None:
        self.config = config
        self.router = router
        self._launch = launch
        self._release = release
        self._pw: Playwright | None = None
        self.browser: PWBrowser | None = None
        self.context: BrowserContext | None = None
        self.page: Page | None = None  # the page on screen
        self.navs = MainFrameNavigations()
        self.restarts = 0
        self._sockets: Sockets | None = None
        self._crashed = False
        self._watched: set[Page] = set()  # pages whose events we listen to

    # -- lifecycle -------------------------------------------------------------------------
    async def _start(self) -> None:
        if self._pw is None:
            self._pw = await async_playwright().start()
        self.browser = await self._launch(self._pw)
        width, height = self.config.viewport
        self.context = context = await self.browser.new_context(
            viewport={"width": width, "height": height},
            device_scale_factor=1,
            accept_downloads=False,
            service_workers="block",  # a service worker would answer requests past our routes
        )
        context.set_default_navigation_timeout(self.config.navigation_timeout_s * 1000)
        await context.add_init_script(WATCH_JS)
        await context.route("**/*", self.router.on_route)
        self._sockets = Sockets(context, self.router.rules)
        await context.route_web_socket(re.compile(r".*"), self._sockets.route)
        context.on("page", self._adopt)
        page = await context.new_page()
        self._adopt(page)
        bad = await page.evaluate(_INVALID_SELECTORS_JS, list(self.config.redact_selectors))
        if bad:  # a configuration error: release everything, nothing will retry
            await self.close()
            raise ValueError(f"redact_selectors are not valid CSS selectors: {bad}")
        await self._goto_start(page)

    async def _goto_start(self, page: Page) -> None:
        url = self.config.start_url
        if url == "about:blank":
            return
        verdict = await self.router.rules.check(url)
        if not verdict.allowed:
            await self.router.show_blocked(page, url, verdict)
            return
        try:
            await page.goto(url, wait_until="load")
            await self.router.landed(page)
        except PlaywrightError as exc:
            log.warning("start URL %s did not load: %s", url, exc)

    async def _teardown(self) -> None:
        if self._sockets is not None:  # the host side of every websocket goes with its pages
            await self._sockets.shut()
        browser, self.browser, self.context, self.page, self._sockets = self.browser, None, None, None, None
        self._watched.clear()
        self.navs.forget()  # a dead browser's pages never tell us their navigations ended
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), timeout=10)
            except (PlaywrightError, TimeoutError) as exc:
                log.debug("closing a dead browser: %s", exc)
        await self._release()

    async def _restart(self, why: str) -> str:
        self.restarts += 1
        log.warning("browser restarted: %s", why)
        await self._teardown()
        await self._start()
        return notes.restarted("browser", why, f"on {self.config.start_url}", "cookies and history")

    async def close(self) -> None:
        await self._teardown()
        if self._pw is not None:
            pw, self._pw = self._pw, None
            await pw.stop()

    async def ensure_page(self) -> tuple[Page, list[str]]:
        """The live page, (re)starting whatever died; notes say what happened."""
        said: list[str] = []
        if self.browser is None:
            await self._start()
        elif not self.browser.is_connected():
            said.append(await self._restart("had stopped"))
        if self._crashed or self.page is None or self.page.is_closed():
            assert self.context is not None
            why = "page crashed" if self._crashed else "page was closed"
            try:
                page = await self.context.new_page()
                self._adopt(page)
                await self._goto_start(page)
                said.append(f"the {why}; a fresh page was opened on {self.config.start_url}")
            except PlaywrightError:
                said.append(await self._restart(f"could not open a page after the {why}"))
        assert self.page is not None
        return self.page, said

    async def alive(self, page: Page) -> bool:
        if self.browser is None or not self.browser.is_connected() or page.is_closed():
            return False
        if self._crashed:
            return False
        try:
            await asyncio.wait_for(page.evaluate("1"), timeout=5)
            return True
        except PlaywrightError as exc:  # a navigation in flight is not a death
            return navigated_away(exc)
        except TimeoutError:
            return False

    # -- the page we show ------------------------------------------------------------------
    def _adopt(self, page: Page) -> None:
        """Make ``page`` the one the model sees (a popup replaces its opener on screen)."""
        self.page = page
        self._crashed = False
        if page in self._watched:  # a page we open comes through the context's "page" event too
            return
        self._watched.add(page)
        page.on("crash", self._on_crash)
        page.on("request", self._on_request)
        page.on("requestfailed", self._on_request_failed)
        page.on("framenavigated", self._on_frame_navigated)
        page.on("domcontentloaded", self.navs.ended)
        page.on("download", self._on_download)
        page.on("close", self._on_page_close)

    def _on_crash(self, page: Page) -> None:
        self.navs.ended(page)
        if page is self.page:
            self._crashed = True

    def _on_page_close(self, page: Page) -> None:
        self._watched.discard(page)
        self.navs.ended(page)
        if page is self.page and self.context is not None:
            others = [p for p in self.context.pages if not p.is_closed()]
            self.page = others[-1] if others else None

    def _on_request(self, request: Request) -> None:
        if is_main_frame_navigation(request):
            self.navs.started(request.frame.page, request)

    def _on_request_failed(self, request: Request) -> None:
        if is_main_frame_navigation(request):
            self.navs.ended(request.frame.page, request)
            # not the end of a redirect chain yet: the error page it gets commits next

    def _on_frame_navigated(self, frame: Frame) -> None:
        if frame.parent_frame is None:
            self.navs.committed(frame.page, frame.url)
            self.router.chain.committed()

    def _on_download(self, download: Download) -> None:
        log.info("download refused: %s", download.url)
