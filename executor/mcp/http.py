"""``sandloop mcp --http HOST:PORT``: the server over Streamable HTTP, on loopback, behind a token.

Every HTTP request must carry ``Authorization: Bearer <token>`` (compared in constant time); the
token is generated at start and printed once on stderr, or taken from ``SANDLOOP_MCP_TOKEN``.
Only a loopback address is bound unless ``--allow-remote`` says otherwise (the token is never
optional), and on loopback the SDK's DNS-rebinding protection checks ``Host`` and ``Origin``.
Each ``Mcp-Session-Id`` is one MCP session with its own sandbox; a session the client ends
(DELETE), abandons (no request and no open stream for ``--idle-timeout`` seconds) or that the
server's shutdown ends is closed, and its sandbox removed.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from executor.mcp.server import Sessions, build_server, tell
from executor.mcp.session import ServeOptions
from sandloop.errors import ConfigError

__all__ = ["PATH", "TOKEN_ENV", "Bind", "guard", "parse_bind", "serve_http"]

PATH = "/mcp"
TOKEN_ENV = "SANDLOOP_MCP_TOKEN"
_MIN_TOKEN = 32

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Bind:
    host: str
    port: int
    loopback: bool

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET


def parse_bind(text: str, *, allow_remote: bool) -> Bind:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0 picks a free one). HOST must be an IP
    address or ``localhost``; anything but loopback needs ``allow_remote``."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--http {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8765")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(f"--http {text!r}: HOST must be an IP address (or localhost), not a name") from None
    if not address.is_loopback and not allow_remote:
        raise ConfigError(f"--http {text!r}: refusing to serve on a non-loopback address; anyone who can "
                          "reach it and has the token can run commands in the sandbox. Add --allow-remote "
                          "if that is what you want (put TLS in front of it)")
    return Bind(str(address), int(port), address.is_loopback)


def _token() -> str:
    given = os.environ.get(TOKEN_ENV)
    if given is None:
        return secrets.token_urlsafe(32)
    if len(given) < _MIN_TOKEN:
        raise ConfigError(f"{TOKEN_ENV} is too short: use at least {_MIN_TOKEN} random characters")
    return given


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((value for key, value in scope.get("headers", []) if key.lower() == name), None)


async def _reply(send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})


def _declared_size(scope: Scope) -> int | None:
    value = (_header(scope, b"content-length") or b"").decode("latin-1")
    return int(value) if value.isdigit() else None


def guard(app: App, token: str, *, message_limit: int) -> App:
    """``app`` behind the bearer token, answering the 2026-07-28 protocol as a server of the
    handshake era (see :mod:`executor.mcp.server`), and refusing a body larger than
    ``message_limit`` with a JSON-RPC error the client shows (the SDK's own check, which still
    stands behind this one for a body of undeclared length, answers in plain text)."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)  # the lifespan
            return
        given = _header(scope, b"authorization") or b""
        # The scheme is case-insensitive; the comparison of the rest takes the same time
        # wherever it differs.
        if given[:7].lower() == b"bearer ":
            given = b"Bearer " + given[7:]
        if not hmac.compare_digest(given, expected):
            await _reply(send, 401, {"error": "unauthorized: this server needs its bearer token"},
                         [(b"www-authenticate", b'Bearer realm="sandloop"')])
            return
        size = _declared_size(scope)
        if size is not None and size > message_limit:
            # Read to its end and dropped (constant memory): a client still sending its body
            # would not read the answer.
            while (await receive()).get("more_body"):
                pass
            await _reply(send, 413, {"jsonrpc": "2.0", "id": None, "error": {
                "code": INVALID_REQUEST,
                "message": f"message too large: {size} bytes; this server reads at most {message_limit} bytes in "
                           "one JSON-RPC message (sandloop mcp's limit; it was not read)"}}, [])
            return
        version = (_header(scope, b"mcp-protocol-version") or b"").decode("latin-1")
        if version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _reply(send, 400, {"jsonrpc": "2.0", "id": None, "error": {
                "code": UNSUPPORTED_PROTOCOL_VERSION,
                "message": "sandloop serves MCP sessions (one sandbox each): use the initialize handshake",
                "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}}}, [])
            return
        await app(scope, receive, send)

    return guarded


def _security(bind: Bind) -> TransportSecuritySettings:
    if not bind.loopback:
        # A remote client names the server however its network does; the token stands guard.
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    host = f"[{bind.host}]" if ":" in bind.host else bind.host
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{host}:{bind.port}", f"localhost:{bind.port}"],
        allowed_origins=[f"http://{host}:{bind.port}", f"http://localhost:{bind.port}"])


async def serve_http(options: ServeOptions, bind: Bind, *, idle_timeout_s: float) -> None:
    """Serve until interrupted; every open session is closed (its sandbox removed) on the way out."""
    token = _token()
    sock = socket.socket(bind.family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.host, bind.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--http {bind.host}:{bind.port}: cannot listen there ({exc.strerror})") from None
    # Listening before the URL is printed: a client that reads it and connects at once would
    # otherwise be refused until uvicorn's start-up got to listen() itself. Connections made
    # meanwhile wait in the backlog and are served once the app has started.
    sock.listen(2048)
    port = sock.getsockname()[1]
    bind = Bind(bind.host, port, bind.loopback)
    host = f"[{bind.host}]" if ":" in bind.host else bind.host
    url = f"http://{host}:{port}{PATH}"
    sessions = Sessions(replace(options, endpoint=url))
    server, message_limit = build_server(sessions)
    app = server.streamable_http_app(streamable_http_path=PATH, host=bind.host, session_idle_timeout=idle_timeout_s,
                                     transport_security=_security(bind), max_request_body_size=message_limit)
    config = uvicorn.Config(guard(app, token, message_limit=message_limit), lifespan="on", log_level="warning",
                            timeout_graceful_shutdown=10)
    tell(f"serving MCP on {url}")
    if TOKEN_ENV not in os.environ:
        # Printed once, here, and nowhere else: clients send it as "Authorization: Bearer …".
        tell(f"bearer token: {token}")
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        await sessions.drain()
