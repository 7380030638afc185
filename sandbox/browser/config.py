"""What a session's browser looks like and may do, and the flags every placement starts it with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sandbox.browser.rules import BlockedRequest, UrlCheck
from sandbox.computer.screen import Size

__all__ = ["COMMON_ARGS", "DEFAULT_VIEWPORT", "BrowserConfig"]

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
