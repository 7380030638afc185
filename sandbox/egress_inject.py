"""The egress proxy's secrets: TLS ended for the listed hosts only, one header added, echoes masked.

Standard library only: shipped inside the proxy's zip application (:mod:`sandbox.bundle`). The
front-end sends the configuration as one JSON line on the proxy's stdin — never on its command
line or in its environment, which ``docker inspect`` shows —: each secret (its name, host, port,
header and value), a certificate and key per host (minted by :mod:`sandbox.session_ca`; the CA's
key stays on the host), and the PEM bundle upstream servers are verified against (the host's).

For a ``CONNECT`` to exactly a listed host:port the proxy connects and verifies the upstream
server first (a server it cannot verify is a ``502`` to the ``CONNECT``, before any secret could
leave), answers ``200``, ends the sandbox's TLS with the host's certificate, reads ONE request
head, checks that its ``Host`` names the same host, drops any header of the secret's name the
sandbox sent, adds the secret, asks for an unencoded body (so an echo can be found) and
``Connection: close``, and relays the rest of that connection both ways. Whatever comes back
passes through :class:`Masker`, which replaces every form of the value with ``*`` of the same
length (lengths and chunk sizes stay true). Any other host is never touched: the plain tunnel.

A redirect carries nothing: the proxy adds the secret to a connection, not to a client's
follow-up, and a redirect to another host (or port) is a new ``CONNECT`` that matches no entry.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Injector", "Masker", "Secret", "relay", "rewrite_head"]

MAX_HEAD = 64 << 10
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade",
        "accept-encoding"}


class Rejected(Exception):
    """A request inside a secret's tunnel that the proxy will not send (status, reason)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Secret:
    name: str
    host: str
    port: int
    header: str
    value: str = field(repr=False)
    redact: tuple[str, ...] = field(repr=False, default=())
    private: bool = False  # an internal service: its name may resolve to a private address


class Masker:
    """Every occurrence of the given strings in a byte stream replaced by ``*`` of the same
    length, across any cut of the stream into reads (the last ``longest - 1`` bytes wait)."""

    def __init__(self, forms: list[str]) -> None:
        self.forms = sorted({f.encode() for f in forms if f}, key=len, reverse=True)
        self.keep = max((len(f) for f in self.forms), default=1) - 1
        self.held = b""

    def _mask(self, data: bytes) -> bytes:
        for form in self.forms:
            data = data.replace(form, b"*" * len(form))
        return data

    def feed(self, data: bytes) -> bytes:
        data = self._mask(self.held + data)
        cut = max(len(data) - self.keep, 0)
        out, self.held = data[:cut], data[cut:]
        return out

    def flush(self) -> bytes:
        out, self.held = self.held, b""
        return out


