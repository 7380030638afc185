"""The local placement: Playwright launches Chromium on the host, for users without Docker.

Isolation inside the page is the container placement's (the same context, routes and rules);
what it lacks is the container around Chromium itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from playwright.async_api import Browser as PWBrowser
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Playwright

from sandbox.browser.config import COMMON_ARGS, BrowserConfig
from sandbox.browser.session import PlaywrightBrowser
from sandbox.computer.notes import first_line
from sandloop.errors import SandboxUnavailable

__all__ = ["LocalBrowser"]


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
            raise SandboxUnavailable(f"Chromium did not start: {first_line(exc)}") from exc
