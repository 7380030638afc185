"""Secrets the egress proxy adds to requests: what a policy's ``[secrets]`` entry says, and its
value read on the host when a session starts.

The value lives on the host and in the session's proxy, never in the sandbox: it is read here
(from a variable of sandloop's own environment or a host file), handed to the proxy over its
attach stream, and kept out of every ``repr`` so a log line or a traceback cannot carry it.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandloop.errors import ConfigError

__all__ = ["Injection", "SecretSpec", "resolve_all"]

#: A value this long is surely not a credential (and would not fit in a header anyway).
MAX_VALUE_BYTES = 16 << 10
#: Shorter than this is no credential, and masking it would mangle ordinary responses.
MIN_VALUE_CHARS = 8


def _read_file(path: str) -> bytes:
    """A regular file's first bytes, a little past the most a value may have. Opened without
    blocking: a FIFO (or a device) in its place would hang the session's start, or never end."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        return os.read(fd, MAX_VALUE_BYTES + 3)  # + a CRLF, and one byte to tell it is too long
    finally:
        os.close(fd)


@dataclass(frozen=True)
class SecretSpec:
    """One ``[secrets.NAME]`` entry: where the value is and how it is sent, never the value."""

    name: str
    host: str
    port: int = 443
    env: str | None = None
    file: str | None = None
    header: str = "Authorization"
    template: str = "Bearer {value}"
    basic: str | None = None  # a user name: Authorization: Basic base64(user:value)
    private: bool = False  # the host's name may resolve to a private address (an internal service)

    def _read(self) -> str:
        where = f"secret {self.name!r}"
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise ConfigError(f"{where}: the environment variable {self.env} is not set")
        else:
            assert self.file is not None
            try:
                value = _read_file(self.file).decode("utf-8")
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read {self.file} ({exc.strerror or exc})") from None
            except UnicodeError:
                raise ConfigError(f"{where}: {self.file} is not UTF-8 text") from None
            value = value.removesuffix("\n").removesuffix("\r")
        if not value:
            raise ConfigError(f"{where}: the value is empty")
        if len(value) < MIN_VALUE_CHARS:
            # Every occurrence in a response is masked: a few characters would mask ordinary text.
            raise ConfigError(f"{where}: the value has under {MIN_VALUE_CHARS} characters, too few to be told "
                              "apart from ordinary text where a response echoes it")
        if any(c in value for c in "\r\n\0") or len(value.encode()) > MAX_VALUE_BYTES:
            raise ConfigError(f"{where}: the value has a line break or NUL, or is over 16 KiB: not a header value")
        return value

    def resolve(self) -> Injection:
        """The value read now; ConfigError (one line naming the entry) when it is not there."""
        value = self._read()
        if self.basic is not None:
            token = base64.b64encode(f"{self.basic}:{value}".encode()).decode()
            header, rendered = "Authorization", f"Basic {token}"
            forms: tuple[str, ...] = (value, token)
        else:
            header, rendered = self.header, self.template.replace("{value}", value)
            forms = (value,)
        return Injection(self.name, self.host, self.port, header, rendered, forms, self.private)


@dataclass(frozen=True)
class Injection:
    """A secret ready to send: the header the proxy adds on requests to ``host:port``."""

    name: str
    host: str
    port: int
    header: str
    value: str = field(repr=False)  # the whole header value
    #: Every form of the secret a response could echo (the value; for basic auth, its base64
    #: too): the proxy masks each in what it hands back to the sandbox.
    forms: tuple[str, ...] = field(repr=False, default=())
    private: bool = False

    def for_proxy(self) -> dict[str, object]:
        """What the proxy is told (over its stdin, never its command line or environment)."""
        return {"name": self.name, "host": self.host, "port": self.port, "header": self.header,
                "value": self.value, "redact": list(self.forms), "private": self.private}


def resolve_all(specs: Iterable[SecretSpec]) -> tuple[Injection, ...]:
    """Every secret read, in order; the first one missing is a ConfigError naming it."""
    return tuple(spec.resolve() for spec in specs)
