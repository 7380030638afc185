"""The attach websocket as one byte stream for the helper's protocol.

``kubernetes.stream`` opens the websocket (``v5.channel.k8s.io`` offered first, ``v4`` as the
fallback an older API server or kubelet picks) with ``binary=True``, so bytes stay bytes. Each
message is one channel byte and a payload: stdout (1) carries the helper's frames — re-assembled
across messages, which the server cuts where it likes —, stderr (2) goes to the log (the
loader's and the helper's last words), the error channel (3) carries the final Status. What we
write goes out on stdin (0) in messages of at most :data:`MAX_MESSAGE` bytes (an API server
refuses frames over 32 MiB). The helper sees the end of its input when the websocket closes
(v5 could half-close stdin with a ``[255, 0]`` message; nothing here needs it, and v4 cannot).
The Status the server sends on the error channel when the attach ends is kept (:attr:`status`):
it says why, and the session's account of a dead pod includes it.

Reading: one blocking read of the next whole message at a time (``recv_data_frame``), never the
library's ``update``/``read_channel`` pair. Those poll the socket and, when the channel asked
for is empty, read ahead with another ``update``: a message that arrived while the reader went
from one call to the next then sat in the library's channel buffer while the reader polled the
socket for it — for ever, once nothing else was coming (the last reply of a copy-back, seen once
as a 120 s timeout under load, and reproduced in ``tests/k8s/test_channels.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from typing import Any

import websocket
from kubernetes.stream import stream as _stream
from kubernetes.stream.ws_client import (
    ERROR_CHANNEL,
    STDERR_CHANNEL,
    STDOUT_CHANNEL,
    V4_CHANNEL_PROTOCOL,
    V5_CHANNEL_PROTOCOL,
    WSClient,
)
from websocket import ABNF

from .cluster import Cluster, api_errors

__all__ = ["MAX_MESSAGE", "PROTOCOLS", "AttachStream", "attach"]

log = logging.getLogger("sandloop.kubernetes")

MAX_MESSAGE = 1 << 20
PROTOCOLS = (V5_CHANNEL_PROTOCOL, V4_CHANNEL_PROTOCOL)
CONNECT_TIMEOUT_S = 30.0

_connect_lock = threading.Lock()
k8s_stream: Any = _stream


class AttachStream:
    """``recv(n)`` / ``send(data)`` over one attach websocket; one reader thread, any writers."""

    def __init__(self, ws: WSClient, name: str) -> None:
        self.ws: Any = ws  # the library's methods are untyped
        self.name = name
        self._buf = b""
        self.stderr_tail: list[bytes] = []
        #: the Status the server sent on the error channel when the attach ended, if any
        self.status: dict[str, Any] | None = None
        self._error = b""
        self._ended = False

    @property
    def protocol(self) -> str:
        return str(self.ws.subprotocol or "")

    def recv(self, n: int) -> bytes:
        while not self._buf:
            if not self._receive():
                return b""
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _receive(self) -> bool:
        """Wait for the next message and file its payload by channel; False once the stream ended."""
        if self._ended:
            return False
        try:
            opcode, frame = self.ws.sock.recv_data_frame(True)  # answers a ping itself
        except (websocket.WebSocketException, OSError, ValueError, TypeError, AttributeError):
            opcode, frame = ABNF.OPCODE_CLOSE, None  # broken, or closed under us
        if opcode == ABNF.OPCODE_CLOSE:
            self._ended = True
            return False
        data = frame.data if opcode in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) else b""
        data = data.encode() if isinstance(data, str) else bytes(data)
        if not data:
            return True  # a ping or pong, or the empty message that opens the stream
        channel, payload = data[0], data[1:]
        if channel == STDOUT_CHANNEL:
            self._buf += payload
        elif channel == STDERR_CHANNEL and payload:
            self.stderr_tail.append(payload)
            del self.stderr_tail[:-20]
            log.debug("%s stderr: %s", self.name, payload.decode(errors="replace").rstrip())
        elif channel == ERROR_CHANNEL:
            self._error += payload
            with contextlib.suppress(ValueError):
                status = json.loads(self._error)
                self.status = status if isinstance(status, dict) else None
        return True  # v5's close of a channel, or a channel we did not ask for: nothing to keep

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self.ws.write_stdin(bytes(view[:MAX_MESSAGE]))
            view = view[MAX_MESSAGE:]

    def stderr_text(self) -> str:
        return b"".join(self.stderr_tail).decode(errors="replace")[-800:].strip()

    def close(self) -> None:
        """Wake the reader (a blocked read) and drop the connection."""
        sock = getattr(self.ws.sock, "sock", None)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self.ws.close()


def attach(cluster: Cluster, pod: str, container: str, *, protocols: tuple[str, ...] = PROTOCOLS) -> AttachStream:
    """Attach to ``container``'s stdin/stdout/stderr (blocking; call from a thread)."""
    from .cluster import client

    core = client.CoreV1Api(cluster.new_api())
    with api_errors(f"cannot attach to pod {pod}"), _connect_lock:
        # The library sets no timeout on the connection or the handshake: a default one for
        # this connect only, then none for the session's long-lived stream.
        previous = websocket.getdefaulttimeout()
        websocket.setdefaulttimeout(CONNECT_TIMEOUT_S)
        try:
            ws: Any = k8s_stream(core.connect_get_namespaced_pod_attach, pod, cluster.namespace, container=container,
                            stdin=True, stdout=True, stderr=True, tty=False, binary=True,
                            _preload_content=False, _headers={"sec-websocket-protocol": ",".join(protocols)})
        finally:
            websocket.setdefaulttimeout(previous)
    ws.sock.settimeout(None)
    return AttachStream(ws, f"pod {pod}")
