"""Redirects, hop by hop: every Location is checked before it is followed.

Playwright never routes the hops of a redirect the browser follows, so the host-side fetch
follows none (:mod:`sandbox.browser.routing`). A subresource's next hop is fetched on the host
(:func:`next_hop`: the request a browser would make); a navigation's next hop is answered with a
stub document (:func:`stub`) that replaces itself with the target once loaded, so the hop is a
navigation of its own, routed and checked again, and the page ends up at the target's URL and
origin. :class:`RedirectChain` is how the settle step and navigations know that such a chain
of stubs has landed.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
from collections.abc import Mapping
from urllib.parse import urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

__all__ = ["MAX_REDIRECTS", "REDIRECTS", "RedirectChain", "next_hop", "stub"]

log = logging.getLogger("sandloop.browser")

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 20
_STUB = "<!doctype html><title>redirecting</title><body onload='location.replace({target})'>"


def stub(target: str) -> str:
    """The document an allowed navigation redirect is answered with: it goes on to ``target``."""
    return _STUB.format(target=html.escape(json.dumps(target)))


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def next_hop(
    status: int, method: str, headers: Mapping[str, str], body: bytes | None, source: str, target: str
) -> tuple[str, dict[str, str], bytes | None]:
    """The request a browser makes for a redirect's next hop (the Fetch standard's rules)."""
    out = dict(headers)
    if (status == 303 and method not in ("GET", "HEAD")) or (status in (301, 302) and method == "POST"):
        method, body = "GET", b""  # b"", not None: None would make route.fetch resend the original
        for name in ("content-type", "content-length", "content-encoding", "content-language", "content-location"):
            out.pop(name, None)
    if _origin(source) != _origin(target):
        out.pop("authorization", None)  # credentials the page set for one origin stay there
    return method, out, body


class RedirectChain:
    """A main-frame redirect chain in flight, as far as the host answered it.

    Serving a stub opens the chain; any other answer to a main-frame navigation (a page, the
    blocked page, an error) is its last, and the chain is over once that document commits.
    """

    def __init__(self) -> None:
        self._done = asyncio.Event()
        self._done.set()
        self._answered = False  # the chain's last response was sent, not yet committed
        self.hops: dict[str, int] = {}  # a stub's target -> redirects that led to it

    @property
    def open(self) -> bool:
        return not self._done.is_set()

    def answering(self) -> None:
        """A main-frame navigation is being answered. Marked before answering: the commit event
        can arrive before the answer returns. :meth:`stub_sent` takes it back."""
        self._answered = True

    def stub_sent(self) -> None:
        self._answered = False
        self._done.clear()

    def committed(self) -> None:
        """A main-frame document committed: if it was the chain's last answer, the chain is over."""
        if self._answered:
            self._answered = False
            self._done.set()

    async def landed(self, page: Page, deadline: float) -> bool:
        """Wait until the chain has landed and its document loaded, by ``deadline`` (loop time)."""
        if not self.open:
            return True
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._done.wait(), max(deadline - loop.time(), 0))
        except TimeoutError:  # the stub was left some other way; do not wait for it again
            log.info("a redirect from %s did not land", page.url)
            self._done.set()
            return False
        try:
            await page.wait_for_load_state("load", timeout=max(deadline - loop.time(), 0.001) * 1000)
        except PlaywrightTimeoutError:
            return False
        except PlaywrightError:
            pass  # closed or crashed: the capture restarts it
        return True
