"""Host names and workspace globs, each matched by exactly one implementation.

The policy engine, the browser's address guard and the egress proxy (which runs inside a
container, so this module is standard library only) all decide hosts here; the policy engine,
patch validation and the read-only mounts all decide workspace paths here. Two copies of a
matcher drift apart, and the gap between them is where a request slips through.

**Hosts.** An entry is a host name (``example.com``: exactly that name), ``*.example.com`` (any
name under it, not the bare domain), ``*`` (any name), or an IP literal; any of them may name a
port (``example.com:443``, ``[::1]:8080``), and then only that port matches. An IP literal is
normalised the way Chromium reads it (:func:`ip_literal`), and a host that is an IP literal or a
loopback name (``localhost``, ``*.localhost``) is matched only by an entry naming exactly it:
wildcards are for names, never for addresses.

**Workspace globs** follow gitignore's rules: ``*``, ``?`` and ``[…]`` (``[!…]`` negates) match
within one path segment, a ``**`` segment spans any number of segments (none included), and a
glob ending in ``/**`` also matches the directory itself, so ``.git/**`` covers a file named
``.git`` too.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

from sandloop.errors import NotAnAddress

__all__ = [
    "HostEntry",
    "default_port",
    "glob_base",
    "glob_match",
    "host_entry",
    "ip_literal",
    "is_loopback_name",
    "match_host",
    "normalise_host",
]

_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
_IPV4_PART = re.compile(r"^(0[xX][0-9a-fA-F]*|[0-9]+)$")
# Only a word made of address characters is read as an address ("cafe.dead" is a name).
_ADDRESS_LIKE = re.compile(r"^[0-9a-fx.:]+$")


# --- hosts ------------------------------------------------------------------------------------


def _ipv4_part(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)  # raises ValueError on 8 or 9: not an address
    return int(part)


def ip_literal(host: str) -> str | None:
    """The normalised address when ``host`` is an IP literal, else None.

    IPv4 follows the WHATWG URL "IPv4 parser" that Chromium implements: a host whose last label
    is a number is an address, written as 1 to 4 parts, each decimal, ``0x`` hex or ``0``-prefixed
    octal, the last part filling the remaining bytes (``127.1``, ``2130706433``, ``0x7f000001``,
    ``0177.0.0.1`` are all 127.0.0.1). Raises :class:`NotAnAddress` for a host that ends in a
    number yet is no address (Chromium refuses those). IPv6 (with or without brackets) is
    compressed; an IPv4-mapped IPv6 address is its IPv4 address, since it reaches that host.
    """
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        if "%" in host:
            raise NotAnAddress(f"{host!r}: zone identifiers are not allowed")
        try:
            v6 = ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise NotAnAddress(f"{host!r} is not an IPv6 address") from exc
        return str(v6.ipv4_mapped) if v6.ipv4_mapped is not None else v6.compressed
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing dot is allowed, as in a host name
    if not parts or not _IPV4_PART.match(parts[-1]):
        return None  # a host name
    if len(parts) > 4 or not all(_IPV4_PART.match(p) for p in parts):
        raise NotAnAddress(f"{host!r} ends in a number but is not an IPv4 address")
    try:
        numbers = [_ipv4_part(p) for p in parts]
    except ValueError as exc:
        raise NotAnAddress(f"{host!r} has a bad octal part") from exc
    last_limit = 256 ** (5 - len(numbers))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= last_limit:
        raise NotAnAddress(f"{host!r}: an IPv4 part is out of range")
    value = numbers[-1]
    for n, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - n))
    return str(ipaddress.IPv4Address(value))


def is_loopback_name(host: str) -> bool:
    """``localhost`` and its subdomains resolve to loopback by definition (RFC 6761)."""
    return host == "localhost" or host.endswith(".localhost")


def default_port(scheme: str) -> int | None:
    return {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme.lower())


def normalise_host(host: str) -> str:
    """A host as a request names it (URL, CONNECT line), in the form entries are written in:
    lower case, no trailing dot, an IP literal normalised. NotAnAddress or ValueError for a
    host that is neither a name nor an address."""
    host = host.strip().lower()
    address = ip_literal(host)
    if address is not None:
        return address
    host = host.rstrip(".")
    if not _NAME.match(host):
        raise ValueError(f"{host!r} is not a host name")
    return host


@dataclass(frozen=True)
class HostEntry:
    """One parsed allow/block-list entry."""

    host: str  # "*", "*.suffix", a lower-case name, or a normalised IP address
    port: int | None = None

    def __str__(self) -> str:
        if self.port is None:
            return self.host
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def wildcard(self) -> bool:
        return self.host == "*" or self.host.startswith("*.")

    def matches(self, host: str, port: int | None = None, *, exact_only: bool = False) -> bool:
        """Does the entry name ``host`` (normalised) on ``port``? ``exact_only``: only an entry
        naming exactly this host may match (addresses and loopback names)."""
        if self.port is not None and port != self.port:
            return False
        if self.host == "*":
            return not exact_only
        if self.host.startswith("*."):
            return not exact_only and host.endswith(self.host[1:])
        return host == self.host


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: an unclosed '['")
        host, rest = text[1:end], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"{text!r}: only ':port' may follow ']'")
        return host, _port(text, rest[1:])
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, _port(text, port)
    return text, None  # a name, or a bare IPv6 address


def _port(text: str, port: str) -> int:
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return int(port)


@lru_cache(maxsize=1024)
def host_entry(text: str) -> HostEntry:
    """Parse one entry (``example.com``, ``*.example.com:443``, ``*``, ``10.0.0.1``,
    ``[::1]:8080``). ValueError says what is wrong with it."""
    raw = text.strip().lower()
    if re.search(r"[/@?#\s]", raw):
        raise ValueError(_not_an_entry(text))
    host, port = _split_port(raw)
    host = host.rstrip(".")
    if _ADDRESS_LIKE.match(host) or ":" in host:
        try:
            address = ip_literal(host)
        except NotAnAddress as exc:
            raise ValueError(f"{text!r} is not a valid IP address ({exc})") from None
        if address is not None:
            return HostEntry(address, port)
    name = host[2:] if host.startswith("*.") else host
    if host != "*" and not _NAME.match(name):
        raise ValueError(_not_an_entry(text))
    return HostEntry(host, port)


def _not_an_entry(text: str) -> str:
    return (f"{text!r} is not a host name: write 'example.com', '*.example.com', '*' or an IP "
            "address, optionally with ':port' (no scheme or path)")


def match_host(entries: Iterable[HostEntry], host: str, port: int | None = None, *,
               wildcards_reach_addresses: bool = False) -> HostEntry | None:
    """The first entry that names ``host`` (normalised) on ``port``, or None.

    An address or a loopback name is matched only by an entry naming it exactly, unless
    ``wildcards_reach_addresses`` (block lists: a wildcard that blocks may block addresses too).
    """
    exact_only = not wildcards_reach_addresses and (ip_literal(host) is not None
                                                    or is_loopback_name(host))
    for entry in entries:
        if entry.matches(host, port, exact_only=exact_only):
            return entry
    return None


# --- workspace globs --------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _segments(glob: str) -> tuple[str, ...]:
    return tuple(s for s in glob.strip("/").split("/") if s)


def _match(parts: tuple[str, ...], pattern: tuple[str, ...]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match(parts[1:], rest)


def glob_match(glob: str, path: str, *, fold_case: bool = False) -> bool:
    """Does the workspace-relative ``path`` match ``glob``?

    ``fold_case`` compares without regard to case: for read-only globs, since on a
    case-insensitive file system ``.GIT/hooks`` is the same directory as ``.git/hooks``."""
    if fold_case:
        glob, path = glob.lower(), path.lower()
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    pattern = _segments(glob)
    if _match(parts, pattern):
        return True
    return len(pattern) > 1 and pattern[-1] == "**" and _match(parts, pattern[:-1])


def glob_base(glob: str) -> str | None:
    """The one fixed path a whole-path glob covers (``.git/**``, ``**/.git/**`` and ``secrets``
    all name a path a read-only mount can cover), or None for patterns like ``*.lock``.
    ``**/x`` means every x; the one at the top is the one a mount can cover."""
    base = (glob[:-3] if glob.endswith("/**") else glob).strip("/")
    base = base[3:] if base.startswith("**/") else base
    if not base or any(ch in base for ch in "*?["):
        return None
    return base
