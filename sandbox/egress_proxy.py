"""sandloop's egress proxy: the one way out of a sandbox whose policy lists ``[shell] network``.

Standard library only: it runs inside the shell image, shipped as a zip application with the
modules it shares with the host (:mod:`sandbox.bundle`). The
sandbox sits on an ``--internal`` Docker network with no route out; this process sits on that
network and on the default bridge, and forwards only to hosts the allow-list names:

* ``CONNECT host:port`` (what clients do for https), then a blind byte tunnel;
* plain-HTTP forward proxying (``GET http://host/path``), rewritten to origin form.

Anything else gets ``403`` with a plain-text body naming the rule. Every decision is one JSON line
on stdout, which the front-end reads through its attach stream. When stdin closes (the
front-end went away, even SIGKILLed) the process exits, as the helper does.

Entries are matched by :mod:`sandloop.matching`, the matcher the policy engine and the browser
use too: ``example.com`` is exactly that host, ``*.example.com`` any name under it (not the bare
domain), ``*`` any *name*, and any entry may name a port (``host:443``). An IP literal is
reached only when listed exactly, so ``*`` never opens raw addresses; and no name is followed to
a loopback, link-local, multicast or unspecified address, whatever the list says (the metadata
service lives at 169.254.169.254; loopback here is the proxy itself).

With ``--secrets`` the first line on stdin configures :mod:`sandbox.egress_inject`: a ``CONNECT``
to a listed secret's exact host and port is answered by it (TLS ended, the secret added);
every other ``CONNECT`` stays the blind tunnel above.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import socket
import socketserver
import sys
import threading
from urllib.parse import urlsplit

from sandbox.egress_inject import Injector, Secret, relay
from sandloop.matching import HostEntry, host_entry, ip_literal, match_host, normalise_host

RULE = "shell.network"
MAX_HEAD = 64 << 10
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
IDLE_TIMEOUT_S = 300.0
# Hop-by-hop headers (RFC 9110 7.6.1) and proxy credentials never go upstream.
_DROP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "upgrade"}

_out_lock = threading.Lock()


class Refused(Exception):
    """A request the proxy will not forward: ``status`` and the plain text the client sees."""

    def __init__(self, status: int, reason: str, rule: str = RULE) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.rule = rule


def normalize_host(host: str) -> str:
    """The host as allow-list entries are written (:func:`sandloop.matching.normalise_host`);
    Refused(400) for anything that is neither a name nor an address."""
    try:
        return normalise_host(host)
    except ValueError as exc:
        raise Refused(400, f"{host!r} is not a host name ({exc})", "egress.request") from None


def check(allow: list[HostEntry], host: str, port: int) -> HostEntry:
    """The entry that allows ``host`` on ``port``, or Refused(403) with the text the client sees."""
    entry = match_host(allow, host, port)
    if entry is not None:
        return entry
    listed = ", ".join(map(str, allow)) or "(nothing)"
    if ip_literal(host) is not None:
        why = f"{host} is an IP address, and addresses are reached only when listed exactly"
    else:
        why = f"{host}:{port} matches none of: {listed}"
    raise Refused(403, f"refused by policy rule {RULE}: {why}")


def _forbidden(addr: str, *, private_ok: bool = False) -> str | None:
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind in ("loopback", "link_local", "multicast", "unspecified"):
        if getattr(ip, f"is_{kind}"):
            return kind.replace("_", "-")
    # The proxy sits on the engine's default bridge: a private address there can be the host
    # itself (the bridge gateway, the host's own LAN address) or another container. An allowed
    # *name* that resolves there (DNS rebinding, a stale record) must not open it.
    if not ip.is_global and not private_ok:
        return "not a public address"
    return None


def connect(host: str, port: int, *, private_ok: bool = False) -> socket.socket:
    """Connect to an allowed host, skipping addresses no allow-list may open. ``private_ok``:
    the host was listed as an exact IP literal, or the operator allowed private destinations."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(502, f"cannot resolve {host}: {exc}", "egress.upstream") from None
    last = "no address"
    for family, kind, proto, _, sockaddr in infos:
        bad = _forbidden(str(sockaddr[0]), private_ok=private_ok)
        if bad is not None:
            last = f"{host} resolves to {sockaddr[0]} ({bad}), which the proxy never connects to"
            continue
        sock = socket.socket(family, kind, proto)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            last = f"cannot connect to {host}:{port}: {exc}"
            continue
        sock.settimeout(None)
        return sock
    status = 403 if "never connects" in last else 502
    raise Refused(status, last, "egress.address" if status == 403 else "egress.upstream")


