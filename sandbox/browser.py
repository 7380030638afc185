"""The browser back-end for computer_call: one Playwright Chromium page per session.

:class:`Browser` is the interface the computer handler uses: run a list of computer actions
and return ONE screenshot; navigate/back/forward; the current URL; close. Two placements sit
behind it and share every line of page logic (:class:`PlaywrightBrowser`); they differ only in
where Chromium runs:

* :class:`ContainerBrowser` — Chromium inside a hardened container (the ``browser`` image) with
  no network at all, driven over ``--remote-debugging-pipe`` relayed through the container's
  attached stdin/stdout (:mod:`sandbox.browser_relay`): no debugging port exists anywhere;
* :class:`LocalBrowser` — Playwright launches Chromium on the host (for users without Docker).

Isolation inside the page is the same for both: fixed viewport at device scale factor 1, one
context per session, downloads and service workers refused, only http(s) (and about:blank)
navigations, and every request — navigations, subresources, fetch(), websockets — checked by
``allow_url`` through Playwright routing. An allowed request is then fetched by Playwright's
driver on the host (``route.fetch``) and handed to the page (``route.fulfill``), in both
placements: one code path, and the only way the network-less container gets any bytes. An
allowed websocket is likewise connected from the host (the ``websockets`` client, the same
``resolve`` mapping) and bridged message by message to the page's routed socket.
Playwright never routes the hops of a redirect the browser follows, so that fetch follows none:
each Location is checked first, then a navigation's hop becomes a navigation of its own (routed
and checked again) and a subresource's hop is fetched on the host. A crashed browser is
restarted and the call still gets a screenshot; a bad action is reported in
:attr:`Screenshot.notes`, never raised.

After every action the page settles (:meth:`PlaywrightBrowser._settle`): a navigation the
action started — a link, a submission by ENTER or click, ``location`` set now or from a timer
its handler set, a history step, a redirect — is waited for until the new document has loaded,
so the next action and the screenshot see the new page, not the old one or a blank one. The
wait is bounded by ``BrowserConfig.settle_timeout_s`` and ``navigation_timeout_s``; past them
the screenshot shows how far the page got, and a note says so.
"""

from __future__ import annotations

import abc
import asyncio
import html
import inspect
import ipaddress
import json
import logging
import re
import shlex
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit

from playwright.async_api import Browser as PWBrowser
from playwright.async_api import (
    BrowserContext,
    Download,
    Frame,
    Page,
    Playwright,
    Request,
    Route,
    WebSocketRoute,
    async_playwright,
)
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from sandbox.computer import notes as say
from sandbox.computer.actions import Action, ActionLike, moves_content, validate
from sandbox.computer.base import Computer
from sandbox.computer.input import Button, perform_action
from sandbox.computer.screen import Screenshot, Size, declared, fitted, scale
from sandloop.errors import NotAnAddress, SandboxUnavailable
from sandloop.matching import ip_literal
from sandloop.verdict import Decision, Verdict

__all__ = [
    "BlockedRequest",
    "Browser",
    "BrowserConfig",
    "ContainerBrowser",
    "LocalBrowser",
    "Navigation",
    "PlaywrightBrowser",
    "Screenshot",
    "open_browser",
]

log = logging.getLogger("sandloop.browser")

#: The domain rules: a verdict, or an awaitable one (a gate that may ask a human and records
#: every decision).
UrlCheck = Callable[[str], Verdict | Awaitable[Verdict]]

