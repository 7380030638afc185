"""The browser placement of the computer: one Playwright Chromium page per session.

A :class:`Browser` is a :class:`~sandbox.computer.Computer` (actions in, one screenshot out) that
also navigates. Both placements share every line of page logic (:class:`PlaywrightBrowser`) and
differ only in where Chromium runs: :class:`ContainerBrowser` (a hardened container with no
network, driven over a pipe) or :class:`LocalBrowser` (the host); :func:`open_browser` picks.
Inside the page both are the same: every request, websocket and redirect hop decided by the
domain rules and fetched on the host, downloads and service workers refused, a crashed browser
restarted with a note. The modules, top to bottom, are in docs/architecture.md.
"""

from sandbox.browser.base import Browser, Navigation
from sandbox.browser.config import BrowserConfig
from sandbox.browser.container import ContainerBrowser, ContainerLimits, docker_available
from sandbox.browser.local import LocalBrowser
from sandbox.browser.placement import open_browser
from sandbox.browser.rules import BlockedRequest
from sandbox.browser.session import PlaywrightBrowser
from sandbox.computer.screen import Screenshot

__all__ = [
    "BlockedRequest",
    "Browser",
    "BrowserConfig",
    "ContainerBrowser",
    "ContainerLimits",
    "LocalBrowser",
    "Navigation",
    "PlaywrightBrowser",
    "Screenshot",
    "docker_available",
    "open_browser",
]
