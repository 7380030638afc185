"""The domain rules as the browser applies them, to every URL a page asks for, before any byte.

A URL passes three checks: its scheme (http(s) and ws(s) only; about:blank always), the policy's
rules (``allow_url``: a verdict, or an awaitable one from a gate that may ask a human), and,
since the host opens every connection, the address its name resolves to (a name that points at
the host's own loopback or LAN is refused unless the policy lists that address). Every refusal
is reported (:class:`BlockedRequest`); a blocked navigation is shown :func:`blocked_page`.
"""

from __future__ import annotations

import asyncio
import html
import inspect
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from sandloop.errors import NotAnAddress
from sandloop.matching import ip_literal
from sandloop.verdict import Decision, Verdict

__all__ = ["BlockedRequest", "UrlCheck", "UrlRules", "blocked_page", "is_ip_literal", "rule_text"]

log = logging.getLogger("sandloop.browser")

#: The domain rules: a verdict, or an awaitable one (a gate that may ask a human and records
#: every decision).
UrlCheck = Callable[[str], Verdict | Awaitable[Verdict]]

_NET_SCHEMES = frozenset({"http", "https", "ws", "wss"})
_ALLOWED = Verdict(Decision.ALLOW, "no domain rules configured")
_BLANK = Verdict(Decision.ALLOW, "about:blank is always allowed", rule_id="browser.scheme")


@dataclass(frozen=True)
class BlockedRequest:
    url: str
    verdict: Verdict
    navigation: bool
    kind: str = "request"  # "request", "websocket" or "navigation"


def rule_text(verdict: Verdict) -> str:
    rule = verdict.rule_id or "default"
    where = f" at {verdict.source}" if verdict.source else ""
    return f"rule {rule}{where}: {verdict.justification}"


def blocked_page(url: str, verdict: Verdict) -> str:
    """What a blocked navigation shows instead: a plain page naming the rule."""
    return (
        "<!doctype html><html><head><meta charset=utf-8><title>Blocked by sandloop</title></head>"
        "<body style='font:20px sans-serif;margin:40px;background:#fff;color:#000'>"
        "<h1>Blocked by sandloop</h1>"
        f"<p>This page was not opened: <code>{html.escape(url)}</code></p>"
        f"<p>Blocked by {html.escape(rule_text(verdict))}</p></body></html>"
    )


def is_ip_literal(host: str) -> bool:
    """The policy's own reading of IP literals (every form Chromium accepts), so the rules and
    this guard never disagree on what is an address."""
    try:
        return ip_literal(host) is not None
    except NotAnAddress:
        return True  # an address-like host Chromium refuses; the rules refuse it too


def _scheme_refused(url: str) -> Verdict:
    scheme = urlsplit(url).scheme or "(none)"
    return Verdict(
        Decision.DENY,
        f"the {scheme}: scheme is not allowed; only http(s) pages may be opened",
        rule_id="browser.scheme",
    )


class UrlRules:
    """One browser's rules: ``allow_url`` (None: every http(s) URL), who hears of a refusal, and
    the names the host-side fetch maps to addresses itself (``BrowserConfig.resolve``)."""

    def __init__(
        self,
        allow_url: UrlCheck | None,
        on_block: Callable[[BlockedRequest], None] | None = None,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        self.allow_url = allow_url
        self.on_block = on_block
        self.resolve: Mapping[str, str] = resolve or {}
        self.blocked: list[BlockedRequest] = []  # every refusal, in order

    async def check(self, url: str) -> Verdict:
        if url == "about:blank":
            return _BLANK
        scheme = urlsplit(url).scheme.lower()
        if scheme not in _NET_SCHEMES:
            return _scheme_refused(url)
        return await self._rules(url) if self.allow_url else _ALLOWED

    async def _rules(self, url: str) -> Verdict:
        assert self.allow_url is not None
        verdict = self.allow_url(url)
        return await verdict if inspect.isawaitable(verdict) else verdict

    async def address(self, url: str) -> Verdict | None:
        """A refusal when ``url``'s name points somewhere non-public the policy does not list.

        The host, not the page, opens every connection, so a name that resolves to the host's
        own loopback or LAN address (its hostname in /etc/hosts, a rebinding DNS record) would
        reach services no page could reach. Such an address is opened only when the policy
        allows the address itself (for IP literals the engine wants an exact entry). Explicit
        ``resolve`` mappings and IP literals were already decided by the rules.
        """
        if self.allow_url is None:
            return None
        parts = urlsplit(url)
        host = parts.hostname or ""
        if not host or host in self.resolve or is_ip_literal(host):
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

    def report(self, blocked: BlockedRequest) -> None:
        self.blocked.append(blocked)
        log.warning("blocked %s %s by %s", blocked.kind, blocked.url, rule_text(blocked.verdict))
        if self.on_block is not None:
            self.on_block(blocked)
