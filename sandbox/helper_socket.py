"""The host's end of the helper's unix socket: made where only this host user can reach it,
bind-mounted read-only into one container, and handed to exactly one peer, the helper.

The attach stream a container is spoken to over passes through the engine and the container's
shim: under load each of those hops waits for a CPU, both ways, on every request. A unix socket
is one copy in the kernel. So the host listens in a directory of its own — a fresh one inside a
private (0700) cache directory, outside every path a sandbox can write — and the container gets
that directory read-only (``connect`` needs no write access to the mount, and nothing can be
created there). The helper connects before it reads its first request; the host accepts after
the helper's hello (sent over the attach stream) says it did, and before any command runs, and
then closes the listener and removes the socket and its directory: nothing else can ever
connect. Where a sandbox cannot reach host sockets (gVisor), the helper says so in its hello and
everything stays on the attach stream.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path

from docker.types import Mount

from sandloop.errors import SandboxUnavailable

from .bundle import cache_dirs, private_dir

__all__ = ["SOCKET_NAME", "HelperListener"]

SOCKET_NAME = "helper.sock"


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class HelperListener:
    """A listening socket in a fresh private directory, for one helper to connect to."""

    def __init__(self, *, outside: Iterable[Path] = ()) -> None:
        avoid = [Path(p).resolve() for p in outside]
        problems: list[str] = []
        for candidate in cache_dirs():
            base = candidate / "sockets"
            if any(_inside(base.resolve(), root) for root in avoid):
                problems.append(f"{base} is inside a sandbox-writable directory")
                continue
            try:
                os.close(private_dir(candidate))  # 0700 and ours: nobody else gets below it
                os.close(private_dir(base))
                self.dir = Path(tempfile.mkdtemp(prefix="s", dir=base))
                break
            except OSError as exc:
                problems.append(f"{base}: {exc}")
        else:
            raise SandboxUnavailable(f"no private place for the helper's socket: {'; '.join(problems)}")
        self._sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The container's uid must be able to enter the directory and connect; nobody else on
            # this host can get as far as the directory (its parents are 0700).
            os.chmod(self.dir, 0o711)
            dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                # Bound through the descriptor: a socket's path has at most 107 bytes, a cache
                # directory's path may have more.
                self._sock.bind(f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}")
                os.chmod(SOCKET_NAME, 0o666, dir_fd=dir_fd)  # a fresh directory nobody else can enter
            finally:
                os.close(dir_fd)
            self._sock.listen(1)
            self._sock.setblocking(False)
        except OSError as exc:
            self.close()
            raise SandboxUnavailable(f"cannot make the helper's socket in {self.dir}: {exc}") from exc

    def mount(self, target: str) -> Mount:
        """The directory, read-only at ``target`` in the container."""
        return Mount(target, str(self.dir), type="bind", read_only=True)

    def accept(self, timeout_s: float = 10.0) -> socket.socket:
        """The one connection (the helper's, which connected before its hello), then nothing
        more: the listener is closed and the socket and its directory removed."""
        sock = self._sock
        if sock is None:
            raise SandboxUnavailable("the helper's socket is closed")
        try:
            if not select.select([sock], [], [], timeout_s)[0]:
                raise SandboxUnavailable("the helper said it connected to its socket, but no connection came")
            conn, _ = sock.accept()
        except OSError as exc:
            raise SandboxUnavailable(f"cannot accept the helper's connection: {exc}") from exc
        finally:
            self.close()
        conn.setblocking(True)
        return conn

    def close(self) -> None:
        """Stop listening and remove the socket and its directory (idempotent)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.dir / SOCKET_NAME)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)