DEFAULT_VIEWPORT: Size = (1280, 800)
# Flags both placements pass: nothing phones home, nothing updates itself, scrolling is
# immediate (so the screenshot after a scroll shows where it ended, not an animation frame).
COMMON_ARGS = (
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-smooth-scrolling",
    "--password-store=basic",
)
_NAV_SCHEMES = frozenset({"http", "https"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 20
_NET_SCHEMES = frozenset({"http", "https", "ws", "wss"})
_WS_OPEN_TIMEOUT_S = 10.0
_WS_CLOSE_TIMEOUT_S = 3.0  # how long a closing handshake may take before the TCP link is cut
_WS_MAX_MESSAGE = 32 * 2**20  # larger than any page needs; a bigger message closes with 1009
_MOUSE_BUTTONS: dict[str, Literal["left", "right", "middle"]] = {
    "left": "left",
    "right": "right",
    "wheel": "middle",
}
# What each document tells the settle step (PlaywrightBrowser._settle), installed before the
# page's own scripts. The host learns of a navigation from Playwright's events, but only after
# it started: a form submission starts its navigation in a later task, and the `request` event
# can arrive after our next round trip. So the document keeps, until read:
# * that a navigation was announced: the Navigation API's `navigate` event for another document
#   (a link, location=…, history, a submission), or a `submit` of this document (not
#   method=dialog, not into another frame), unless it was prevented or intercepted (a
#   single-page app's router keeps it in the document);
# * the timers its input handlers set (a click that navigates 300 ms later): timers set while an
#   input event is being handled, or by such a timer, are followed (see `settle`) when due within
#   the horizon the host passes (BrowserConfig.follow_timers_s). The wrappers keep setTimeout's
#   behaviour; an input task is "over" at the first timer turn after it (its own 0 ms timers
#   are queued behind that one, so they are still counted).
# `settle(frame, horizon)` waits a frame (after a scroll or drag, so the capture shows where the
# page ended up) and a timer tick, follows those timers, then reads and clears the announcement:
# 2 a navigation was announced, 1 timers were followed, 0 neither (the page kept still).
_NAV_WATCH_JS = """(() => {
  if (window.__sandloop) return;
  const w = window, realSet = w.setTimeout.bind(w);
  const realClear = w.clearTimeout.bind(w), realClearInterval = w.clearInterval.bind(w);
  const timers = new Map();  // id -> when it is due (performance.now() ms)
  let navigating = null, submit = null, inInput = false, inTimer = 0, ran = false;
  const input = ['pointerdown', 'pointerup', 'mousedown', 'mouseup', 'click', 'dblclick', 'auxclick',
                 'contextmenu', 'keydown', 'keypress', 'keyup', 'beforeinput', 'input', 'change', 'submit'];
  for (const type of input) w.addEventListener(type, e => {
    if (type === 'submit') submit = e;
    if (e.isTrusted && !inInput) { inInput = true; realSet(() => { inInput = false; }, 0); }
  }, true);
  const nav = w.navigation;
  if (nav) {
    nav.addEventListener('navigate', e => {
      if (!e.destination.sameDocument && !e.downloadRequest) navigating = e; });
    // an intercepted navigation (a single-page app's router) stays in this document
    const handled = () => { navigating = null; submit = null; };
    nav.addEventListener('navigatesuccess', handled);
    nav.addEventListener('navigateerror', handled);
  }
  w.setTimeout = function setTimeout(handler, ms, ...args) {
    if (!(inInput || inTimer) || typeof handler !== 'function') return realSet(handler, ms, ...args);
    const id = realSet(() => {
      timers.delete(id); inTimer++; ran = true;
      try { handler.apply(w, args); } finally { inTimer--; }
    }, ms);
    timers.set(id, performance.now() + Math.max(0, Number(ms) || 0));
    return id;
  };
  // timeouts and intervals share one id space: either call may clear a timeout
  w.clearTimeout = function clearTimeout(id) { timers.delete(id); realClear(id); };
  w.clearInterval = function clearInterval(id) { timers.delete(id); realClearInterval(id); };
  const tick = ms => new Promise(resolve => realSet(resolve, ms));
  const leaves = e => !e.defaultPrevented && !(nav && nav.transition);  // not stopped, not intercepted
  // a submission that leaves this document: not method=dialog, not into another frame or window
  const from = (e, name) =>
    ((e.submitter && e.submitter.getAttribute('form' + name)) || e.target.getAttribute(name) || '').toLowerCase();
  const here = e => {
    const base = document.querySelector('base[target]');
    const target = from(e, 'target') || (base ? base.target.toLowerCase() : '');
    return from(e, 'method') !== 'dialog' && ['', '_self', '_top', '_parent'].includes(target);
  };
  const announced = () => navigating ? leaves(navigating) : !!submit && leaves(submit) && here(submit);
  async function settle(frame, horizon) {
    if (frame) await new Promise(resolve => requestAnimationFrame(() => resolve()));
    await tick(0);
    const until = performance.now() + horizon;
    let followed = ran;  // one already ran (a 0 ms timer): the page did not keep still
    // a followed timer leaves the map when it runs or is cleared; the grace covers a late one
    while (!announced() && performance.now() < until + 250) {
      let next = -1;
      for (const due of timers.values()) if (due <= until && due > next) next = due;
      if (next < 0) break;
      followed = true;
      // a whole millisecond past the last one (delays are whole ms), then a turn for what it did
      await tick(Math.max(0, Math.ceil(next - performance.now()) + 1));
      await tick(0);
    }
    const result = announced() ? 2 : followed ? 1 : 0;
    navigating = null; submit = null; ran = false;
    return result;
  }
  Object.defineProperty(w, '__sandloop', { value: Object.freeze({ settle }) });
})();"""
_SETTLE_JS = "([frame, horizon]) => window.__sandloop ? window.__sandloop.settle(frame, horizon) : 0"
_ANNOUNCED, _FOLLOWED, _STILL = 2, 1, 0
# What an allowed navigation redirect is answered with (see PlaywrightBrowser._forward): a stub
# document that replaces itself with the target once loaded, so the next hop is a navigation of
# its own, routed and checked, and the page ends up at the target's URL and origin.
_REDIRECT_STUB = "<!doctype html><title>redirecting</title><body onload='location.replace({target})'>"
_INVALID_SELECTORS_JS = """sels => sels.filter(s => {
  try { document.querySelector(s); return false; } catch (e) { return true; } })"""
# Redaction is a stylesheet applied only while capturing (Playwright's screenshot `style`, which
# also reaches shadow DOM and iframes): brightness(0) blackens the element's text, images and
# children, the background fills the rest of its box. Playwright's overlay `mask` does the same
# job but waits for an extra frame (≈+16 ms per screenshot); this costs nothing measurable.
_REDACT_RULE = (
    "{selectors}{{background:#000!important;filter:brightness(0)!important;"
    "color:#000!important;-webkit-text-fill-color:#000!important}}"
)


@dataclass(frozen=True)
class BrowserConfig:
    """What a session's browser looks like and may do."""

    viewport: Size = DEFAULT_VIEWPORT
    start_url: str = "about:blank"
    wait_s: float = 1.0  # how long the `wait` action waits (the API gives no duration)
    #: CSS selectors of elements painted solid black in every screenshot.
    redact_selectors: tuple[str, ...] = ("input[type=password]",)
    #: The domain rules (policies.engine.PolicyEngine.url). None: every http(s) URL is allowed.
    allow_url: UrlCheck | None = None
    #: Called for every blocked request or navigation (in addition to the log).
    on_block: Callable[[BlockedRequest], None] | None = None
    extra_args: tuple[str, ...] = ()  # extra Chromium flags
    #: host name -> IP address the host-side fetch connects to instead of resolving the name
    #: (like curl's --resolve; tests serve made-up names on 127.0.0.1). The rules still see the
    #: URL as the page wrote it, and the server gets the original Host header. Plain http only:
    #: an https URL rewritten to an address would fail its certificate check.
    resolve: Mapping[str, str] = field(default_factory=dict)
    #: How long a navigation may take to commit and load, whether page.goto or an action
    #: started it (the screenshot is then taken anyway, with a note).
    navigation_timeout_s: float = 15.0
    #: How long a navigation an action announced may take to start (a submission starts its
    #: request in a later task).
    settle_timeout_s: float = 5.0
    #: A timer an action's input handlers set that fires within this many seconds is waited for,
    #: since it may navigate ("redirecting…"); longer ones are not (a toast's 3 s "hide" would
    #: cost 3 s and hide what the model should see). 0 turns this off; capped by settle_timeout_s.
    follow_timers_s: float = 1.0


@dataclass(frozen=True)
class BlockedRequest:
    url: str
    verdict: Verdict
    navigation: bool
    kind: str = "request"  # "request", "websocket" or "navigation"


@dataclass(frozen=True)
class Navigation:
    """Where a navigate/back/forward ended, and why it did not go where asked (if so)."""

    url: str
    title: str = ""
    blocked: Verdict | None = None
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"now at {self.url}" + (f" ({self.title})" if self.title else "")]
        if self.blocked is not None:
            parts.append("blocked: " + _rule_text(self.blocked))
        parts.extend(self.notes)
        return "; ".join(parts)


class Browser(Computer):
    """A browser session: a computer whose screen is one page, which also navigates."""

    environment = "browser"
    screen: Size = DEFAULT_VIEWPORT

    @abc.abstractmethod
    async def navigate(self, url: str) -> Navigation: ...

    @abc.abstractmethod
    async def back(self) -> Navigation: ...

    @abc.abstractmethod
    async def forward(self) -> Navigation: ...

    @abc.abstractmethod
    async def current_url(self) -> str: ...



class _Gone(Exception):
    """The page or the whole browser died under an action."""


def _rule_text(verdict: Verdict) -> str:
    rule = verdict.rule_id or "default"
    where = f" at {verdict.source}" if verdict.source else ""
    return f"rule {rule}{where}: {verdict.justification}"


def _scheme_refused(url: str) -> Verdict:
    scheme = urlsplit(url).scheme or "(none)"
    return Verdict(
        Decision.DENY,
        f"the {scheme}: scheme is not allowed; only http(s) pages may be opened",
        rule_id="browser.scheme",
    )


_ALLOWED = Verdict(Decision.ALLOW, "no domain rules configured")
_BLANK = Verdict(Decision.ALLOW, "about:blank is always allowed", rule_id="browser.scheme")


def _blocked_page(url: str, verdict: Verdict) -> str:
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>Blocked by sandloop</title></head>"
        "<body style='font:20px sans-serif;margin:40px;background:#fff;color:#000'>"
        "<h1>Blocked by sandloop</h1>"
        f"<p>This page was not opened: <code>{html.escape(url)}</code></p>"
        f"<p>Blocked by {html.escape(_rule_text(verdict))}</p></body></html>"
    )


