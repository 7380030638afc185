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
``Connection: close``, and relays that request's body (:class:`BodyFence`: as its head frames
it, nothing after it) and the answer. The answer passes through :class:`ResponseGuard`: every
form of the value replaced with ``*`` of the same length (:class:`Masker`), in a chunked or
compressed body after decoding it. Any other host is never touched: the plain tunnel.

A redirect carries nothing: the proxy adds the secret to a connection, not to a client's
follow-up, and a redirect to another host (or port) is a new ``CONNECT`` that matches no entry.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BodyFence", "Injector", "Masker", "ResponseGuard", "Secret", "relay", "rewrite_head"]

MAX_HEAD = 64 << 10
# Decoded bytes per step of a compressed answer: deflate inflates up to about a thousandfold, so
# one 64 KiB read could otherwise become 64 MiB in the proxy at once (a small container).
INFLATE_STEP = 256 << 10
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


def _fields(head: bytes) -> list[tuple[str, str]]:
    """A head's header fields, names lowercased, values stripped."""
    pairs = [(*line.split(":", 1), "")[:2] for line in head.decode("latin-1").split("\r\n")[1:]]
    return [(name.strip().lower(), value.strip()) for name, value in pairs]


class BodyFence:
    """The request body as its head frames it, and nothing after it: the proxy checks one request
    head per tunnel, so bytes past the body (a pipelined second request) are never sent on.
    For a chunked body :attr:`payload` collects the data without its framing (responses)."""

    def __init__(self, head: bytes, *, chunked: bool | None = None) -> None:
        fields = _fields(head)
        lengths = [value for name, value in fields if name == "content-length"]
        codings = [value.lower() for name, value in fields if name == "transfer-encoding"]
        if chunked is None:
            if (lengths and codings) or len(lengths) > 1 or len(codings) > 1 or codings not in ([], ["chunked"]) \
                    or (lengths and not lengths[0].isdigit()):
                raise Rejected(400, "the request body must be framed by one Content-Length or by chunked alone")
            chunked = bool(codings)
        self.chunked = chunked
        self.left = int(lengths[0]) if lengths and not chunked else 0  # data bytes still due
        self.line = b""  # a chunk-size, chunk-end or trailer line being read
        self.state = "size" if chunked else "data"
        self.payload = b""

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` that still belongs to the body."""
        out = b""
        while data and self.state != "done":
            if self.state == "data":
                take, data = data[:self.left], data[self.left:]
                out += take
                self.payload += take
                self.left -= len(take)
                if self.left == 0:
                    self.state = "end" if self.chunked else "done"
                continue
            end = data.find(b"\n")
            piece, data = (data, b"") if end < 0 else (data[:end + 1], data[end + 1:])
            out += piece
            self.line += piece
            if len(self.line) > MAX_HEAD:
                raise Rejected(400, "a chunk line too long")
            if end < 0:
                continue
            line, self.line = self.line.strip(), b""
            if self.state == "end":  # the CRLF that closes a chunk's data
                if line:
                    raise Rejected(400, "a chunk longer than its size")
                self.state = "size"
                continue
            if self.state == "trailer":
                self.state = "trailer" if line else "done"
                continue
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise Rejected(400, "a bad chunk size") from None
            self.state, self.left = ("trailer", 0) if size == 0 else ("data", size)
        return out


class ResponseGuard:
    """What the server answers, as the sandbox may read it: every form of the secret masked in
    the head and in the body's *content*. A chunked or compressed body is decoded first (an echo
    split across chunks or compressed, though the proxy asked for no coding, would pass a mask
    of the raw bytes) and then sent as it comes until the connection ends (``Connection: close``
    was asked for); a coding the proxy cannot decode is a ``502`` in its place. A compressed
    body is inflated :data:`INFLATE_STEP` bytes at a time: :meth:`feed` gives the first step and
    :meth:`pending` each next one, so the proxy holds one step, whatever the ratio."""

    def __init__(self, forms: list[str], method: str) -> None:
        self.masker = Masker(forms)
        self.method = method.upper()
        self.head = b""
        self.decode: Callable[[bytes], bytes] | None = None  # None: still in the head
        self.inflate: Any = None
        self.tail = b""  # compressed bytes not inflated yet (the last step hit its bound)

    def feed(self, data: bytes) -> bytes:
        if self.decode is not None:
            return self.decode(data)
        self.head += data
        out = b""
        while self.decode is None and b"\r\n\r\n" in self.head:
            head, self.head = self.head.split(b"\r\n\r\n", 1)
            status = head.split(b" ", 2)[1:2]
            code = int(status[0]) if status and status[0].isdigit() else 0
            if 100 <= code < 200:  # an interim answer (100 Continue): the final one follows
                out += self.masker._mask(head + b"\r\n\r\n")
                continue
            out += self._final(head, code)
        if self.decode is None and len(self.head) > MAX_HEAD:
            self.decode = lambda _: b""
            return _answer_bytes(Rejected(502, "the server's answer head is too large"))
        if self.decode is not None:
            rest, self.head = self.head, b""
            out += self.decode(rest)
        return out

    def _final(self, head: bytes, code: int) -> bytes:
        fields = _fields(head)
        coding = ",".join(value.lower() for name, value in fields if name == "content-encoding").strip()
        chunked = any(name == "transfer-encoding" for name, _ in fields)
        if self.method == "HEAD" or code in (204, 304) or (not chunked and coding in ("", "identity")):
            self.decode = self.masker.feed  # the bytes as sent, masked (lengths stay true)
            return self.masker._mask(head + b"\r\n\r\n")
        if coding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            self.decode = lambda _: b""
            return _answer_bytes(Rejected(502, f"the server answered with content coding {coding!r}, which the "
                                               "proxy cannot search for the secret"))
        if coding not in ("", "identity"):
            self.inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, told by the header
        fence = BodyFence(head, chunked=chunked) if chunked else None

        def decode(data: bytes) -> bytes:
            if fence is not None:
                try:
                    fence.feed(data)
                except Rejected:
                    return b""
                data, fence.payload = fence.payload, b""
            if self.inflate is not None:
                return self._inflate(self.tail + data)
            return self.masker.feed(data)

        self.decode = decode
        drop = {"content-length", "transfer-encoding", "content-encoding", "connection"}
        lines = [line for line in head.split(b"\r\n") if line.split(b":", 1)[0].strip().lower().decode("latin-1")
                 not in drop]
        return self.masker._mask(b"\r\n".join([*lines, b"Connection: close", b"", b""]))

    def _inflate(self, data: bytes) -> bytes:
        try:
            out = self.inflate.decompress(data, INFLATE_STEP)
        except zlib.error:
            self.inflate, self.tail, self.decode = None, b"", lambda _: b""  # the rest cannot be read: dropped
            return b""
        self.tail = self.inflate.unconsumed_tail
        return self.masker.feed(out)

    def pending(self) -> bytes:
        """The next step of a compressed answer already received, masked; empty when none is left."""
        if self.inflate is None or not self.tail:
            return b""
        tail, self.tail = self.tail, b""
        return self._inflate(tail)

    def flush(self) -> bytes:
        return self.masker.flush()


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

    def pending(self) -> bytes:
        """Nothing: a plain stream is masked as it comes (a :class:`ResponseGuard` may hold more)."""
        return b""

    def flush(self) -> bytes:
        out, self.held = self.held, b""
        return out


def rewrite_head(head: bytes, secret: Secret) -> bytes:
    """The request head as sent upstream: Host checked, the secret's header replaced, hop-by-hop
    headers dropped, no content coding, one request per connection."""
    lines = head.decode("latin-1").split("\r\n")
    if any(line[:1] in (" ", "\t") for line in lines[1:]):
        # An obsolete line fold would glue the sandbox's text onto a header kept or added here.
        raise Rejected(400, "folded header lines are not accepted inside the tunnel")
    if any(c in line for line in lines for c in "\r\n\0"):
        # A bare CR or LF is a line break to some servers: a header of the secret's name hidden
        # behind one would reach them beside the secret.
        raise Rejected(400, "a bare CR, LF or NUL in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise Rejected(400, "one HTTP/1.x request in origin form is expected inside the tunnel")
    hosts = [line.split(":", 1)[1].strip().lower() for line in lines[1:]
             if line.split(":", 1)[0].strip().lower() == "host"]
    # The name with its port or without, and with DNS's root dot (the CONNECT was matched without it).
    names = {f"{name}{port}" for name in (secret.host, f"{secret.host}.") for port in ("", f":{secret.port}")}
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
                rewritten = rewrite_head(head, secret)
                fence = BodyFence(head)
                upstream.sendall(rewritten + fence.feed(rest))
            except Rejected as rejected:
                _answer(inner, rejected)
                return
            except OSError:
                return
            injected(method)
            with contextlib.suppress(Rejected):  # a chunk the fence cannot read ends the tunnel
                relay(inner, upstream, idle_s, ResponseGuard(list(secret.redact), method), fence)
            self.keep_session(upstream, secret)


def _recv(sock: socket.socket) -> bytes:
    """What one read gives, with what TLS already decrypted (select() cannot see that)."""
    data = sock.recv(65536)
    while data and isinstance(sock, ssl.SSLSocket) and sock.pending():
        data += sock.recv(sock.pending())
    return data


def relay(client: socket.socket, upstream: socket.socket, idle_s: float,
          masker: Masker | ResponseGuard | None = None,
          fence: BodyFence | None = None) -> None:
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
                    if masker is not None and masking:
                        data = masker.feed(data)
                        while more := masker.pending():  # a compressed answer, one bounded step at a time
                            dst.sendall(data)
                            data = more
                    elif fence is not None and src is client:
                        data = fence.feed(data)  # past the body: read, never sent
                    if data:
                        dst.sendall(data)
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


def _answer_bytes(rejected: Rejected) -> bytes:
    body = f"sandloop egress proxy: {rejected.reason}\n".encode()
    text = {400: "Bad Request", 421: "Misdirected Request", 502: "Bad Gateway"}.get(rejected.status, "Error")
    head = (f"HTTP/1.1 {rejected.status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nX-Sandloop-Rule: secrets\r\nConnection: close\r\n\r\n")
    return head.encode() + body


def _answer(sock: socket.socket, rejected: Rejected) -> None:
    with contextlib.suppress(OSError):
        sock.sendall(_answer_bytes(rejected))