def rewrite_head(head: bytes, secret: Secret) -> bytes:
    """The request head as sent upstream: Host checked, the secret's header replaced, hop-by-hop
    headers dropped, no content coding, one request per connection."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise Rejected(400, "one HTTP/1.x request in origin form is expected inside the tunnel")
    hosts = [line.split(":", 1)[1].strip().lower() for line in lines[1:]
             if line.split(":", 1)[0].strip().lower() == "host"]
    names = {secret.host, f"{secret.host}:{secret.port}"}
    if secret.port == 443:
        names.add(f"{secret.host}:443")
    if len(hosts) != 1 or hosts[0] not in names:
        raise Rejected(421, f"the request's Host must be {secret.host} (the host this tunnel was opened to)")
    drop = _HOP | {secret.header.lower()}
    kept = [line for line in lines[1:] if line and line.split(":", 1)[0].strip().lower() not in drop]
    out = [lines[0], *kept, f"{secret.header}: {secret.value}", "Accept-Encoding: identity", "Connection: close",
           "", ""]
    return "\r\n".join(out).encode("latin-1")


def _memfd(data: str) -> str:
    """A path to ``data`` that exists only in memory: the proxy's root is read-only, and the
    key should never touch a disk anyway (ssl loads a chain only from a path)."""
    fd = os.memfd_create("leaf", 0)
    os.write(fd, data.encode())
    return f"/proc/self/fd/{fd}"


def _server_context(cert_pem: str, key_pem: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])  # the proxy reads HTTP/1.1 heads, never HTTP/2 frames
    path = _memfd(cert_pem + key_pem)
    try:
        ctx.load_cert_chain(path)
    finally:
        os.close(int(path.rsplit("/", 1)[1]))
    return ctx


class Injector:
    """The proxy's secrets, from the front-end's configuration line."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.secrets = {
            (str(s["host"]), int(s["port"])): Secret(str(s["name"]), str(s["host"]), int(s["port"]), str(s["header"]),
                                                     str(s["value"]), tuple(map(str, s.get("redact", ()))),
                                                     bool(s.get("private")))
            for s in config.get("secrets", [])
        }
        self.servers = {host: _server_context(cert, key) for host, (cert, key) in config.get("certs", {}).items()}
        self.upstream = ssl.create_default_context(cadata=str(config.get("trust", "")) or None)
        self.upstream.minimum_version = ssl.TLSVersion.TLSv1_2
        self.upstream.set_alpn_protocols(["http/1.1"])
        self._sessions: dict[tuple[str, int], ssl.SSLSession] = {}

    def secret_for(self, host: str, port: int) -> Secret | None:
        return self.secrets.get((host, port))

    def open_upstream(self, upstream: socket.socket, secret: Secret) -> ssl.SSLSocket:
        """TLS to the real server, verified against the host's trust store; OSError/SSLError if
        not. A session the server gave before is offered again: a resumed handshake skips the
        certificate exchange, most of what the proxy's second handshake costs."""
        session = self._sessions.get((secret.host, secret.port))
        try:
            return self.upstream.wrap_socket(upstream, server_hostname=secret.host, session=session)
        except ssl.SSLError:
            self._sessions.pop((secret.host, secret.port), None)
            raise

    def keep_session(self, upstream: ssl.SSLSocket, secret: Secret) -> None:
        """Keep the server's session (its ticket arrives after the handshake) for the next tunnel."""
        with contextlib.suppress(ssl.SSLError, ValueError):
            if upstream.session is not None and upstream.session.has_ticket:
                self._sessions[(secret.host, secret.port)] = upstream.session

    def serve(self, client: socket.socket, upstream: ssl.SSLSocket, secret: Secret,
              injected: Callable[[str], None], idle_s: float) -> None:
        """The sandbox's side of the tunnel: TLS with the minted certificate, the first request
        rewritten, then both ways until the server ends, the response masked."""
        try:
            inner = self.servers[secret.host].wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            return  # the sandbox did not trust the session CA, or went away: nothing was sent
        with inner:
            try:
                head, rest = _read_head(inner)
                method = head.split(b" ", 1)[0].decode("latin-1")
                upstream.sendall(rewrite_head(head, secret) + rest)
            except Rejected as rejected:
                _answer(inner, rejected)
                return
            except OSError:
                return
            injected(method)
            relay(inner, upstream, idle_s, Masker(list(secret.redact)))
            self.keep_session(upstream, secret)


def _recv(sock: socket.socket) -> bytes:
    """What one read gives, with what TLS already decrypted (select() cannot see that)."""
    data = sock.recv(65536)
    while data and isinstance(sock, ssl.SSLSocket) and sock.pending():
        data += sock.recv(sock.pending())
    return data


def relay(client: socket.socket, upstream: socket.socket, idle_s: float, masker: Masker | None = None) -> None:
    """Copy bytes both ways until both sides finish or both go idle. A blind tunnel passes
    half-closes through. A secret's tunnel (``masker``: what comes back is masked) ends when the
    server does (it was asked to close after one answer), without half-closes: shutting down one
    way of a TLS socket ends its TLS, so the sandbox's end of sending is simply no longer read."""
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, upstream)
    sel.register(upstream, selectors.EVENT_READ, client)
    open_ends = 2
    try:
        while open_ends:
            events = sel.select(idle_s)
            if not events:
                return
            for key, _ in events:
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                dst: socket.socket = key.data
                data = _recv(src)
                masking = masker is not None and src is upstream
                if data:
                    dst.sendall(masker.feed(data) if masker is not None and masking else data)
                    continue
                sel.unregister(src)
                open_ends -= 1
                if masker is not None:
                    if masking:
                        dst.sendall(masker.flush())
                        return
                    continue
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
    except OSError:
        return
    finally:
        sel.close()


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:
            raise Rejected(400, "request head too large")
        chunk = sock.recv(16384)
        if not chunk:
            raise Rejected(400, "the connection closed before a request head")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def _answer(sock: socket.socket, rejected: Rejected) -> None:
    body = f"sandloop egress proxy: {rejected.reason}\n".encode()
    text = {400: "Bad Request", 421: "Misdirected Request"}.get(rejected.status, "Error")
    head = (f"HTTP/1.1 {rejected.status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nX-Sandloop-Rule: secrets\r\nConnection: close\r\n\r\n")
    with contextlib.suppress(OSError):
        sock.sendall(head.encode() + body)
