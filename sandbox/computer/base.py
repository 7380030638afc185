"""The Computer interface: what every computer placement implements, and all the front-end knows.

A computer runs a batch of actions and answers with ONE screenshot at the declared display size,
with notes for what the model must also hear (an action that did not run, a placement that died
and was restarted: :mod:`sandbox.computer.notes` words them). It never raises for a bad action; it
raises :class:`~sandloop.errors.SandboxUnavailable` only when it cannot produce a screenshot at
all. Its :attr:`Computer.environment` is what the tool declaration names.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import ClassVar, Literal

from sandbox.base import Closing
from sandbox.computer.actions import ActionLike
from sandbox.computer.screen import Screenshot, Size

__all__ = ["Computer", "Environment"]

#: What ``computer_use_preview`` declares as its ``environment`` (the SDK's literal).
Environment = Literal["browser", "mac", "windows", "ubuntu", "linux"]


class Computer(Closing):
    """One computer the model uses: actions in, one screenshot out."""

    #: the environment the tool declaration names: the one that really runs
    environment: ClassVar[Environment]
    #: the screen's own size in pixels: screenshots come at this size unless a display is declared
    screen: Size

    @abc.abstractmethod
    async def perform(self, actions: Sequence[ActionLike], *, display: Size | None = None) -> Screenshot:
        """Run the actions in order, then capture once at ``display`` size (default: the screen).

        The actions are :mod:`sandbox.computer.actions` (either tool's shape); what cannot run is
        a note on the screenshot, never an exception."""

    async def screenshot(self, *, display: Size | None = None) -> Screenshot:
        return await self.perform([], display=display)

    async def current_url(self) -> str:
        """Where the screen is, for whoever answers a safety check: a page's URL, or "" for a
        placement that has none."""
        return ""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the placement (its processes, its container). Idempotent."""
