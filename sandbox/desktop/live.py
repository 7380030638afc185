"""A live view of a desktop for a person watching: off unless asked for.

x11vnc runs inside the desktop's container, listening on the container's own loopback only,
behind a password made for this view (VNC passwords are 8 characters). The container has no
network a host could reach, so the view is carried the way the helper is: the host listens on
127.0.0.1 (a random port), and each connection to it is relayed into the container through the
engine — a ``docker exec`` of a small relay (standard library) to x11vnc's port. Nothing listens
anywhere but the host's loopback and the container's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import socket
from dataclasses import dataclass, field
from typing import Any

from sandbox.docker import DockerSession, _Demux
from sandloop.errors import SandboxUnavailable

__all__ = ["VNC_PORT", "LiveView", "start_live_view"]

#: x11vnc's port on the container's loopback
VNC_PORT = 5900

# Inside the container: the exec's stdin to x11vnc, x11vnc to its stdout.
_RELAY = f"""
import os, socket, threading
s = socket.create_connection(("127.0.0.1", {VNC_PORT}))
def up():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        s.sendall(data)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while True:
    data = s.recv(65536)
    if not data:
        break
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]
"""


@dataclass
class LiveView:
    """Where a VNC viewer connects (``vnc://127.0.0.1:port``) and the password it needs."""

    host: str
    port: int
    password: str
    _server: asyncio.base_events.Server | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"vnc://{self.host}:{self.port}"

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()


async def start_live_view(session: DockerSession) -> LiveView:
    """Start x11vnc on the desktop's display and the host's loopback listener that reaches it."""
    password = secrets.token_hex(4)  # 8 characters: all of a VNC password
    started = await session.run(
        f"x11vnc -display :0 -localhost -rfbport {VNC_PORT} -passwd {shlex.quote(password)} -forever -shared "
        "-bg -quiet -o /tmp/.sandloop-x11vnc.log", timeout_s=30)
    if started.exit_code != 0:
        raise SandboxUnavailable(f"the live view did not start: {started.stderr.text.strip()[-300:]}")
    view = LiveView("127.0.0.1", 0, password)

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _relay(session, reader, writer)
        finally:
            writer.close()

    view._server = await asyncio.start_server(relay, "127.0.0.1", 0)
    view.port = view._server.sockets[0].getsockname()[1]
    return view


async def _relay(session: DockerSession, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    container = session.container
    if container is None:
        return
    api = session.client.api

    def open_exec() -> socket.socket:
        exec_id = api.exec_create(container.id, ["python3", "-I", "-c", _RELAY], stdin=True, user=session.user)["Id"]
        raw: Any = api.exec_start(exec_id, socket=True)
        sock: socket.socket = getattr(raw, "_sock", raw)
        sock.settimeout(None)
        return sock

    sock = await asyncio.to_thread(open_exec)
    demux = _Demux(sock, lambda data: None)

    async def inward() -> None:
        while data := await reader.read(65536):
            await asyncio.to_thread(sock.sendall, data)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    async def outward() -> None:
        while data := await asyncio.to_thread(demux.recv, 65536):
            writer.write(data)
            await writer.drain()

    try:
        _, pending = await asyncio.wait([asyncio.ensure_future(inward()), asyncio.ensure_future(outward())],
                                           return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
    finally:
        sock.close()
