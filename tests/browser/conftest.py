"""Shared fixtures: the test pages, served on 127.0.0.1 by a stdlib http.server in a thread."""

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


@dataclass
class Site:
    port: int
    hits: list[tuple[str, str, str, str]] = field(default_factory=list)  # method, host, path, body

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for _, _, path, _ in self.hits]


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: str) -> None:
            site.hits.append((self.command, self.headers.get("Host", ""), self.path,
                              getattr(self, "_body", "")))
            page = pages.PAGES.get(urlsplit(self.path).path)
            data = (page if page is not None else body).replace("{port}", str(site.port)).encode()
            self.send_response(200 if page is not None or body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
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
