"""The host side of the helper: a client for its protocol, and the Session built on it.

:class:`HelperClient` multiplexes concurrent requests over one byte stream by request id
(:mod:`sandbox.helper.wire`). A reader thread owns the receiving side; each request is an asyncio
future resolved from that thread. Every error kind the helper can send becomes an exception of
:mod:`sandloop.errors` (:data:`ERROR_CLASSES`). Transport specifics (a Docker attach socket, a
subprocess pipe) stay in the back-ends: they hand over a ``recv(n)`` and a ``send(data)``.

:class:`HelperSession` is a :class:`~sandbox.base.Session` whose every operation goes to a
helper; :class:`~sandbox.docker.DockerSession` and :class:`~sandbox.local.LocalSession` only
say how to start one.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import itertools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sandloop.errors import (
    CommandNotStarted,
    FileMissing,
    FileTooLarge,
    HelperFailed,
    PathRefused,
    ResourcesExhausted,
    SandboxError,
    SandboxIOError,
    SandboxTimeout,
    SandboxUnavailable,
)
from sandloop.files import FileChange, FileInfo
from sandloop.limits import Limits
from sandloop.results import CommandResult, StreamCapture

from ..base import Session
from . import wire

__all__ = ["ERROR_CLASSES", "HelperClient", "HelperSession", "ReplaceableSession", "error_for", "result_from_wire"]

log = logging.getLogger("sandloop.session")

#: The exception each error kind of the helper becomes on the host.
ERROR_CLASSES: Mapping[wire.ErrorKind, type[SandboxError]] = {
    "bad_request": HelperFailed,
    "path_refused": PathRefused,
    "missing": FileMissing,
    "too_large": FileTooLarge,
    "resources": ResourcesExhausted,
    "spawn": CommandNotStarted,
    "io": SandboxIOError,
    "internal": HelperFailed,
}


def error_for(error: wire.ErrorBody) -> SandboxError:
    """The exception an error reply stands for (a kind this host does not know: HelperFailed)."""
    cls = ERROR_CLASSES.get(error.get("kind"), HelperFailed)
    return cls(error.get("message") or f"the helper failed ({error.get('kind')})")


def capture_from_wire(capture: wire.Capture) -> StreamCapture:
    head = base64.b64decode(capture["head"])
    tail = base64.b64decode(capture["tail"])
    dropped = capture["dropped_bytes"]
    if dropped:
        marker = f"\n…[{dropped} bytes, {capture['dropped_lines']} lines dropped]…\n"
        text = head.decode(errors="replace") + marker + tail.decode(errors="replace")
    else:
        text = (head + tail).decode(errors="replace")
    return StreamCapture(
        text=text, total_bytes=capture["total_bytes"], dropped_bytes=dropped, dropped_lines=capture["dropped_lines"]
    )


def result_from_wire(result: wire.RunResult) -> CommandResult:
    return CommandResult(
        stdout=capture_from_wire(result["stdout"]),
        stderr=capture_from_wire(result["stderr"]),
        exit_code=result["exit_code"],
        timed_out=result["timed_out"],
        duration_s=result["duration_s"],
        oom_killed=result["oom_killed"],
        signal=result["signal"],
    )


_Pending = tuple[asyncio.AbstractEventLoop, "asyncio.Future[wire.Result]"]


class HelperClient:
    """Speaks to one helper process. Safe to use from one asyncio loop."""

    def __init__(self, recv: Callable[[int], bytes], send: Callable[[bytes], None], *, name: str) -> None:
        self._recv = recv
        self._send = send
        self.name = name
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._dead: str | None = None
        self._thread = threading.Thread(target=self._reader, name=f"sandloop-reader-{name}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._dead is None

    def _reader(self) -> None:
        reason = "the helper's stream closed"
        try:
            while (message := wire.read_frame(self._recv)) is not None:
                self._deliver(message)
        except Exception as exc:
            # OSError/ValueError: the stream broke or was closed under the read (a local
            # helper's pipe at close); anything else: a reply the helper should never send.
            reason = f"the helper's stream broke ({type(exc).__name__}: {exc})"
        self.mark_dead(reason)

    def _deliver(self, message: object) -> None:
        reply = cast("wire.Reply", message)
        rid = reply.get("id") if isinstance(message, dict) else None
        with self._lock:
            waiter = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if waiter is None:
            if isinstance(message, dict) and not message.get("ok", True):
                # Unaddressed: the helper could not read our stream, and stops.
                self.mark_dead(f"the helper refused the stream: {message.get('error')}")
            return
        loop, fut = waiter
        if reply["ok"]:
            loop.call_soon_threadsafe(_settle, fut, reply["result"], None)
        else:
            loop.call_soon_threadsafe(_settle, fut, None, error_for(reply["error"]))

    def mark_dead(self, reason: str) -> None:
        with self._lock:
            if self._dead is None:
                self._dead = reason
            pending, self._pending = self._pending, {}
        for loop, fut in pending.values():
            loop.call_soon_threadsafe(_settle, fut, None, SandboxUnavailable(f"{self.name}: {reason}"))

    async def _call(self, op: wire.Op, **fields: Any) -> wire.Result:
        if self._dead is not None:
            raise SandboxUnavailable(f"{self.name}: {self._dead}")
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[wire.Result] = loop.create_future()
        with self._lock:
            self._pending[rid] = (loop, fut)
        try:
            frame = wire.encode_frame({"id": rid, "op": op, **fields})
        except wire.OpError as exc:
            with self._lock:
                self._pending.pop(rid, None)
            raise error_for({"kind": exc.kind, "message": str(exc)}) from None
        try:
            if len(frame) > 65536:
                await asyncio.to_thread(self._locked_send, frame)
            else:
                self._locked_send(frame)
        except OSError as exc:
            self.mark_dead(f"cannot write to the helper ({exc})")
        try:
            return await fut
        except asyncio.CancelledError:
            with self._lock:
                self._pending.pop(rid, None)
            raise

    def _locked_send(self, frame: bytes) -> None:
        with self._send_lock:
            self._send(frame)

    # --- one method per op ---------------------------------------------------------------

    async def hello(self) -> wire.HelloResult:
        result = cast("wire.HelloResult", await self._call("hello"))
        if result.get("protocol") != wire.PROTOCOL_VERSION:  # an archive from another version
            raise HelperFailed(f"the helper speaks protocol {result.get('protocol')}, "
                               f"this host {wire.PROTOCOL_VERSION}")
        return result

    async def run(
        self, command: str, *, timeout_s: float, max_output_bytes: int, env: Mapping[str, str] | None
    ) -> CommandResult:
        result = await self._call(
            "run", command=command, timeout_s=timeout_s, max_output_bytes=max_output_bytes, env=dict(env or {})
        )
        return result_from_wire(cast("wire.RunResult", result))

    async def read_file(self, path: str) -> bytes:
        result = cast("wire.ReadResult", await self._call("read", path=path))
        return base64.b64decode(result["data"])

    async def stat(self, path: str) -> FileInfo | None:
        result = cast("wire.StatResult", await self._call("stat", path=path))
        if not result["exists"]:
            return None
        return FileInfo(path=path, size=result["size"], mode=result["mode"], is_dir=result["is_dir"],
                        is_symlink=result["is_symlink"])

    async def commit(self, changes: Sequence[FileChange]) -> None:
        wire_changes: list[wire.Change] = [
            {"path": c.path, "data": None if c.content is None else base64.b64encode(c.content).decode(),
             "mode": c.mode}
            for c in changes
        ]
        await self._call("commit", changes=wire_changes)


def _settle(fut: asyncio.Future[wire.Result], result: wire.Result | None, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(cast("wire.Result", result))


class HelperSession(Session):
    """A Session whose every operation goes to a helper process through a HelperClient.

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
    async def _client(self) -> HelperClient:
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


