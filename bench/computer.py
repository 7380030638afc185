"""Benchmark: a click + screenshot through sandloop vs Playwright's own, both placements.

sandloop's round trip is ``handle_computer_call`` with one click (parse, bounds check, click,
settle, domain re-check, masked capture, base64 data URL). The raw round trip is
``page.mouse.click`` + ``page.screenshot()`` in a plain context of the *same* Chromium, so the
ratio isolates sandloop's own overhead. Runs alternate to share the machine's noise.
Target: sandloop <= 1.3x raw. Also prints the browser start time (first page ready).

    .venv/bin/python bench/computer.py [--rounds 30] [--placement local|container|both]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from openai.types.responses import ResponseComputerToolCall
from playwright.async_api import Route

from executor.handlers.computer import handle_computer_call
from sandbox.browser import BrowserConfig, PlaywrightBrowser, docker_available, open_browser

PAGE = (b"<!doctype html><title>bench</title><input type=password value=x style='width:200px'>"
        b"<button id=b onclick='this.textContent=++window.n' style='position:absolute;left:100px;"
        b"top:100px;width:200px;height:60px'>0</button><script>window.n=0</script>"
        + b"<p>filler text for a realistic screenshot</p>" * 40)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def _click_call() -> ResponseComputerToolCall:
    return ResponseComputerToolCall.model_validate({
        "type": "computer_call", "id": "cu_b", "call_id": "call_b", "status": "completed",
        "pending_safety_checks": [], "actions": [{"type": "click", "button": "left", "x": 200, "y": 130}]})


async def _fetch_on_host(route: Route) -> None:
    await route.fulfill(response=await route.fetch())


async def _bench(placement: str, url: str, rounds: int) -> None:
    starts = []
    for _ in range(3):
        t = time.perf_counter()
        browser = open_browser(BrowserConfig(), placement=placement)  # type: ignore[arg-type]
        await browser.start()
        starts.append(time.perf_counter() - t)
        await browser.close()

    browser: PlaywrightBrowser = open_browser(BrowserConfig(), placement=placement)  # type: ignore[arg-type,no-redef]
    try:
        await browser.navigate(url)
        assert browser._browser is not None
        raw_context = await browser._browser.new_context(viewport={"width": 1280, "height": 800},
                                                         device_scale_factor=1)
        # the container has no network: the raw page gets its bytes the way sandloop's does
        await raw_context.route("**/*", lambda route: _fetch_on_host(route))
        raw = await raw_context.new_page()
        await raw.goto(url)
        item = _click_call()
        ours, theirs = [], []
        for i in range(rounds + 3):  # the first rounds warm both paths up
            t = time.perf_counter()
            await handle_computer_call(item, browser, safety=None, display=None)
            a = time.perf_counter() - t
            t = time.perf_counter()
            await raw.mouse.click(200, 130)
            await raw.screenshot()
            b = time.perf_counter() - t
            if i >= 3:
                ours.append(a)
                theirs.append(b)
        await raw_context.close()
    finally:
        await browser.close()
    o, r = statistics.median(ours), statistics.median(theirs)
    print(f"{placement:9s} start {statistics.median(starts) * 1000:7.0f} ms | click+screenshot: "
          f"sandloop {o * 1000:6.1f} ms, playwright {r * 1000:6.1f} ms, ratio {o / r:4.2f}x "
          f"(target <= 1.30x)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--placement", choices=["local", "container", "both"], default="both")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    placements = ["local", "container"] if args.placement == "both" else [args.placement]
    for placement in placements:
        if placement == "container" and not docker_available():
            print("container: skipped (no Docker engine)")
            continue
        await _bench(placement, url, args.rounds)
    server.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
