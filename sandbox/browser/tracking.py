"""Main-frame navigations as the host sees them, from Playwright's page events.

The settle step (:mod:`sandbox.browser.settle`) asks two witnesses whether an action started a
navigation; this is the host's: a request went out, committed, failed, a document was parsed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from urllib.parse import urldefrag

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, Request

__all__ = ["MainFrameNavigations", "is_main_frame_navigation", "navigated_away"]


def is_main_frame_navigation(request: Request) -> bool:
    try:
        return request.is_navigation_request() and request.frame.parent_frame is None
    except PlaywrightError:  # no frame (service worker request)
        return False


def navigated_away(exc: BaseException) -> bool:
    """Playwright's error when a navigation destroyed the document a script ran in."""
    return "context was destroyed" in str(exc)


class MainFrameNavigations:
    """What the host has seen of main-frame navigations, from Playwright's page events.

    ``seq`` moves on every start, commit and end, so "did anything happen since this action
    began?" is one comparison, whichever document the page shows now. ``in_flight`` holds, per
    page, the navigation request that has not yet committed or failed.
    """

    def __init__(self) -> None:
        self.seq = 0
        self._pending: dict[Page, Request] = {}
        self._changed = asyncio.Event()

    def _bump(self) -> None:
        self.seq += 1
        self._changed.set()

    @property
    def in_flight(self) -> bool:
        return bool(self._pending)

    def pending_url(self) -> str | None:
        return next((request.url for request in self._pending.values()), None)

    def started(self, page: Page, request: Request) -> None:
        self._pending[page] = request  # a newer navigation supersedes the older one
        self._bump()

    def committed(self, page: Page, url: str) -> None:
        request = self._pending.get(page)
        # A same-document navigation (pushState, #hash) while a request is out ends nothing.
        if request is not None and urldefrag(request.url).url == urldefrag(url).url:
            del self._pending[page]
        self._bump()

    def ended(self, page: Page, request: Request | None = None) -> None:
        """The page's navigation failed (``request``), or any it had is over (a new document
        parsed, the page closed or crashed)."""
        if request is None or self._pending.get(page) is request:
            self._pending.pop(page, None)
        self._bump()

    def forget(self) -> None:
        self._pending.clear()
        self._bump()

    async def moved(self, since: int, deadline: float) -> bool:
        """Wait until anything happened after ``since`` (a ``seq``), by ``deadline`` (loop time)."""
        return await self._until(lambda: self.seq != since, deadline)

    async def idle(self, deadline: float) -> bool:
        """Wait until no navigation request is in flight, by ``deadline`` (loop time)."""
        return await self._until(lambda: not self._pending, deadline)

    async def _until(self, condition: Callable[[], bool], deadline: float) -> bool:
        loop = asyncio.get_running_loop()
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True
