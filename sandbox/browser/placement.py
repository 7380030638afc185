"""Where Chromium runs: the container where Docker answers, else the host."""

from __future__ import annotations

from typing import Literal

from sandbox.browser.config import BrowserConfig
from sandbox.browser.container import ContainerBrowser, docker_available
from sandbox.browser.local import LocalBrowser
from sandbox.browser.session import PlaywrightBrowser

__all__ = ["open_browser"]


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