class _MainFrameNavigations:
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


class PlaywrightBrowser(Browser):
    """All page logic; subclasses only say how to get a Playwright ``Browser``."""

    def __init__(self, config: BrowserConfig | None = None) -> None:
        self.config = config or BrowserConfig()
        self.screen = self.config.viewport
        self._pw: Playwright | None = None
        self._browser: PWBrowser | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._crashed = False
        self._lock = asyncio.Lock()
        self._navs = _MainFrameNavigations()
        self._watched: set[Page] = set()  # pages whose events we listen to
        self._blocked: dict[str, Verdict] = {}  # URLs we served the blocked page for
        # A main-frame redirect in flight (see _forward): cleared when a stub is served, set once
        # the document that ends the chain (a page, the blocked page, an error page) commits.
        self._redirect_done = asyncio.Event()
        self._redirect_done.set()
        self._chain_answered = False  # the chain's last response was sent, not yet committed
        self._redirect_hops: dict[str, int] = {}  # a stub's target -> redirects that led to it
        self.blocked_requests: list[BlockedRequest] = []
        self.restarts = 0
        self._sockets: set[_SocketBridge] = set()  # allowed websockets, bridged on the host
        # one rule per selector: an invalid selector must not void the others (checked at start)
        rules = "".join(_REDACT_RULE.format(selectors=s) for s in self.config.redact_selectors)
        self._redact_css = rules or None

    # -- placement hooks -------------------------------------------------------------------
    @abc.abstractmethod
    async def _launch(self, pw: Playwright) -> PWBrowser:
        """Start (or attach to) Chromium."""

    async def _release(self) -> None:
        """Free whatever _launch created beyond the Playwright browser (e.g. a container)."""

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        async with self._lock:
            await self._ensure_page()

    async def _start(self) -> None:
        if self._pw is None:
            self._pw = await async_playwright().start()
        self._browser = await self._launch(self._pw)
        width, height = self.screen
        self._context = await self._browser.new_context(
            viewport={"width": width, "height": height},
            device_scale_factor=1,
            accept_downloads=False,
            service_workers="block",  # a service worker would answer requests past our routes
        )
        self._context.set_default_navigation_timeout(self.config.navigation_timeout_s * 1000)
        await self._context.add_init_script(_NAV_WATCH_JS)
        await self._context.route("**/*", self._on_route)
        await self._context.route_web_socket(re.compile(r".*"), self._on_websocket)
        self._context.on("page", self._adopt)
        page = await self._context.new_page()
        self._adopt(page)
        bad = await page.evaluate(_INVALID_SELECTORS_JS, list(self.config.redact_selectors))
        if bad:  # a configuration error: release everything, nothing will retry
            await self._teardown()
            await self._stop_playwright()
            raise ValueError(f"redact_selectors are not valid CSS selectors: {bad}")
        await self._goto_start(page)

    async def _goto_start(self, page: Page) -> None:
        if self.config.start_url == "about:blank":
            return
        verdict = await self._check(self.config.start_url)
        if not verdict.allowed:
            await self._show_blocked(page, self.config.start_url, verdict)
            return
        try:
            await page.goto(self.config.start_url, wait_until="load")
            await self._through_redirects(page)
        except PlaywrightError as exc:
            log.warning("start URL %s did not load: %s", self.config.start_url, exc)

    async def _teardown(self) -> None:
        # the host side of every websocket goes with the pages that opened them
        await asyncio.gather(*(bridge.shut() for bridge in list(self._sockets)))
        browser, self._browser, self._context, self._page = self._browser, None, None, None
        self._watched.clear()
        self._navs.forget()  # a dead browser's pages never tell us their navigations ended
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
        return say.restarted("browser", why, f"on {self.config.start_url}", "cookies and history")

    async def _stop_playwright(self) -> None:
        if self._pw is not None:
            pw, self._pw = self._pw, None
            await pw.stop()

    async def close(self) -> None:
        async with self._lock:
            await self._teardown()
            await self._stop_playwright()

    # -- the page we show ------------------------------------------------------------------
    def _adopt(self, page: Page) -> None:
        """Make ``page`` the one the model sees (a popup replaces its opener on screen)."""
        self._page = page
        self._crashed = False
        if page in self._watched:  # a page we open comes through the context's "page" event too
            return
        self._watched.add(page)
        page.on("crash", self._on_crash)
        page.on("request", self._on_request)
        page.on("requestfailed", self._on_request_failed)
        page.on("framenavigated", self._on_frame_navigated)
        page.on("domcontentloaded", self._navs.ended)
        page.on("download", self._on_download)
        page.on("close", self._on_page_close)

    def _on_crash(self, page: Page) -> None:
        self._navs.ended(page)
        if page is self._page:
            self._crashed = True

    def _on_page_close(self, page: Page) -> None:
        self._watched.discard(page)
        self._navs.ended(page)
        if page is self._page and self._context is not None:
            others = [p for p in self._context.pages if not p.is_closed()]
            self._page = others[-1] if others else None

    def _main_frame_nav(self, request: Request) -> bool:
        try:
            return request.is_navigation_request() and request.frame.parent_frame is None
        except PlaywrightError:  # no frame (service worker request)
            return False

    def _on_request(self, request: Request) -> None:
        if self._main_frame_nav(request):
            self._navs.started(request.frame.page, request)

    def _on_request_failed(self, request: Request) -> None:
        if self._main_frame_nav(request):
            self._navs.ended(request.frame.page, request)
            # not the end of a redirect chain yet: the error page it gets commits next

    def _on_frame_navigated(self, frame: Frame) -> None:
        if frame.parent_frame is None:
            self._navs.committed(frame.page, frame.url)
            self._chain_landed()

    def _chain_landed(self) -> None:
        if self._chain_answered:
            self._chain_answered = False
            self._redirect_done.set()

    def _on_download(self, download: Download) -> None:
        log.info("download refused: %s", download.url)

    async def _ensure_page(self) -> tuple[Page, list[str]]:
        """The live page, (re)starting whatever died; notes say what happened."""
        notes: list[str] = []
        if self._browser is None:
            await self._start()
        elif not self._browser.is_connected():
            notes.append(await self._restart("had stopped"))
        if self._crashed or self._page is None or self._page.is_closed():
            assert self._context is not None
            why = "page crashed" if self._crashed else "page was closed"
            try:
                page = await self._context.new_page()
                self._adopt(page)
                await self._goto_start(page)
                notes.append(f"the {why}; a fresh page was opened on {self.config.start_url}")
            except PlaywrightError:
                notes.append(await self._restart(f"could not open a page after the {why}"))
        assert self._page is not None
        return self._page, notes

    async def _alive(self, page: Page) -> bool:
        if self._browser is None or not self._browser.is_connected() or page.is_closed():
            return False
        if self._crashed:
            return False
        try:
            await asyncio.wait_for(page.evaluate("1"), timeout=5)
            return True
        except PlaywrightError as exc:  # a navigation in flight is not a death
            return _navigated_away(exc)
        except TimeoutError:
            return False

    # -- domain rules ----------------------------------------------------------------------
    async def _check(self, url: str) -> Verdict:
        if url == "about:blank":
            return _BLANK
        scheme = urlsplit(url).scheme.lower()
        if scheme not in _NET_SCHEMES:
            return _scheme_refused(url)
        return await self._rules(url) if self.config.allow_url else _ALLOWED

    async def _rules(self, url: str) -> Verdict:
        assert self.config.allow_url is not None
        verdict = self.config.allow_url(url)
        return await verdict if inspect.isawaitable(verdict) else verdict

    def _report(self, blocked: BlockedRequest) -> None:
        self.blocked_requests.append(blocked)
        log.warning("blocked %s %s by %s", blocked.kind, blocked.url, _rule_text(blocked.verdict))
        if self.config.on_block is not None:
            self.config.on_block(blocked)

    async def _on_route(self, route: Route) -> None:
        request = route.request
        verdict = await self._check(request.url)
        try:
            if verdict.allowed:
                await self._forward(route)
            else:
                await self._refuse(route, request.url, verdict)
        except PlaywrightError as exc:  # the page went away while we decided
            log.debug("route for %s: %s", request.url, exc)

    def _fetch_target(self, url: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        """The URL the host-side fetch opens and the headers it sends (``config.resolve``)."""
        parts = urlsplit(url)
        address = self.config.resolve.get(parts.hostname or "")
        if address is None:
            return url, headers
        netloc = address + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc)), {**headers, "host": parts.netloc}

    async def _address_verdict(self, url: str) -> Verdict | None:
        """A refusal when ``url``'s name points somewhere non-public the policy does not list.

        The host, not the page, opens every connection, so a name that resolves to the host's
        own loopback or LAN address (its hostname in /etc/hosts, a rebinding DNS record) would
        reach services no page could reach. Such an address is opened only when the policy
        allows the address itself (for IP literals the engine wants an exact entry). Explicit
        ``config.resolve`` mappings and IP literals were already decided by the rules.
        """
        if self.config.allow_url is None:
            return None
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not host or host in self.config.resolve or _is_ip_literal(host):
            return None
        port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return None  # the fetch fails on its own
        scheme = "https" if parts.scheme in ("https", "wss") else "http"
        for *_, sockaddr in infos:
            addr = str(sockaddr[0]).split("%", 1)[0]
            ip = ipaddress.ip_address(addr)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            if ip.is_global:
                continue
            literal = f"[{ip}]" if ip.version == 6 else str(ip)
            listed = await self._rules(f"{scheme}://{literal}/")
            if not listed.allowed:
                return Verdict(
                    Decision.DENY,
                    f"{host} resolves to {ip}, a non-public address the policy does not list "
                    f"(list {ip} in the browser's allow_domains to allow it)",
                    rule_id="browser.address",
                    source=listed.source,
                )
        return None

    async def _forward(self, route: Route) -> None:
        """Fetch an allowed request on the host and answer the page with the response.

        Playwright never routes the hops of a redirect the browser follows, so the fetch
        follows none (``max_redirects=0``) and every Location is checked here first. A blocked
        hop is blocked like the request itself. An allowed hop of a navigation is answered with
        :data:`_REDIRECT_STUB`, so the browser navigates to it (through this route again) and
        lands on its real URL; a subresource's hop is fetched here, and the page gets the last
        response under the first URL.
        """
        request = route.request
        navigation = request.is_navigation_request()
        hops = 0
        if navigation:  # what this URL does now decides; forget what it did last time
            self._blocked.pop(request.url, None)
            hops = self._redirect_hops.pop(request.url, 0)
        if self._main_frame_nav(request):
            # Any answer but a stub ends a redirect chain. Marked before answering: the commit
            # event can arrive before fulfill returns. The stub branch below takes it back.
            self._chain_answered = True
        url, method, headers, post_data = request.url, request.method, request.headers, request.post_data_buffer
        timeout = self.config.navigation_timeout_s * 1000
        for _ in range(_MAX_REDIRECTS + 1):
            denied = await self._address_verdict(url)
            if denied is not None:
                await self._refuse(route, url, denied)
                return
            fetch_url, fetch_headers = self._fetch_target(url, headers)
            try:
                response = await route.fetch(
                    url=fetch_url, method=method, headers=fetch_headers, post_data=post_data,
                    max_redirects=0, timeout=timeout,
                )
            except PlaywrightError as exc:  # unreachable host, reset, timeout: a network error
                log.info("fetch of %s failed: %s", url, _first_line(exc))
                await route.abort("failed")
                return
            location = response.headers.get("location")
            if response.status not in _REDIRECTS or not location:
                await route.fulfill(response=response)
                return
            await response.dispose()
            target = urljoin(url, location)
            verdict = await self._check(target)
            if not verdict.allowed:
                await self._refuse(route, target, verdict)
                return
            if navigation:
                if hops >= _MAX_REDIRECTS:  # a loop across stubs (A -> B -> A ...)
                    break
                self._redirect_hops[target] = hops + 1
                if self._main_frame_nav(request):
                    self._chain_answered = False
                    self._redirect_done.clear()
                body = _REDIRECT_STUB.format(target=html.escape(json.dumps(target)))
                await route.fulfill(status=200, content_type="text/html; charset=utf-8", body=body)
                return
            method, headers, post_data = _next_hop(response.status, method, headers, post_data, url, target)
            url = target
        log.info("too many redirects from %s", request.url)
        await route.abort("failed")

    async def _refuse(self, route: Route, url: str, verdict: Verdict) -> None:
        """Block ``route`` because of ``url`` (the request's own, or where it redirects)."""
        request = route.request
        nav = request.is_navigation_request()
        self._report(BlockedRequest(url, verdict, nav, "navigation" if nav else "request"))
        if nav:  # a plain page that says which rule blocked it, instead of an error
            self._blocked[request.url] = verdict
            await route.fulfill(
                status=403,
                content_type="text/html; charset=utf-8",
                body=_blocked_page(url, verdict),
            )
        else:
            await route.abort("blockedbyclient")

    async def _through_redirects(self, page: Page, deadline: float | None = None) -> bool:
        """Wait until a redirect the main frame is following (see :meth:`_forward`) has landed
        and loaded (by ``deadline``, loop time; default: a navigation timeout from now)."""
        if self._redirect_done.is_set():
            return True
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.config.navigation_timeout_s
        try:
            await asyncio.wait_for(self._redirect_done.wait(), max(deadline - loop.time(), 0))
        except TimeoutError:  # the stub was left some other way; do not wait for it again
            log.info("a redirect from %s did not land", page.url)
            self._redirect_done.set()
            return False
        try:
            await page.wait_for_load_state("load", timeout=max(deadline - loop.time(), 0.001) * 1000)
        except PlaywrightTimeoutError:
            return False
        except PlaywrightError:
            pass  # closed or crashed: the capture restarts it
        return True

    async def _on_websocket(self, ws: WebSocketRoute) -> None:
        """Bridge an allowed websocket through the host; close a blocked one (1008).

        One path for both placements: the upstream connection is opened here, on the host, with
        the ``websockets`` client (Playwright's ``connect_to_server`` would connect from inside
        the page, which has no network in the container). Playwright opens the page's socket
        when this handler returns, so the page sees ``open`` only once the upstream handshake
        succeeded, and an upstream that refuses is a close before ``open``, as in a browser.
        """
        verdict = await self._check(ws.url)
        if verdict.allowed:
            verdict = await self._address_verdict(ws.url) or verdict
        if not verdict.allowed:
            self._report(BlockedRequest(ws.url, verdict, False, "websocket"))
            await ws.close(code=1008, reason="blocked by sandloop")
            return
        context = self._context
        try:
            upstream = await self._connect_upstream(ws)
        except Exception as exc:  # refused, reset, timeout, bad handshake: the page must hear of it
            # (were this handler to raise, Playwright would leave the page's socket connecting)
            log.info("websocket %s did not connect: %s", ws.url, _first_line(exc))
            await ws.close(code=1006, reason="")  # what a browser reports: no close frame
            return
        if self._context is not context:  # the browser went away while we connected
            await upstream.close(1001, "browser closed")
            return
        bridge = _SocketBridge(ws, upstream)
        self._sockets.add(bridge)
        bridge.start(done=self._sockets.discard)

    async def _connect_upstream(self, ws: WebSocketRoute) -> ClientConnection:
        """The host's connection for an allowed socket: same mapping and cookies as a fetch."""
        parts = urlsplit(ws.url)
        headers: dict[str, str] = {}
        if self._context is not None:  # the cookies a browser would send with the handshake
            http_url = urlunsplit(parts._replace(scheme="https" if parts.scheme == "wss" else "http"))
            cookies = await self._context.cookies([http_url])
            if cookies:
                headers["cookie"] = "; ".join(f"{c['name']}={c['value']}" for c in cookies)
        # config.resolve changes only where the TCP connection goes (create_connection's host):
        # the URI, hence the Host header and a wss certificate check, keep the page's name.
        address = self.config.resolve.get(parts.hostname or "")
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

    async def _show_blocked(self, page: Page, url: str, verdict: Verdict) -> None:
        self._report(BlockedRequest(url, verdict, True, "navigation"))
        await page.goto("about:blank")
        await page.set_content(_blocked_page(url, verdict))

    async def _recheck(self, page: Page) -> str | None:
        """After an action: is the page still somewhere the rules allow? Else replace it."""
        url = page.url
        if url == "about:blank" or url.startswith("chrome-error://") or url in self._blocked:
            return None
        verdict = await self._check(url)
        if verdict.allowed:
            return None
        await self._show_blocked(page, url, verdict)
        return f"the page at {url} is not allowed ({_rule_text(verdict)}); it was replaced"

    # -- actions ---------------------------------------------------------------------------
    async def perform(self, actions: Sequence[ActionLike], *, display: Size | None = None) -> Screenshot:
        display = declared(display, self.screen)
        async with self._lock:
            page, notes = await self._ensure_page()
            early: bytes | None = None
            try:
                early = await self._run_all(page, actions, display, notes)
            except _Gone as gone:
                notes.append(str(gone))
                page, more = await self._ensure_page()
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
            since = self._navs.seq
            failed = None
            try:
                await self._do(page, action, ratio)
            except PlaywrightError as exc:
                if not await self._alive(page):
                    raise _Gone(say.died("browser", index)) from exc
                failed = batch.failed(index, _first_line(exc))
            moves = moves_content(action)
            early = None
            if index == len(batch.actions) and failed is None and not moves:
                early = asyncio.ensure_future(self._screenshot(page))
            try:
                # even a failed action may have started a navigation (a history step that timed out)
                settle_notes, still = await self._settle(page, since, frame=moves)
                notes.extend(settle_notes)
                shown = self._page or page  # a popup the action opened is what the model sees now
                note = failed or await self._recheck(shown)
            finally:
                png = await _result(early)
            if note:
                notes.append(note)
                return None
            keep, page = still and shown is page, shown
        if batch.refused:
            notes.append(batch.refused)
        return png if keep else None

    async def _do(self, page: Page, action: Action, scale: tuple[float, float]) -> None:
        await perform_action(_PageInput(page), action, scale, wait_s=self.config.wait_s)

    async def _settle(self, page: Page, since: int, *, frame: bool) -> tuple[list[str], bool]:
        """Let an action take effect and a navigation it started load; notes if one did not, and
        whether the page kept still (no navigation, no timers to follow).

        Two witnesses, because neither sees everything: the document's announcement
        (_NAV_WATCH_JS, one round trip, which also follows the timers its handlers set) dies
        with the document, and the host's events (:class:`_MainFrameNavigations`) come only once
        a request is out. Anything from either since the action began means a navigation:
        wait for its request (``settle_timeout_s``), then its commit and the new document's load
        event and any redirect hops (``navigation_timeout_s`` in all), then ask the new document
        again, since its own scripts may navigate on. Bounded: past the deadlines the capture
        shows how far the page got, and a note says so.
        """
        config, loop = self.config, asyncio.get_running_loop()
        horizon = max(0.0, min(config.follow_timers_s, config.settle_timeout_s))
        start_by = loop.time() + config.settle_timeout_s + horizon
        land_by: float | None = None
        first = True
        while True:
            said = await self._ask(page, frame, horizon)
            if said is None:
                return [], False  # the page is gone or hung; the capture deals with it
            quiet = self._navs.seq == since and not self._navs.in_flight
            if quiet and said != _ANNOUNCED:
                return [], first and said == _STILL
            if quiet and not await self._navs.moved(since, start_by):
                return [], False  # announced, never started (stopped by the page, or a download)
            if land_by is None:
                land_by = loop.time() + config.navigation_timeout_s
            since = self._navs.seq
            landed = await self._navs.idle(land_by)
            url = self._navs.pending_url()
            page = self._page or page
            if landed:
                landed = await self._loaded(page, land_by)
            if not landed:
                where = url or page.url
                return [f"{where} did not finish loading within {config.navigation_timeout_s:g} s; "
                        "the screenshot shows how far it got"], False
            frame, horizon, first = False, 0.0, False

    async def _ask(self, page: Page, frame: bool, horizon: float) -> int | None:
        """The document's settle answer (_ANNOUNCED, _FOLLOWED, _STILL; see _NAV_WATCH_JS), or
        None when it gave none."""
        timeout = self.config.settle_timeout_s + horizon
        try:
            said = await asyncio.wait_for(page.evaluate(_SETTLE_JS, [frame, horizon * 1000]), timeout)
        except PlaywrightError as exc:
            # the document was replaced under us: a navigation is landing
            return _ANNOUNCED if _navigated_away(exc) else None
        except TimeoutError:
            return None
        return said if said in (_ANNOUNCED, _FOLLOWED, _STILL) else _FOLLOWED

    async def _loaded(self, page: Page, deadline: float) -> bool:
        """The shown document's load event, then the end of a redirect chain, by ``deadline``."""
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            await page.wait_for_load_state("load", timeout=max(remaining, 0.001) * 1000)
        except PlaywrightTimeoutError:
            return False
        except PlaywrightError:
            return True  # closed or crashed: the capture restarts it
        if self._redirect_done.is_set():
            return True
        return await self._through_redirects(page, deadline)

    # -- capture ---------------------------------------------------------------------------
    async def _capture_or_restart(self, display: Size, notes: list[str], early: bytes | None) -> Screenshot:
        if early is not None and self._page is not None:  # taken while the last action settled
            return await self._capture(self._page, display, notes, early)
        for attempt in (1, 2, 3):
            # The page may have closed since the actions (its browser died in between).
            page, more = await self._ensure_page()
            notes.extend(more)
            try:
                return await self._capture(page, display, notes)
            except PlaywrightError as exc:
                if attempt == 3:
                    raise SandboxUnavailable(f"screenshot failed: {_first_line(exc)}") from exc
                if not await self._alive(page):
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
            page, notes = await self._ensure_page()
            verdict = await self._check(url)
            if not verdict.allowed:
                await self._show_blocked(page, url, verdict)
                return await self._where(page, notes, verdict)
            try:
                await page.goto(url, wait_until="load")
                await self._through_redirects(page)
            except PlaywrightError as exc:
                if not await self._alive(page):
                    notes.append(f"the browser died while navigating to {url}")
                    page, more = await self._ensure_page()
                    notes.extend(more)
                else:
                    notes.append(f"navigation did not finish: {_first_line(exc)}")
            return await self._where(page, notes, self._blocked.get(url))

    async def back(self) -> Navigation:
        return await self._history("back")

    async def forward(self) -> Navigation:
        return await self._history("forward")

    async def _history(self, direction: Literal["back", "forward"]) -> Navigation:
        async with self._lock:
            page, notes = await self._ensure_page()
            go = page.go_back if direction == "back" else page.go_forward
            try:
                if await go(wait_until="load") is None and page.url == "about:blank":
                    notes.append(f"there is no page to go {direction} to")
                await self._through_redirects(page)
            except PlaywrightError as exc:
                notes.append(f"going {direction} did not finish: {_first_line(exc)}")
            note = await self._recheck(page)
            if note:
                notes.append(note)
            return await self._where(page, notes, self._blocked.get(page.url))

    async def _where(self, page: Page, notes: list[str], blocked: Verdict | None) -> Navigation:
        try:
            title = await page.title()
        except PlaywrightError:
            title = ""
        return Navigation(url=page.url, title=title, blocked=blocked, notes=tuple(notes))

    async def current_url(self) -> str:
        async with self._lock:
            page, _ = await self._ensure_page()
            return page.url

    async def evaluate(self, expression: str) -> Any:
        """Run JavaScript in the shown page (for tests and diagnostics, never for the model)."""
        async with self._lock:
            page, _ = await self._ensure_page()
            return await page.evaluate(expression)


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


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _next_hop(
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


async def _result(capture: asyncio.Future[bytes] | None) -> bytes | None:
    """A capture started early, once finished (never left running under the next one)."""
    if capture is None:
        return None
    try:
        return await capture
    except PlaywrightError:  # a navigation interrupted it, or the page went away: capture afresh
        return None


def _navigated_away(exc: BaseException) -> bool:
    """Playwright's error when a navigation destroyed the document a script ran in."""
    return "context was destroyed" in str(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _is_ip_literal(host: str) -> bool:
    """The policy's own reading of IP literals (every form Chromium accepts), so the rules and
    this guard never disagree on what is an address."""
    try:
        return ip_literal(host) is not None
    except NotAnAddress:
        return True  # an address-like host Chromium refuses; the rules refuse it too


class _PageInput:
    """The page's mouse and keyboard as a computer's input device (sandbox.computer.input)."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.mouse = page.mouse
        self.keyboard = page.keyboard

    async def move(self, x: float, y: float, *, steps: int = 1) -> None:
        await self.mouse.move(x, y, steps=steps)

    async def click(self, x: float, y: float, button: Button) -> None:
        if button in ("back", "forward"):
            # Chromium handles mouse buttons 4/5 in its window, which a headless page has not:
            # do what the button means, history navigation.
            await self.mouse.move(x, y)
            go = self.page.go_back if button == "back" else self.page.go_forward
            await go(wait_until="commit")
        else:
            await self.mouse.click(x, y, button=_MOUSE_BUTTONS[button])

    async def double_click(self, x: float, y: float) -> None:
        await self.mouse.dblclick(x, y)

    async def down(self) -> None:
        await self.mouse.down()

    async def up(self) -> None:
        await self.mouse.up()

    async def wheel(self, dx: float, dy: float) -> None:
        await self.mouse.wheel(dx, dy)

    async def key_down(self, key: str) -> None:
        await self.keyboard.down(key)

    async def key_up(self, key: str) -> None:
        await self.keyboard.up(key)

    async def type(self, text: str) -> None:
        await self.keyboard.type(text)


# -- placements --------------------------------------------------------------------------------
class LocalBrowser(PlaywrightBrowser):
    """Chromium launched by Playwright on the host: for users without Docker."""

    def __init__(self, config: BrowserConfig | None = None, *, executable_path: str | None = None) -> None:
        super().__init__(config)
        self.executable_path = executable_path

    def _executable(self, pw: Playwright) -> str | None:
        if self.executable_path:
            return self.executable_path
        if Path(pw.chromium.executable_path).exists():
            return None  # Playwright's own build
        return shutil.which("chromium") or "/usr/bin/chromium"  # Debian's

    async def _launch(self, pw: Playwright) -> PWBrowser:
        try:
            return await pw.chromium.launch(
                executable_path=self._executable(pw),
                headless=True,
                args=[*COMMON_ARGS, *self.config.extra_args],
            )
        except PlaywrightError as exc:
            raise SandboxUnavailable(f"Chromium did not start: {_first_line(exc)}") from exc


@dataclass(frozen=True)
class ContainerLimits:
    memory: str = "2g"
    pids: int = 512
    shm: str = "256m"
    ttl_s: int = 4 * 3600  # written as sandloop.expires, for the reaper
    labels: Mapping[str, str] = field(default_factory=dict)


class ContainerBrowser(PlaywrightBrowser):
    """Chromium in a hardened container with no network, driven from the host over a pipe.

    Network: ``network_mode="none"`` — the container has only a loopback interface. Playwright
    launches :mod:`sandbox.browser_relay` as its "Chromium": it starts the container and relays
    the debugging pipe (fds 3/4) over the container's attached stdin/stdout, so no debugging port
    exists for another local user or a compromised renderer to reach. Page traffic is fetched
    on the host by Playwright after the domain rules (``PlaywrightBrowser._forward``), websockets
    are bridged from the host (``PlaywrightBrowser._on_websocket``); nothing the page does can
    open a connection of its own. Everything else is locked down as before:
    no capabilities, no privilege gain, read-only root, tmpfs for /tmp and the profile, memory
    and pid limits, uid 1000.
    """

    def __init__(
        self,
        config: BrowserConfig | None = None,
        *,
        session_id: str | None = None,
        limits: ContainerLimits | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(config)
        self.session_id = session_id or uuid.uuid4().hex[:12]
        self.limits = limits or ContainerLimits()
        self.start_timeout_s = start_timeout_s
        self.container_id: str | None = None
        self._container_name: str | None = None
        self._docker: Any = None
        self._workdir: Path | None = None  # the relay's spec and wrapper script

    def _spec(self, name: str) -> dict[str, Any]:
        """What the relay creates: the hardened container (docker SDK ``create`` arguments)."""
        import docker  # imported here so the local placement works without the docker SDK

        from sandbox import images

        if self._docker is None:
            self._docker = docker.from_env()
        from sandbox.lifecycle import owner_labels

        # The same owner labels as the shell containers (pid, its start time, host, expiry), so
        # the reaper removes a browser whose front-end died, not only an expired one.
        labels = {
            **owner_labels(self.session_id, self.limits.ttl_s, self.limits.ttl_s),
            "sandloop.kind": "browser",
            **self.limits.labels,
        }
        create = {
            # Gone as soon as Chromium exits, even when the relay and the front-end were both
            # SIGKILLed and nobody is left to remove it.
            "auto_remove": True,
            "init": True,  # reap Chromium's helper processes
            "user": "1000:1000",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {
                "/tmp": "rw,nosuid,nodev,size=256m,mode=1777",
                "/home/sandbox": "rw,nosuid,nodev,size=512m,uid=1000,gid=1000,mode=0700",
            },
            "environment": {"HOME": "/home/sandbox"},
            "network_mode": "none",
            "mem_limit": self.limits.memory,
            "pids_limit": self.limits.pids,
            "shm_size": self.limits.shm,
            "labels": labels,
            "name": name,
        }
        return {"image": images.ensure(self._docker, "browser"), "executable": "chromium", "create": create}

    def _wrapper(self, spec: dict[str, Any]) -> Path:
        """Write the spec and the executable Playwright launches (it runs the relay)."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="sandloop-browser-"))
        spec_path = self._workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        wrapper = self._workdir / "chromium"
        command = shlex.join([sys.executable, "-m", "sandbox.browser_relay", str(spec_path)])
        wrapper.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        wrapper.chmod(0o700)
        return wrapper

    async def _launch(self, pw: Playwright) -> PWBrowser:
        name = f"sandloop-browser-{self.session_id}-{self.restarts}"
        try:
            spec = await asyncio.to_thread(self._spec, name)
        except Exception as exc:  # docker SDK errors, engine down, image build failed
            raise SandboxUnavailable(f"browser container did not start: {exc}") from exc
        self._container_name = name
        try:
            browser = await pw.chromium.launch(
                executable_path=self._wrapper(spec),
                headless=True,  # Playwright adds --no-sandbox: the container is the sandbox
                args=[*COMMON_ARGS, *self.config.extra_args],
                timeout=self.start_timeout_s * 1000,
            )
            self.container_id = await asyncio.to_thread(self._container_id, name)
        except Exception as exc:  # launch failed (the relay's log is in the message) or no container
            await self._release()
            self._drop_workdir()  # nobody may call close() after a failed start
            raise SandboxUnavailable(f"Chromium in the container did not start: {_first_line(exc)}") from exc
        return browser

    def _container_id(self, name: str) -> str:
        return str(self._docker.containers.get(name).id)

    def _remove(self, name: str) -> None:
        import docker.errors

        deadline = time.monotonic() + 30
        while True:
            try:
                self._docker.containers.get(name).remove(force=True)
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                # 409: the relay is removing it right now; wait until it is gone
                if exc.status_code != 409 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    async def _release(self) -> None:
        # The relay removes its container when it exits; this covers a relay that was killed.
        name, self._container_name, self.container_id = self._container_name, None, None
        if name is not None and self._docker is not None:
            await asyncio.to_thread(self._remove, name)

    def _drop_workdir(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    async def close(self) -> None:
        await super().close()
        self._drop_workdir()


def docker_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def open_browser(
    config: BrowserConfig | None = None,
    *,
    placement: Literal["auto", "container", "local"] = "auto",
    executable_path: str | None = None,
    session_id: str | None = None,
) -> PlaywrightBrowser:
    """A browser in the requested placement; ``auto`` picks the container where Docker runs."""
    if placement == "auto":
        placement = "container" if docker_available() else "local"
    if placement == "container":
        return ContainerBrowser(config, session_id=session_id)
    return LocalBrowser(config, executable_path=executable_path)
