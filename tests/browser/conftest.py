"""Shared fixtures: the test pages, served on 127.0.0.1 by a stdlib http.server in a thread.

Besides the fixed pages (tests.browser.pages), a test can add its own resources at run time
(:meth:`Site.add`), and have the server hold one until the test releases it (:class:`Held`):
how a test makes "the response comes late" happen on purpose instead of by luck.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image

from sandloop.verdict import Decision, Verdict
from tests.browser import pages
from tests.browser.sockets import Echo, echo_server

#: How long a held response may wait for its release before the server gives up on the test
#: (a cleanup bound for the server's thread, never part of what a test asserts).
HOLD_LIMIT_S = 120.0


@dataclass
class Held:
    """A response the server holds: ``arrived`` once requested, sent once ``release`` is called."""

    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


@dataclass
class Resource:
    body: str
    content_type: str
    held: Held


@dataclass
class Site:
    port: int
    hits: list[tuple[str, str, str, str]] = field(default_factory=list)  # method, host, path, body
    resources: dict[str, Resource] = field(default_factory=dict)  # path (no query) -> resource

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for _, _, path, _ in self.hits]

    def add(self, path: str, body: str, content_type: str = "text/html; charset=utf-8", *,
            held: bool = False) -> Held:
        """Serve ``body`` at ``path`` (any query), held until released when ``held``."""
        gate = Held()
        if not held:
            gate.release()
        self.resources[path] = Resource(body, content_type, gate)
        return gate


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: str) -> None:
            site.hits.append((self.command, self.headers.get("Host", ""), self.path,
                              getattr(self, "_body", "")))
            path = urlsplit(self.path).path
            resource = site.resources.get(path)
            page = pages.PAGES.get(path) if resource is None else resource.body
            content_type = resource.content_type if resource else "text/html; charset=utf-8"
            if resource is not None:
                resource.held.arrived.set()
                resource.held.released.wait(HOLD_LIMIT_S)
            data = (page if page is not None else body).replace("{port}", str(site.port)).encode()
            self.send_response(200 if page is not None or body else 404)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")  # history navigations fetch again
            self.end_headers()
            self.wfile.write(data)

        def _redirect(self, status: int) -> bool:
            """/redirect?to=URL answers with a redirect the browser must re-check; /loop with itself."""
            parts = urlsplit(self.path)
            if parts.path not in ("/redirect", "/loop"):
                return False
            site.hits.append((self.command, self.headers.get("Host", ""), self.path, getattr(self, "_body", "")))
            to = parse_qs(parts.query)["to"][0] if parts.path == "/redirect" else self.path
            self.send_response(status)
            self.send_header("Location", to.replace("{port}", str(site.port)))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def do_GET(self) -> None:
            if not self._redirect(302):
                self._answer("")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._body = self.rfile.read(length).decode()
            if not self._redirect(303):  # post/redirect/get
                self._answer(f"<!doctype html><title>posted</title><p id=posted>{self._body}</p>")

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="session")
def site() -> Iterator[Site]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(Site(0)))
    site = Site(server.server_address[1])
    server.RequestHandlerClass = _handler(site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield site
    server.shutdown()
    server.server_close()


#: allowed.test and blocked.test are both served by the test server: only the rules can keep a
#: request from reaching it. The mapping is applied by the host-side fetch (BrowserConfig.resolve).
RESOLVE = {"allowed.test": "127.0.0.1", "blocked.test": "127.0.0.1"}


def domain_rules(url: str) -> Verdict:
    """A small allow/block list as the policy engine would answer it (exact host, *.suffix)."""
    host = urlsplit(url).hostname or ""
    if host == "blocked.test" or host.endswith(".blocked.test"):
        return Verdict(Decision.DENY, "blocked.test is on the block list", "test.block", "test:1")
    if host in ("allowed.test", "127.0.0.1"):
        return Verdict(Decision.ALLOW, "on the allow list", "test.allow", "test:2")
    return Verdict(Decision.DENY, "not on the allow list", None, "test:default")


def png_size(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG"
        return image.size


def pixel(png: bytes, x: int, y: int) -> tuple[int, ...]:
    with Image.open(io.BytesIO(png)) as image:
        return tuple(image.convert("RGB").getpixel((x, y)))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def echo() -> Iterator[Echo]:
    """The WebSocket echo server (tests.browser.sockets); allowed.test/blocked.test map to it too."""
    with echo_server() as server:
        yield server
