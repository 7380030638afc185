"""After an action: let it take effect, and a navigation it started load, before the next.

A navigation an action starts — a link, a submission by ENTER or click, ``location`` set now or
from a timer its handler set, a history step, a redirect — is waited for until the new document
has loaded, so the next action and the screenshot see the new page, not the old one or a blank
one. Two witnesses, because neither sees everything: the document's own word (:data:`WATCH_JS`,
installed in every document before its scripts) and the host's events
(:class:`~sandbox.browser.tracking.MainFrameNavigations`). The wait is bounded by
``BrowserConfig.settle_timeout_s`` and ``navigation_timeout_s``; past them the screenshot shows
how far the page got, and a note says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from sandbox.browser.config import BrowserConfig
from sandbox.browser.redirects import RedirectChain
from sandbox.browser.tracking import MainFrameNavigations, navigated_away

__all__ = ["WATCH_JS", "Settle"]

# What each document tells the settle step (Settle), installed before the
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
WATCH_JS = """(() => {
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

class Settle:
    """The settle step of one browser: its host-side witness, the page on screen (a popup an
    action opened replaces its opener), and how a redirect chain is waited for."""

    def __init__(
        self,
        config: BrowserConfig,
        navs: MainFrameNavigations,
        chain: RedirectChain,
        shown: Callable[[], Page | None],
    ) -> None:
        self.config = config
        self.navs = navs
        self.chain = chain
        self.shown = shown

    async def __call__(self, page: Page, since: int, *, frame: bool) -> tuple[list[str], bool]:
        """Let an action take effect and a navigation it started load; notes if one did not, and
        whether the page kept still (no navigation, no timers to follow).

        Two witnesses, because neither sees everything: the document's announcement
        (WATCH_JS, one round trip, which also follows the timers its handlers set) dies
        with the document, and the host's events (MainFrameNavigations) come only once a
        request is out. Anything from either since the action began means a navigation:
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
            quiet = self.navs.seq == since and not self.navs.in_flight
            if quiet and said != _ANNOUNCED:
                return [], first and said == _STILL
            if quiet and not await self.navs.moved(since, start_by):
                return [], False  # announced, never started (stopped by the page, or a download)
            if land_by is None:
                land_by = loop.time() + config.navigation_timeout_s
            since = self.navs.seq
            landed = await self.navs.idle(land_by)
            url = self.navs.pending_url()
            page = self.shown() or page
            if landed:
                landed = await self._loaded(page, land_by)
            if not landed:
                where = url or page.url
                return [f"{where} did not finish loading within {config.navigation_timeout_s:g} s; "
                        "the screenshot shows how far it got"], False
            frame, horizon, first = False, 0.0, False

    async def _ask(self, page: Page, frame: bool, horizon: float) -> int | None:
        """The document's settle answer (_ANNOUNCED, _FOLLOWED, _STILL; see WATCH_JS), or
        None when it gave none."""
        timeout = self.config.settle_timeout_s + horizon
        try:
            said = await asyncio.wait_for(page.evaluate(_SETTLE_JS, [frame, horizon * 1000]), timeout)
        except PlaywrightError as exc:
            # the document was replaced under us: a navigation is landing
            return _ANNOUNCED if navigated_away(exc) else None
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
        return await self.chain.landed(page, deadline)
