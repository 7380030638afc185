"""PlaywrightBrowser: the browser session both placements share, every line of page logic.

A batch of computer actions runs on the page on screen, each followed by its settle step
(:mod:`sandbox.browser.settle`) and a re-check that the page is still somewhere the rules allow;
then ONE capture, with redaction, fitted to the declared display. A crashed page or browser is
replaced and the call still gets a screenshot; a bad action is a note, never an exception.
Navigation (navigate / back / forward) goes through the same rules. Placements only say how to
get a Playwright ``Browser`` (:meth:`PlaywrightBrowser._launch`) and what to free after it.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, Literal

from playwright.async_api import Browser as PWBrowser
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Playwright

from sandbox.browser.base import Browser, Navigation
from sandbox.browser.chromium import Chromium
from sandbox.browser.config import BrowserConfig
from sandbox.browser.page_input import PageInput
from sandbox.browser.routing import Router
from sandbox.browser.rules import BlockedRequest, UrlRules
from sandbox.browser.settle import Settle
from sandbox.computer import notes as say
from sandbox.computer.actions import Action, ActionLike, moves_content, validate
from sandbox.computer.input import perform_action
from sandbox.computer.screen import Screenshot, Size, declared, fitted, scale
from sandloop.errors import SandboxUnavailable
from sandloop.verdict import Verdict

__all__ = ["PlaywrightBrowser"]

log = logging.getLogger("sandloop.browser")

# Redaction is a stylesheet applied only while capturing (Playwright's screenshot `style`, which
# also reaches shadow DOM and iframes): brightness(0) blackens the element's text, images and
# children, the background fills the rest of its box. Playwright's overlay `mask` does the same
# job but waits for an extra frame (≈+16 ms per screenshot); this costs nothing measurable.
_REDACT_RULE = (
    "{selectors}{{background:#000!important;filter:brightness(0)!important;"
    "color:#000!important;-webkit-text-fill-color:#000!important}}"
)


class _Gone(Exception):
    """The page or the whole browser died under an action."""


async def _result(capture: asyncio.Future[bytes] | None) -> bytes | None:
    """A capture started early, once finished (never left running under the next one)."""
    if capture is None:
        return None
    try:
        return await capture
    except PlaywrightError:  # a navigation interrupted it, or the page went away: capture afresh
        return None


class PlaywrightBrowser(Browser):
    """All page logic; subclasses only say how to get a Playwright ``Browser``."""

    def __init__(self, config: BrowserConfig | None = None) -> None:
        self.config = config = config or BrowserConfig()
        self.screen = config.viewport
        self.rules = UrlRules(config.allow_url, config.on_block, config.resolve)
        self.router = Router(self.rules, navigation_timeout_s=config.navigation_timeout_s)
        self.chromium = Chromium(config, self.router, launch=self._launch, release=self._release)
        self.settle = Settle(config, self.chromium.navs, self.router.chain, lambda: self.chromium.page)
        self._lock = asyncio.Lock()
        # one rule per selector: an invalid selector must not void the others (checked at start)
        rules = "".join(_REDACT_RULE.format(selectors=s) for s in config.redact_selectors)
        self._redact_css = rules or None

    @property
    def restarts(self) -> int:
        """How often Chromium was started afresh (each time told to the model in a note)."""
        return self.chromium.restarts

    @property
    def blocked_requests(self) -> list[BlockedRequest]:
        return self.rules.blocked

    # -- placement hooks -------------------------------------------------------------------
    @abc.abstractmethod
    async def _launch(self, pw: Playwright) -> PWBrowser:
        """Start (or attach to) Chromium."""

    async def _release(self) -> None:
        """Free whatever _launch created beyond the Playwright browser (e.g. a container)."""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        async with self._lock:
            await self.chromium.ensure_page()

    async def close(self) -> None:
        async with self._lock:
            await self.chromium.close()

    # -- actions ---------------------------------------------------------------------------
    async def perform(self, actions: Sequence[ActionLike], *, display: Size | None = None) -> Screenshot:
        display = declared(display, self.screen)
        async with self._lock:
            page, notes = await self.chromium.ensure_page()
            early: bytes | None = None
            try:
                early = await self._run_all(page, actions, display, notes)
            except _Gone as gone:
                notes.append(str(gone))
                page, more = await self.chromium.ensure_page()
                notes.extend(more)
            shot = await self._capture_or_restart(display, notes, early)
        for note in shot.notes:
            log.info("computer action note: %s", note)
        return shot

    async def _run_all(
        self, page: Page, actions: Sequence[ActionLike], display: Size, notes: list[str]
    ) -> bytes | None:
        """Each action, then its settle step: the next action (and the capture) sees the page a
        navigation it started has loaded, not the one it left.

        The capture is started alongside the last action's settle round trip, which is then off
        the critical path of the usual call (one click, nothing navigates): it is returned only
        if the settle found the page still (no navigation, no timers followed, nothing replaced),
        else dropped and the caller captures afresh. A scroll or drag settles on a frame first.
        """
        batch = validate(actions, display)
        ratio = scale(self.screen, display)
        png, keep = None, False
        for index, action in enumerate(batch.actions, 1):
            since = self.chromium.navs.seq
            failed = None
            try:
                await self._do(page, action, ratio)
            except PlaywrightError as exc:
                if not await self.chromium.alive(page):
                    raise _Gone(say.died("browser", index)) from exc
                failed = batch.failed(index, say.first_line(exc))
            moves = moves_content(action)
            early = None
            if index == len(batch.actions) and failed is None and not moves:
                early = asyncio.ensure_future(self._screenshot(page))
            try:
                # even a failed action may have started a navigation (a history step that timed out)
                settle_notes, still = await self.settle(page, since, frame=moves)
                notes.extend(settle_notes)
                shown = self.chromium.page or page  # a popup the action opened is what the model sees now
                note = failed or await self.router.recheck(shown)
            finally:
                png = await _result(early)
            if note:
                notes.append(note)
                return None
            keep, page = still and shown is page, shown
        if batch.refused:
            notes.append(batch.refused)
        return png if keep else None

    async def _do(self, page: Page, action: Action, ratio: tuple[float, float]) -> None:
        await perform_action(PageInput(page), action, ratio, wait_s=self.config.wait_s)

    # -- capture ---------------------------------------------------------------------------
    async def _capture_or_restart(self, display: Size, notes: list[str], early: bytes | None) -> Screenshot:
        shown = self.chromium.page
        if early is not None and shown is not None:  # taken while the last action settled
            return await self._capture(shown, display, notes, early)
        for attempt in (1, 2, 3):
            # The page may have closed since the actions (its browser died in between).
            page, more = await self.chromium.ensure_page()
            notes.extend(more)
            try:
                return await self._capture(page, display, notes)
            except PlaywrightError as exc:
                if attempt == 3:
                    raise SandboxUnavailable(f"screenshot failed: {say.first_line(exc)}") from exc
                if not await self.chromium.alive(page):
                    notes.append("the browser died before the screenshot")
                    continue
                # A navigation replaced the document mid-capture: let it land, capture again.
                with suppress(PlaywrightError):
                    await page.wait_for_load_state("load", timeout=self.config.settle_timeout_s * 1000)
        raise AssertionError("unreachable")

    async def _screenshot(self, page: Page) -> bytes:
        return await page.screenshot(type="png", style=self._redact_css, caret="hide")

    async def _capture(self, page: Page, display: Size, notes: list[str], png: bytes | None = None) -> Screenshot:
        if png is None:
            png = await self._screenshot(page)
        png = await fitted(png, display)
        return Screenshot(png=png, size=display, url=page.url, notes=tuple(notes))

    # -- navigation ------------------------------------------------------------------------
    async def navigate(self, url: str) -> Navigation:
        async with self._lock:
            page, notes = await self.chromium.ensure_page()
            verdict = await self.rules.check(url)
            if not verdict.allowed:
                await self.router.show_blocked(page, url, verdict)
                return await self._where(page, notes, verdict)
            try:
                await page.goto(url, wait_until="load")
                await self.router.landed(page)
            except PlaywrightError as exc:
                if not await self.chromium.alive(page):
                    notes.append(f"the browser died while navigating to {url}")
                    page, more = await self.chromium.ensure_page()
                    notes.extend(more)
                else:
                    notes.append(f"navigation did not finish: {say.first_line(exc)}")
            return await self._where(page, notes, self.router.blocked.get(url))

    async def back(self) -> Navigation:
        return await self._history("back")

    async def forward(self) -> Navigation:
        return await self._history("forward")

    async def _history(self, direction: Literal["back", "forward"]) -> Navigation:
        async with self._lock:
            page, notes = await self.chromium.ensure_page()
            go = page.go_back if direction == "back" else page.go_forward
            try:
                if await go(wait_until="load") is None and page.url == "about:blank":
                    notes.append(f"there is no page to go {direction} to")
                await self.router.landed(page)
            except PlaywrightError as exc:
                notes.append(f"going {direction} did not finish: {say.first_line(exc)}")
            note = await self.router.recheck(page)
            if note:
                notes.append(note)
            return await self._where(page, notes, self.router.blocked.get(page.url))

    async def _where(self, page: Page, notes: list[str], blocked: Verdict | None) -> Navigation:
        try:
            title = await page.title()
        except PlaywrightError:
            title = ""
        return Navigation(url=page.url, title=title, blocked=blocked, notes=tuple(notes))

    async def current_url(self) -> str:
        async with self._lock:
            page, _ = await self.chromium.ensure_page()
            return page.url

    async def evaluate(self, expression: str) -> Any:
        """Run JavaScript in the shown page (for tests and diagnostics, never for the model)."""
        async with self._lock:
            page, _ = await self.chromium.ensure_page()
            return await page.evaluate(expression)
