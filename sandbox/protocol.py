"""Host side of the helper protocol (see sandbox/runner.py for the wire format).

:class:`RunnerClient` multiplexes concurrent requests over one byte stream by request id. A
reader thread owns the receiving side; each request is an asyncio future resolved from that
thread. Transport specifics (a Docker attach socket, a subprocess pipe) stay in the back-ends:
they hand over a ``recv(n)`` and a ``send(data)`` callable.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import itertools
import json
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sandloop.errors import FileMissing, PathRefused, SandboxError, SandboxTimeout, SandboxUnavailable
from sandloop.files import FileChange, FileInfo
from sandloop.limits import Limits
from sandloop.results import CommandResult, StreamCapture

from .base import Session

__all__ = ["HelperSession", "RunnerClient", "capture_from_wire", "result_from_wire"]

_ERROR_KINDS: dict[str, type[SandboxError]] = {
    "path_refused": PathRefused,
    "missing": FileMissing,
}


def capture_from_wire(wire: Mapping[str, Any]) -> StreamCapture:
    head = base64.b64decode(wire["head"])
    tail = base64.b64decode(wire["tail"])
    dropped = int(wire["dropped_bytes"])
    if dropped:
        marker = f"\n…[{dropped} bytes, {wire['dropped_lines']} lines dropped]…\n"
        text = head.decode(errors="replace") + marker + tail.decode(errors="replace")
    else:
        text = (head + tail).decode(errors="replace")
    return StreamCapture(
        text=text,
        total_bytes=int(wire["total_bytes"]),
        dropped_bytes=dropped,
        dropped_lines=int(wire["dropped_lines"]),
    )


def result_from_wire(wire: Mapping[str, Any]) -> CommandResult:
    return CommandResult(
        stdout=capture_from_wire(wire["stdout"]),
        stderr=capture_from_wire(wire["stderr"]),
        exit_code=wire["exit_code"],
        timed_out=bool(wire["timed_out"]),
        duration_s=float(wire["duration_s"]),
        oom_killed=bool(wire["oom_killed"]),
        signal=wire["signal"],
    )


class RunnerClient:
    """Speaks to one helper process. Safe to use from one asyncio loop."""

    def __init__(
        self,
        recv: Callable[[int], bytes],
        send: Callable[[bytes], None],
        *,
        name: str,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> None:
        self._recv = recv
        self._send = send
        self._name = name
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._dead: str | None = None
        self.on_stderr = on_stderr
        self._thread = threading.Thread(target=self._reader, name=f"sandloop-reader-{name}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._dead is None

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._recv(n - len(buf))
            if not chunk:
                raise EOFError("stream closed")
            buf += chunk
        return bytes(buf)

    def _reader(self) -> None:
        reason = "the helper's stream closed"
        try:
            while True:
                (size,) = struct.unpack(">I", self._read_exact(4))
                message = json.loads(self._read_exact(size))
                with self._lock:
                    waiter = self._pending.pop(message.get("id"), None)
                if waiter is not None:
                    loop, fut = waiter
                    loop.call_soon_threadsafe(_resolve, fut, message)
        except (EOFError, OSError, ValueError, struct.error) as exc:
            reason = f"the helper's stream closed ({exc})" if str(exc) != "stream closed" else reason
        self.mark_dead(reason)

    def mark_dead(self, reason: str) -> None:
        with self._lock:
            if self._dead is None:
                self._dead = reason
            pending, self._pending = self._pending, {}
        for loop, fut in pending.values():
            err = SandboxUnavailable(f"{self._name}: {reason}")
            loop.call_soon_threadsafe(_fail, fut, err)

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._dead is not None:
            raise SandboxUnavailable(f"{self._name}: {self._dead}")
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict[str, Any]] = loop.create_future()
        with self._lock:
            self._pending[rid] = (loop, fut)
        body = json.dumps({"id": rid, "op": op, **fields}, separators=(",", ":")).encode()
        frame = struct.pack(">I", len(body)) + body
        try:
            if len(frame) > 65536:
                await asyncio.to_thread(self._locked_send, frame)
            else:
                self._locked_send(frame)
        except OSError as exc:
            self.mark_dead(f"cannot write to the helper ({exc})")
        try:
            reply = await fut
        except asyncio.CancelledError:
            with self._lock:
                self._pending.pop(rid, None)
            raise
        if not reply.get("ok"):
            error = reply.get("error") or {}
            cls = _ERROR_KINDS.get(error.get("kind", ""), SandboxError)
            raise cls(error.get("message", "helper error"))
        return reply

    def _locked_send(self, frame: bytes) -> None:
        with self._send_lock:
            self._send(frame)

    # --- typed helpers used by the back-ends ---------------------------------------------

    async def run(
        self,
        command: str,
        *,
        timeout_s: float,
        max_output_bytes: int,
        env: Mapping[str, str] | None,
    ) -> CommandResult:
        reply = await self.request(
            "run",
            command=command,
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            env=dict(env or {}),
        )
        return result_from_wire(reply)

    async def read_file(self, path: str) -> bytes:
        reply = await self.request("read", path=path)
        return base64.b64decode(reply["data"])

    async def stat(self, path: str) -> FileInfo | None:
        reply = await self.request("stat", path=path)
        if not reply["exists"]:
            return None
        return FileInfo(
            path=path,
            size=reply["size"],
            mode=reply["mode"],
            is_dir=reply["is_dir"],
            is_symlink=reply["is_symlink"],
        )

    async def commit(self, changes: Sequence[FileChange]) -> None:
        wire = [
            {
                "path": c.path,
                "data": None if c.content is None else base64.b64encode(c.content).decode(),
                "mode": c.mode,
            }
            for c in changes
        ]
        await self.request("commit", changes=wire)


def _resolve(fut: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not fut.done():
        fut.set_result(message)


def _fail(fut: asyncio.Future[dict[str, Any]], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


class HelperSession(Session):
    """A Session whose every operation goes to a helper process through a RunnerClient.

    Subclasses provide :meth:`_client` (a live client, started or restarted as needed). Limits are
    clamped here, on the host, and enforced again by the helper; a helper that does not answer
    within the command's budget plus a margin is treated as dead rather than waited on forever.
    """

    #: Seconds the host waits beyond a command's own timeout (kill grace, drain, transport).
    REPLY_MARGIN_S = 15.0

    def __init__(self, limits: Limits, base_env: Mapping[str, str] | None = None) -> None:
        self.limits = limits
        #: Variables every command gets (a policy's ``[shell] env``); a call's own env wins.
        self.base_env = dict(base_env or {})

    @abc.abstractmethod
    async def _client(self) -> RunnerClient:
        """A live helper client."""


    async def run(
        self,
        command: str,
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        timeout = self.limits.timeout_s(timeout_s)
        cap = self.limits.output_bytes(max_output_bytes)
        client = await self._client()
        merged = {**self.base_env, **(env or {})}
        try:
            return await asyncio.wait_for(
                client.run(command, timeout_s=timeout, max_output_bytes=cap, env=merged),
                timeout + self.REPLY_MARGIN_S,
            )
        except TimeoutError:
            client.mark_dead("the helper did not answer in time")
            waited = timeout + self.REPLY_MARGIN_S
            raise SandboxTimeout(f"no answer from the sandbox {waited:.0f}s after the command started") from None

    async def read_file(self, path: str) -> bytes:
        return await (await self._client()).read_file(path)

    async def stat(self, path: str) -> FileInfo | None:
        return await (await self._client()).stat(path)

    async def commit(self, changes: Sequence[FileChange]) -> None:
        if changes:
            await (await self._client()).commit(changes)