class ReplaceableSession(HelperSession):
    """A HelperSession over one sandbox that can die and be replaced (a container, a pod).

    :meth:`_client` is the one place a session notices its sandbox died: it asks why, tears the
    dead one down, starts a fresh one (:meth:`_start`), and records a note that the model reads
    in its next output (``Session.take_notes``). A subclass says how to start, tear down and
    explain, and what a replacement costs (:attr:`replaced`).
    """

    #: what the sandbox is, for notes ("sandbox container", "sandbox pod")
    sandbox_name = "sandbox"
    #: what a replacement means for the model, after "started a new one"
    replaced = ""

    def __init__(self, limits: Limits, base_env: Mapping[str, str] | None = None) -> None:
        super().__init__(limits, base_env)
        self.hello: wire.HelloResult | None = None
        #: sandboxes started to replace one that died (``notes`` says why each died)
        self.restarts = 0
        self.notes: list[str] = []
        self._helper: HelperClient | None = None
        self._died: str | None = None  # why the last sandbox died, until a new one answers
        self._start_lock = asyncio.Lock()
        self._closed = False

    @abc.abstractmethod
    async def _start(self) -> tuple[HelperClient, wire.HelloResult]:
        """Start a sandbox and its helper, through its hello (and whatever must follow before
        the first request); on failure tear it down and raise SandboxUnavailable."""

    @abc.abstractmethod
    def dead_reason(self) -> str:
        """Why the sandbox is gone, in a few words (blocking)."""

    @abc.abstractmethod
    def _teardown(self) -> None:
        """Close the stream and remove the sandbox (blocking; best effort)."""

    async def _client(self) -> HelperClient:
        if self._helper is not None and self._helper.alive:
            return self._helper
        async with self._start_lock:
            if self._helper is not None and self._helper.alive:
                return self._helper
            if self._closed:
                raise SandboxUnavailable("the session is closed")
            if self._helper is not None:
                # It died (OOM-killed helper, a kill, an eviction, an engine restart): a fresh
                # one, once the engine answers; the session goes on.
                self._died = await asyncio.to_thread(self.dead_reason)
                self._helper = None
                await asyncio.to_thread(self._teardown)
            helper, self.hello = await self._start()
            if self._died is not None:
                self.restarts += 1
                note = f"{self.sandbox_name} died ({self._died}); started a new one{self.replaced}"
                self.notes.append(note)
                log.warning(note)
                self._died = None
            self._helper = helper
            return helper
