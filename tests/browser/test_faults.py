"""A browser that dies mid-session is restarted and the call still answered."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from pathlib import Path

import pytest

from sandbox.browser import BrowserConfig, LocalBrowser
from tests.browser.conftest import Site, pixel, png_size

pytestmark = pytest.mark.browser


def browser_pids(marker: str) -> list[int]:
    """The main Chromium process started with ``marker`` (helpers carry --type=...)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in args and not any(a.startswith(b"--type=") for a in args):
            pids.append(int(entry.name))
    return pids


async def test_killed_browser_is_restarted_and_the_call_answered(site: Site) -> None:
    marker = f"--sandloop-test-marker={uuid.uuid4().hex}"
    browser = LocalBrowser(BrowserConfig(start_url=site.url("/hello"), extra_args=(marker,)))
    try:
        await browser.navigate(site.url("/grid"))
        pids = browser_pids(marker)
        assert len(pids) == 1
        os.kill(pids[0], signal.SIGKILL)

        shot = await browser.perform([{"type": "click", "button": "left", "x": 60, "y": 60}])
        assert png_size(shot.png) == (1280, 800)
        assert browser.restarts == 1
        assert any("restarted" in note for note in shot.notes), shot.notes
        assert shot.url == site.url("/hello")  # the fresh page is the start URL
        assert browser_pids(marker) and browser_pids(marker) != pids

        # and the session carries on normally
        await browser.navigate(site.url("/grid"))
        await browser.perform([{"type": "click", "button": "left", "x": 60, "y": 60}])
        assert await browser.evaluate("window.hit") == "b00"
    finally:
        await browser.close()
    assert browser_pids(marker) == []


async def test_crashed_page_is_replaced(site: Site) -> None:
    browser = LocalBrowser(BrowserConfig(start_url=site.url("/hello")))
    try:
        await browser.navigate(site.url("/grid"))
        page = browser.chromium.page
        assert page is not None
        cdp = await page.context.new_cdp_session(page)
        with contextlib.suppress(Exception):  # the renderer dies before it can answer
            await asyncio.wait_for(cdp.send("Page.crash"), timeout=1)
        shot = await browser.screenshot()
        assert png_size(shot.png) == (1280, 800)
        assert any("crashed" in note for note in shot.notes), shot.notes
        assert browser.restarts == 0  # only the page was replaced
    finally:
        await browser.close()


async def test_custom_redaction_selectors(site: Site) -> None:
    with pytest.raises(ValueError, match="not valid CSS"):
        await LocalBrowser(BrowserConfig(redact_selectors=("input[",))).start()
    browser = LocalBrowser(BrowserConfig(redact_selectors=(".private",)))
    try:
        await browser.navigate(site.url("/secret"))
        shot = await browser.screenshot()
        # the whole .private box is black, text included; the password field is not masked now
        box = [pixel(shot.png, x, y) for x in range(100, 300, 7) for y in range(300, 340, 7)]
        assert set(box) == {(0, 0, 0)}
        assert pixel(shot.png, 290, 135) == (255, 255, 255)
    finally:
        await browser.close()
