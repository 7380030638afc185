"""The live view: x11vnc on the container's loopback behind a fresh password, reached only
through the host's loopback listener — a real RFB handshake, with the wrong password and the
right one."""

from __future__ import annotations

import asyncio
import struct

from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
from cryptography.hazmat.primitives.ciphers import Cipher, modes

from sandbox.desktop import Desktop
from sandbox.desktop.live import VNC_PORT, start_live_view
from sandbox.docker import DockerSession


def _vnc_response(password: str, challenge: bytes) -> bytes:
    """VNC authentication: the challenge DES-encrypted with the password, each key byte's bits
    reversed (the protocol's own quirk)."""
    key = bytes(int(f"{b:08b}"[::-1], 2) for b in password.encode().ljust(8, b"\0")[:8])
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()  # three equal keys: single DES
    return encryptor.update(challenge) + encryptor.finalize()


async def _handshake(port: int, password: str) -> tuple[int, bytes]:
    """The security result (0: in) and, when in, the server's init message."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert await reader.readexactly(12) == b"RFB 003.008\n"
        writer.write(b"RFB 003.008\n")
        (count,) = await reader.readexactly(1)
        types = await reader.readexactly(count)
        assert types == b"\x02"  # VNC authentication, and nothing without it
        writer.write(b"\x02")
        challenge = await reader.readexactly(16)
        writer.write(_vnc_response(password, challenge))
        (result,) = struct.unpack(">I", await reader.readexactly(4))
        if result != 0:
            return result, b""
        writer.write(b"\x01")  # ClientInit: shared
        return result, await reader.readexactly(24)
    finally:
        writer.close()


async def test_the_live_view_needs_its_password_and_shows_the_screen(desktop: Desktop) -> None:
    assert isinstance(desktop.session, DockerSession)
    view = await start_live_view(desktop.session)
    try:
        assert view.host == "127.0.0.1" and view.url == f"vnc://127.0.0.1:{view.port}"
        wrong, _ = await _handshake(view.port, "x" * 8 if view.password != "x" * 8 else "y" * 8)
        assert wrong != 0
        result, init = await _handshake(view.port, view.password)
        assert result == 0
        assert struct.unpack(">HH", init[:4]) == desktop.screen
        # inside, x11vnc listens on the container's loopback only
        tcp = (await desktop.session.run("cat /proc/net/tcp /proc/net/tcp6")).stdout.text
        port = f":{VNC_PORT:04X} "
        listening = [line.split()[1] for line in tcp.splitlines()[1:] if port in line and line.split()[3] == "0A"]
        loopback = ("0100007F", "00000000000000000000000001000000")  # 127.0.0.1, ::1
        assert listening and all(addr.startswith(loopback) for addr in listening)
    finally:
        await view.close()
