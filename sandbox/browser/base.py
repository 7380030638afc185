"""The Browser interface: a computer whose screen is one page, and which also navigates.

The computer half (actions in, one screenshot out) is :class:`sandbox.computer.Computer`; what
only a browser has is here: navigate / back / forward, each answered with a :class:`Navigation`
that says where the page ended and why it did not go where asked, and the page's URL.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from sandbox.browser.config import DEFAULT_VIEWPORT
from sandbox.browser.rules import rule_text
from sandbox.computer.base import Computer
from sandbox.computer.screen import Size
from sandloop.verdict import Verdict

__all__ = ["Browser", "Navigation"]


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
            parts.append("blocked: " + rule_text(self.blocked))
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
