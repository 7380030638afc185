"""Websockets, bridged through the host: the page's socket is a route, its upstream the host's.

One path for both placements: an allowed socket's upstream connection is opened on the host with
the ``websockets`` client (Playwright's ``connect_to_server`` would connect from inside the page,
which has no network in the container), with the same name mapping and cookies as a fetch, and
bridged message by message to the page's routed socket. A blocked socket is closed with 1008.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from playwright.async_api import BrowserContext, WebSocketRoute
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from sandbox.browser.rules import BlockedRequest, UrlRules
from sandbox.computer.notes import first_line

__all__ = ["Sockets"]

log = logging.getLogger("sandloop.browser")

_WS_OPEN_TIMEOUT_S = 10.0
_WS_CLOSE_TIMEOUT_S = 3.0  # how long a closing handshake may take before the TCP link is cut
_WS_MAX_MESSAGE = 32 * 2**20  # larger than any page needs; a bigger message closes with 1009


class Sockets:
    """The websockets of one browser context (routed by ``context.route_web_socket``)."""

    def __init__(self, context: BrowserContext, rules: UrlRules) -> None:
        self.context = context
        self.rules = rules
        self._bridges: set[_SocketBridge] = set()  # allowed websockets, bridged on the host
        self._shut = False

    async def route(self, ws: WebSocketRoute) -> None:
        """Bridge an allowed websocket through the host; close a blocked one (1008).

        Playwright opens the page's socket when this handler returns, so the page sees ``open``
        only once the upstream handshake succeeded, and an upstream that refuses is a close
        before ``open``, as in a browser.
        """
        verdict = await self.rules.check(ws.url)
        if verdict.allowed:
            verdict = await self.rules.address(ws.url) or verdict
        if not verdict.allowed:
            self.rules.report(BlockedRequest(ws.url, verdict, False, "websocket"))
            await ws.close(code=1008, reason="blocked by sandloop")
            return
        try:
            upstream = await self._connect(ws)
        except Exception as exc:  # refused, reset, timeout, bad handshake: the page must hear of it
            # (were this handler to raise, Playwright would leave the page's socket connecting)
            log.info("websocket %s did not connect: %s", ws.url, first_line(exc))
            await ws.close(code=1006, reason="")  # what a browser reports: no close frame
            return
        if self._shut:  # the browser went away while we connected
            await upstream.close(1001, "browser closed")
            return
        bridge = _SocketBridge(ws, upstream)
        self._bridges.add(bridge)
        bridge.start(done=self._bridges.discard)

    async def _connect(self, ws: WebSocketRoute) -> ClientConnection:
        """The host's connection for an allowed socket: same mapping and cookies as a fetch."""
        parts = urlsplit(ws.url)
        headers: dict[str, str] = {}
        # the cookies a browser would send with the handshake
        http_url = urlunsplit(parts._replace(scheme="https" if parts.scheme == "wss" else "http"))
        cookies = await self.context.cookies([http_url])
        if cookies:
            headers["cookie"] = "; ".join(f"{c['name']}={c['value']}" for c in cookies)
        # resolve changes only where the TCP connection goes (create_connection's host):
        # the URI, hence the Host header and a wss certificate check, keep the page's name.
        address = self.rules.resolve.get(parts.hostname or "")
        target: dict[str, Any] = {}
        if address is not None:
            target = {"host": address, "port": parts.port or (443 if parts.scheme == "wss" else 80)}
        return await _NoRedirects(
            ws.url,
            additional_headers=headers,
            subprotocols=[Subprotocol(p) for p in ws.protocols] or None,
            proxy=None,  # like the HTTP fetch: no proxy from the environment
            open_timeout=_WS_OPEN_TIMEOUT_S,
            close_timeout=_WS_CLOSE_TIMEOUT_S,
            max_size=_WS_MAX_MESSAGE,
            **target,
        )

    async def shut(self) -> None:
        """The browser is going away: close every upstream (1001), and any still connecting."""
        self._shut = True
        await asyncio.gather(*(bridge.shut() for bridge in list(self._bridges)))


class _NoRedirects(ws_connect):
    """The ``websockets`` client, minus its redirect following.

    A browser fails a websocket whose handshake is answered with anything but 101; following a
    Location here would also reach a URL the domain rules never saw.
    """

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc


@dataclass(frozen=True)
class _PageClosed:
    code: int | None
    reason: str | None


def _sendable_code(code: int | None) -> int:
    """A close code the page reported, as one that may go into a close frame (RFC 6455 7.4)."""
    if code is not None and (1000 <= code <= 1014 or 3000 <= code <= 4999) and code not in (1004, 1005, 1006):
        return code
    return 1000


class _SocketBridge:
    """One allowed websocket: the page's end (a Playwright route) pumped to the host's end.

    Page -> upstream goes through a queue, so messages keep their order (Playwright runs each
    message handler as a task of its own) and the upstream's backpressure is awaited in one
    place; upstream -> page is ``WebSocketRoute.send``, which Playwright sends in call order.
    Whichever side closes first, the other is closed with its code and reason.
    """

    def __init__(self, page: WebSocketRoute, upstream: ClientConnection) -> None:
        self.page = page
        self.upstream = upstream
        self._from_page: asyncio.Queue[str | bytes | _PageClosed] = asyncio.Queue()
        self._page_closing = False  # the page closed first: _to_upstream finishes both sides
        self._shutting = False  # the browser is going away: nothing to tell the page
        self._task: asyncio.Task[None] | None = None
        page.on_message(self._from_page.put_nowait)
        page.on_close(lambda code, reason: self._from_page.put_nowait(_PageClosed(code, reason)))

    def start(self, done: Callable[[_SocketBridge], None]) -> None:
        self._task = asyncio.create_task(self._run(), name=f"websocket {self.page.url}")
        self._task.add_done_callback(lambda _: done(self))

    async def _run(self) -> None:
        to_upstream = asyncio.create_task(self._to_upstream())
        try:
            with suppress(ConnectionClosed):
                async for message in self.upstream:  # ends when the upstream is closed, either way
                    self.page.send(message)
        finally:
            if not self._page_closing:
                to_upstream.cancel()
        await asyncio.wait([to_upstream])
        if not (self._page_closing or self._shutting):  # the upstream closed first
            code, reason = self.upstream.close_code, self.upstream.close_reason
            await self.page.close(code=code if code is not None else 1006, reason=reason or "")

    async def _to_upstream(self) -> None:
        while True:
            item = await self._from_page.get()
            if isinstance(item, _PageClosed):
                self._page_closing = True
                await self.upstream.close(_sendable_code(item.code), item.reason or "")
                # With an on_close handler Playwright leaves the page's socket closing until
                # the route closes it: done now, after the upstream's closing handshake.
                await self.page.close(code=1005 if item.code is None else item.code, reason=item.reason)
                return
            try:
                await self.upstream.send(item)
            except ConnectionClosed:
                return  # _run sees it too and tells the page

    async def shut(self) -> None:
        """Close the upstream because the browser is going away (1001, "going away")."""
        self._shutting = True
        await self.upstream.close(1001, "browser closed")
        if self._task is not None:
            await asyncio.wait([self._task])