def emit(event: dict[str, object]) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event, sort_keys=True) + "\n")
        sys.stdout.flush()


def _split_host_port(authority: str, default: int) -> tuple[str, int]:
    parts = urlsplit("//" + authority)
    try:
        port = parts.port or default
    except ValueError:
        raise Refused(400, f"bad port in {authority!r}", "egress.request") from None
    return normalize_host(parts.hostname or ""), port


class Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        client: socket.socket = self.request
        client.settimeout(HEAD_TIMEOUT_S)
        method, where = "?", "?"  # the decision names host:port once it is known
        try:
            head, rest = self._read_head(client)
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = [*lines[0].split(" "), "", "", ""][:3]
            where = target
            if not version.startswith("HTTP/"):
                raise Refused(400, "not an HTTP request", "egress.request")
            tunnel = method.upper() == "CONNECT"
            if tunnel:
                host, port = _split_host_port(target, 443)
                first = b""
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.netloc:
                    raise Refused(400, "send http:// URLs in absolute form, and https through CONNECT",
                                  "egress.request")
                host, port = _split_host_port(url.netloc, 80)
                authority = url.netloc.rpartition("@")[2]  # credentials in a URL are not a Host
                first = self._origin_form(lines, version, url.path, url.query, authority)
            where = f"{host}:{port}"
            entry = check(self.server.allow, host, port)
            # An IP literal passed only by being listed exactly: the operator named it.
            listed_address = ip_literal(host) is not None
            secret = self.server.injector.secret_for(host, port) if tunnel and self.server.injector else None
            private_ok = self.server.private_ok or listed_address or (secret is not None and secret.private)
            upstream = connect(host, port, private_ok=private_ok)
            if secret is not None:
                self._secret_tunnel(client, upstream, secret, entry)
                return
        except Refused as refused:
            self._decide(False, method, where, refused.rule, refused.reason)
            self._refuse(client, refused)
            return
        except (OSError, UnicodeError) as exc:
            self._decide(False, method, where, "egress.request", f"bad request: {exc}")
            return
        self._decide(True, method, where, RULE, f"allowed by entry {str(entry)!r}")
        client.settimeout(None)
        with upstream:
            if tunnel:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            upstream.sendall(first + rest)
            relay(client, upstream, IDLE_TIMEOUT_S)

    def _secret_tunnel(self, client: socket.socket, upstream: socket.socket, secret: Secret, entry: HostEntry) -> None:
        """A CONNECT to a secret's host: the upstream verified before the 200, then the injector."""
        injector = self.server.injector
        assert injector is not None
        where = f"{secret.host}:{secret.port}"
        try:
            upstream.settimeout(CONNECT_TIMEOUT_S)
            tls = injector.open_upstream(upstream, secret)
            tls.settimeout(None)
        except OSError as exc:  # ssl.SSLError is one: an unverifiable server never gets the secret
            upstream.close()
            raise Refused(502, f"{where} failed TLS verification against the host's trust store "
                          f"({getattr(exc, 'verify_message', None) or exc}); its secret was not sent",
                          "egress.upstream") from None
        self._decide(True, "CONNECT", where, RULE, f"allowed by entry {str(entry)!r}; TLS ended by the "
                     f"proxy to add secret {secret.name!r}")
        client.settimeout(None)

        def injected(method: str) -> None:
            emit({"event": "decision", "allowed": True, "method": method, "target": where,
                  "rule": f"secrets.{secret.name}", "reason": f"secret {secret.name!r} added ({secret.header})",
                  "client": self.client_address[0], "secret": secret.name})

        with tls, contextlib.suppress(OSError):
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            injector.serve(client, tls, secret, injected, IDLE_TIMEOUT_S)

    @staticmethod
    def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            if len(buf) > MAX_HEAD:
                raise Refused(400, "request head too large", "egress.request")
            chunk = sock.recv(8192)
            if not chunk:
                raise Refused(400, "connection closed before the request head ended", "egress.request")
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        return head, rest

    @staticmethod
    def _origin_form(lines: list[str], version: str, path: str, query: str, netloc: str) -> bytes:
        method = lines[0].split(" ", 1)[0]
        target = (path or "/") + (f"?{query}" if query else "")
        headers = [
            line for line in lines[1:]
            if line and line.split(":", 1)[0].strip().lower() not in _DROP | {"host"}
        ]
        # One request per upstream connection: a second request on a kept-alive connection
        # would reach this host whatever URL it named, so it is never offered.
        out = [f"{method} {target} {version}", f"Host: {netloc}", *headers, "Connection: close", "", ""]
        return "\r\n".join(out).encode("latin-1")

    def _decide(self, allowed: bool, method: str, target: str, rule: str, reason: str) -> None:
        emit({"event": "decision", "allowed": allowed, "method": method, "target": target,
              "rule": rule, "reason": reason, "client": self.client_address[0]})

    @staticmethod
    def _refuse(sock: socket.socket, refused: Refused) -> None:
        body = f"sandloop egress proxy: {refused.reason}\n".encode()
        status = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[refused.status]
        head = (f"HTTP/1.1 {refused.status} {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\nX-Sandloop-Rule: {refused.rule}\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(OSError):
            sock.sendall(head.encode() + body)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, allow: list[HostEntry], bind: str = "0.0.0.0",
                 clients: list[str] | None = None, private_ok: bool = False,
                 injector: Injector | None = None) -> None:
        self.allow = allow
        self.injector = injector
        self.private_ok = private_ok
        # The proxy also sits on the default bridge, where any container could find it: only
        # the session's own network may use it.
        self.clients = [ipaddress.ip_network(net) for net in clients or ["0.0.0.0/0", "::/0"]]
        super().__init__((bind, port), Handler)

    def verify_request(self, request: socket.socket | tuple[bytes, socket.socket],
                       client_address: tuple[str, int] | str) -> bool:
        addr = ipaddress.ip_address(str(client_address[0]))
        if any(addr in net for net in self.clients):
            return True
        emit({"event": "decision", "allowed": False, "method": "-", "target": "-", "rule": "egress.client",
              "reason": f"{addr} is not on the session's network", "client": str(addr)})
        return False


def _exit_when_stdin_closes() -> None:
    # The front-end holds our stdin through its attach stream; EOF means it is gone.
    while sys.stdin.buffer.read(65536):
        pass
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egress_proxy")
    parser.add_argument("--port", type=int, default=3128)
    parser.add_argument("--allow", action="append", default=[])
    parser.add_argument("--client", action="append", help="subnet allowed to use the proxy")
    parser.add_argument("--private-ok", action="store_true", help="let allowed names reach private addresses")
    parser.add_argument("--secrets", action="store_true", help="read the secrets' configuration from stdin first")
    args = parser.parse_args(argv)
    # One JSON line, before anything else is read from stdin (which then only signals EOF).
    injector = Injector(json.loads(sys.stdin.buffer.readline())) if args.secrets else None
    server = Server(args.port, [host_entry(entry) for entry in args.allow], clients=args.client,
                    private_ok=args.private_ok, injector=injector)
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    emit({"event": "ready", "port": args.port})
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
