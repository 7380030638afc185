"""A WebSocket echo server for the browser tests (the ``websockets`` asyncio server, on
127.0.0.1, in a thread with its own event loop), and the checks both placements run on it."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import quote

from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from sandbox.browser import PlaywrightBrowser

#: How long a check waits for something the page or the server should see (a deadline, not a
#: timing assertion: it only turns a hang into a failure).
DEADLINE_S = 15.0


@dataclass
class Echo:
    """What the echo server saw: every handshake, and every connection's end."""

    port: int = 0
    opened: list[tuple[str, str, str]] = field(default_factory=list)  # path, Host, Cookie
    closed: dict[str, tuple[int | None, str | None]] = field(default_factory=dict)  # path -> code, reason
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def url(self, path: str, host: str = "allowed.test") -> str:
        return f"ws://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        with self._changed:
            return [path for path, _, _ in self.opened]

    def wait_closed(self, path: str) -> tuple[int | None, str | None]:
        """Block until the server's connection for ``path`` has ended (run it in a thread)."""
        with self._changed:
            if not self._changed.wait_for(lambda: path in self.closed, DEADLINE_S):
                raise AssertionError(f"the server's connection for {path} did not close")
            return self.closed[path]

    def _redirect(self, conn: ServerConnection, request: Request) -> Response | None:
        """/moved answers its handshake with a same-origin redirect (which must not be followed)."""
        if not request.path.startswith("/moved"):
            return None
        with self._changed:
            self.opened.append((request.path, request.headers.get("Host", ""), request.headers.get("Cookie", "")))
        response = conn.respond(HTTPStatus.FOUND, "")
        response.headers["Location"] = "/moved-target"
        return response

    async def _handle(self, conn: ServerConnection) -> None:
        request = conn.request
        assert request is not None
        path = request.path
        with self._changed:
            self.opened.append((path, request.headers.get("Host", ""), request.headers.get("Cookie", "")))
        try:
            if path.startswith("/bye"):  # the server ends the conversation
                await conn.close(4000, "server says bye")
                return
            async for message in conn:
                await conn.send(message)  # str stays text, bytes stay binary
        finally:
            with self._changed:
                self.closed[path] = (conn.close_code, conn.close_reason)
                self._changed.notify_all()


@contextmanager
def echo_server() -> Iterator[Echo]:
    echo = Echo()
    ready = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        async with serve(echo._handle, "127.0.0.1", 0, process_request=echo._redirect) as server:
            echo.port = server.sockets[0].getsockname()[1]
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(DEADLINE_S), "the echo server did not start"
    try:
        yield echo
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(DEADLINE_S)
        loop.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def socket_page(site_url: str, ws_url: str, sid: str) -> str:
    """The /ws test page at ``site_url``, told which socket to open and which cookie to set."""
    return f"{site_url}/ws?sid={sid}&url={quote(ws_url, safe='')}"


async def wait_page(browser: PlaywrightBrowser, condition: str) -> object:
    """Poll a JavaScript expression in the page until it is truthy; return its value."""
    script = ("new Promise(r => { const t = setInterval(() => { const v = (" + condition + ");"
              " if (v) { clearInterval(t); r(v); } }, 10); })")
    return await asyncio.wait_for(browser.evaluate(script), DEADLINE_S)


async def echoes(browser: PlaywrightBrowser, count: int) -> list[str]:
    """The page's echo list once it has ``count`` entries (or the socket closed first)."""
    await wait_page(browser, f"echoes.children.length >= {count} || state.textContent.startsWith('closed')")
    return list(await browser.evaluate("[...echoes.children].map(li => li.textContent)"))


async def check_echo_and_close(browser: PlaywrightBrowser, echo: Echo, site_url: str, path: str) -> None:
    """The page's text and binary messages come back through the host; its close reaches the server."""
    await browser.navigate(socket_page(site_url, echo.url(path), sid=path.strip("/")))
    assert await echoes(browser, 2) == ["text:hello", "binary:1,2,255"]
    assert await browser.evaluate("state.textContent") == "open"
    # the handshake kept the page's host name (resolve only moved the TCP connection) and the cookie
    assert (path, f"allowed.test:{echo.port}", f"sid={path.strip('/')}") in echo.opened
    await browser.evaluate("ws.close(4001, 'page is done')")
    assert await asyncio.to_thread(echo.wait_closed, path) == (4001, "page is done")
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == (
        "closed 4001 page is done")


async def check_blocked(browser: PlaywrightBrowser, echo: Echo, site_url: str, path: str) -> None:
    """A socket to a blocked host is closed with 1008 and never reaches the server."""
    await browser.navigate(socket_page(site_url, echo.url(path, host="blocked.test"), sid="b"))
    assert await wait_page(browser, "state.textContent.startsWith('closed') && state.textContent") == (
        "closed 1008 blocked by sandloop")
    assert await browser.evaluate("echoes.textContent") == ""
    assert path not in echo.paths()
