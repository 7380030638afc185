"""The "Chromium executable" Playwright launches for the container placement.

Playwright drives Chromium over ``--remote-debugging-pipe``: it spawns its executable with the
protocol on fds 3 (commands in) and 4 (replies out). This module is that executable. It creates
the browser container (its hardened configuration comes from a JSON spec that
:mod:`sandbox.browser.container` writes), attaches to the container's stdin/stdout, starts it
with Chromium's own fds 3/4 wired to them, and relays bytes both ways until either side closes. The container has
no network at all (``network_mode="none"``): the debugging protocol crosses the attach stream, not
a socket, and page traffic is fetched on the host by Playwright (:mod:`sandbox.browser.routing`).

Invoked as ``python -P .../sandbox/browser/relay.py SPEC.json <chromium args...>`` (by a two-line
wrapper script, since Playwright needs one executable path): as a file, so that it imports
nothing of sandloop, only the standard library and the docker SDK. Chromium's arguments are
passed through, except the host user-data-dir Playwright created, which is replaced by a tmpfs
path inside.

Docker multiplexes stdout and stderr over one attach stream when there is no TTY (8-byte frame
headers: stream id, 3 zero bytes, big-endian length); frames from stdout carry the protocol, those
from stderr (Chromium's logs) go to our stderr, which Playwright keeps for its launch errors.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO, Protocol, runtime_checkable

# Inside the container: exec Chromium with fds 3/4 = the attached stdin/stdout, then point its
# own stdin at /dev/null and its stdout at stderr, so nothing else can write into the protocol.
SHELL = 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>&2'
PROFILE = "/home/sandbox/profile"
EXIT_GRACE_S = 2.0
_STDOUT, _STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")


@runtime_checkable
class _Stream(Protocol):
    """What the relay needs of the attach stream: a socket, or whatever docker-py's transport
    gives instead (an SSH channel) with the same three calls."""

    def recv(self, size: int, /) -> bytes: ...
    def sendall(self, data: bytes, /) -> None: ...
    def shutdown(self, how: int, /) -> None: ...


def chromium_command(executable: str, args: list[str]) -> list[str]:
    """The container command for Playwright's ``args`` (a pure function, unit-tested)."""
    mapped = [f"--user-data-dir={PROFILE}" if a.startswith("--user-data-dir=") else a for a in args]
    return ["sh", "-c", SHELL, executable, *mapped]


def _read_exactly(sock: _Stream, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _demux(sock: _Stream, out: BinaryIO, err: BinaryIO) -> None:
    """Container stdout → Playwright (fd 4), container stderr → our stderr, until EOF."""
    while (header := _read_exactly(sock, _HEADER.size)) is not None:
        stream, size = _HEADER.unpack(header)
        payload = _read_exactly(sock, size)
        if payload is None:
            return
        target = out if stream == _STDOUT else err
        target.write(payload)
        target.flush()


def _pump_in(source: int, sock: _Stream, end: Callable[[], None]) -> None:
    """Playwright's commands (fd 3) → the container's stdin.

    EOF means Playwright is done or gone (its driver died with its Python process): Chromium
    gets a moment to exit on its own, then ``end`` removes the container, which ends the relay.
    """
    try:
        while chunk := os.read(source, 1 << 16):
            sock.sendall(chunk)
    except OSError:
        pass
    with suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
    time.sleep(EXIT_GRACE_S)
    end()


def _raw_socket(attached: object) -> _Stream:
    # docker-py returns the socket.SocketIO of the HTTP upgrade; we want the socket under it.
    sock = getattr(attached, "_sock", attached)
    if not isinstance(sock, _Stream):
        raise TypeError(f"docker's attach stream has no socket calls: {type(sock).__name__}")
    return sock


def main(argv: list[str]) -> int:
    import docker
    import docker.errors

    spec = json.loads(Path(argv[0]).read_text())
    client = docker.from_env()
    create: dict[str, Any] = spec["create"]
    command = chromium_command(spec["executable"], argv[1:])
    container = client.containers.create(
        spec["image"], command, stdin_open=True, tty=False, **create
    )

    def remove(*_: object) -> None:
        with suppress(docker.errors.APIError):
            container.remove(force=True)

    # Playwright ends us with SIGKILL only when a graceful close failed; the parent then removes
    # the container by name. For anything gentler, take the container with us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    try:
        attached = client.api.attach_socket(
            container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        sock = _raw_socket(attached)
        container.start()
        threading.Thread(target=_pump_in, args=(3, sock, remove), daemon=True).start()
        with os.fdopen(4, "wb", buffering=0) as out:
            _demux(sock, out, sys.stderr.buffer)
        return 0
    finally:
        remove()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
