"""The host side of the helper: a client for its protocol, and the Session built on it.

:class:`HelperClient` multiplexes concurrent requests over one byte stream by request id
(:mod:`sandbox.helper.wire`). Each request is an asyncio future. Two ways to receive: a reader
thread over a blocking ``recv(n)`` (a Docker attach socket, a Kubernetes websocket, a pipe),
resolving futures across threads; or, over a socket (:meth:`HelperClient.over_socket`), the event
loop itself, with no thread and no hop between threads — under load every wakeup waits for a CPU,
and a reply that a thread reads and then hands to the loop costs two. Every error kind the helper
can send becomes an exception of :mod:`sandloop.errors` (:data:`ERROR_CLASSES`). Transport
specifics stay in the back-ends: they hand over a ``recv(n)`` and a ``send(data)``, or a socket.

:class:`HelperSession` is a :class:`~sandbox.base.Session` whose every operation goes to a
helper; :class:`ReplaceableSession` one over a sandbox that can die and be replaced, which
:class:`~sandbox.docker.DockerSession`, :class:`~sandbox.kubernetes.session.KubernetesSession` and
:class:`~sandbox.local.LocalSession` only say how to start, explain and tear down.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import itertools
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

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
    SandloopError,
)
from sandloop.files import FileChange, FileInfo
from sandloop.limits import Limits
from sandloop.results import CommandResult, StreamCapture

from ..base import Session
from . import wire

__all__ = ["ERROR_CLASSES", "HelperClient", "HelperSession", "ReplaceableSession", "StepSink", "error_for",
           "result_from_wire"]

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
    "unconfined": SandboxUnavailable,  # no seccomp filter, so the sandbox runs nothing
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


def result_from_wire(result: wire.RunResult, timing: Mapping[str, float] | None = None) -> CommandResult:
    return CommandResult(
        stdout=capture_from_wire(result["stdout"]),
        stderr=capture_from_wire(result["stderr"]),
        exit_code=result["exit_code"],
        timed_out=result["timed_out"],
        duration_s=result["duration_s"],
        oom_killed=result["oom_killed"],
        signal=result["signal"],
        timing={**cast("Mapping[str, float]", result.get("timing", {})), **(timing or {})},
    )


#: Told each step of a ``runs`` request as it arrives, in the loop: (index, result, error).
StepSink = Callable[[int, "wire.RunResult | None", "wire.ErrorBody | None"], None]


class _Pending(NamedTuple):
    loop: asyncio.AbstractEventLoop
    fut: asyncio.Future[wire.Result]
    on_step: StepSink | None


class _Protocol(asyncio.Protocol):
    """The event loop's side of a socket to the helper: frames out of whatever arrives."""

    def __init__(self) -> None:
        self.client: HelperClient | None = None
        self._decoder = wire.FrameDecoder()
        self._early: list[bytes] = []
        self._lost: str | None = None

    def attach(self, client: HelperClient) -> None:
        self.client = client
        for data in self._early:
            self.data_received(data)
        if self._lost is not None:
            client.mark_dead(self._lost)

    def data_received(self, data: bytes) -> None:
        if self.client is None:
            self._early.append(data)
            return
        try:
            messages = self._decoder.feed(data)
        except wire.OpError as exc:  # no helper sends that: nothing after it can be trusted
            self.client.mark_dead(f"the helper's stream broke ({exc})")
            return
        for message in messages:
            self.client.deliver(message)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = "the helper's stream closed" if exc is None else f"the helper's stream broke ({exc})"
        if self.client is None:
            self._lost = reason
        else:
            self.client.mark_dead(reason)


class HelperClient:
    """Speaks to one helper process. Safe to use from one asyncio loop.

    ``recv``: a blocking read, which a reader thread calls; None when the event loop feeds what
    arrives to :meth:`deliver` itself (:meth:`over_socket`).
    """

    def __init__(self, recv: Callable[[int], bytes] | None, send: Callable[[bytes], None], *, name: str) -> None:
        self._recv = recv
        self._send = send
        self.name = name
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._dead: str | None = None
        self._close: Callable[[], None] | None = None
        self._linked: list[HelperClient] = []
        if recv is not None:
            threading.Thread(target=self._reader, name=f"sandloop-reader-{name}", daemon=True).start()

    @classmethod
    async def over_socket(cls, sock: socket.socket, *, name: str) -> HelperClient:
        """A client over a connected stream socket, read and written by the running event loop
        (and used from that loop only)."""
        loop = asyncio.get_running_loop()
        protocol = _Protocol()
        transport, _ = await loop.create_unix_connection(lambda: protocol, sock=sock)
        client = cls(None, transport.write, name=name)

        def close() -> None:
            loop.call_soon_threadsafe(transport.close)

        client._close = close
        protocol.attach(client)
        return client

    def close(self) -> None:
        """Close a socket this client reads itself (from any thread); a stream handed over as
        ``recv`` and ``send`` is its owner's to close."""
        if self._close is not None:
            self._close()

    @property
    def alive(self) -> bool:
        return self._dead is None

    def _reader(self) -> None:
        reason = "the helper's stream closed"
        assert self._recv is not None
        try:
            while (message := wire.read_frame(self._recv)) is not None:
                self.deliver(message)
        except Exception as exc:
            # OSError/ValueError: the stream broke or was closed under the read (a local
            # helper's pipe at close); anything else: a reply the helper should never send.
            reason = f"the helper's stream broke ({type(exc).__name__}: {exc})"
        self.mark_dead(reason)

    def deliver(self, message: object) -> None:
        """One frame from the helper (from the reader thread, or in the loop)."""
        reply = cast("wire.Reply", message)
        rid = reply.get("id") if isinstance(message, dict) else None
        step = message.get("step") if isinstance(message, dict) else None
        arrived = time.monotonic()
        with self._lock:
            if isinstance(rid, int) and step is not None:
                waiter = self._pending.get(rid)
            else:
                waiter = self._pending.pop(rid, None) if isinstance(rid, int) else None
        if waiter is None:
            if isinstance(message, dict) and rid is None and not message.get("ok", True):
                # Unaddressed: the helper could not read our stream, and stops.
                self.mark_dead(f"the helper refused the stream: {message.get('error')}")
            return
        if step is not None:
            if waiter.on_step is None or not isinstance(step, int):
                self.mark_dead(f"the helper sent a step for request {rid}, which has none")
                return
            result = cast("wire.RunResult", reply.get("result")) if reply["ok"] else None
            _stamp(result, arrived)
            self._in_loop(waiter.loop, waiter.on_step, step, result,
                          None if reply["ok"] else reply["error"])
            return
        if reply["ok"]:
            _stamp(reply["result"], arrived)
            self._in_loop(waiter.loop, _settle, waiter.fut, reply["result"], None)
        else:
            self._in_loop(waiter.loop, _settle, waiter.fut, None, error_for(reply["error"]))

    def _in_loop(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
        if self._recv is None:  # we are the loop
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    def mark_dead(self, reason: str) -> None:
        with self._lock:
            first = self._dead is None
            if first:
                self._dead = reason
            pending, self._pending = self._pending, {}
            linked, self._linked = self._linked, []
        for waiter in pending.values():
            waiter.loop.call_soon_threadsafe(_settle, waiter.fut, None, SandboxUnavailable(f"{self.name}: {reason}"))
        for other in linked:
            if first:
                other.mark_dead(reason)
                other.close()

    def link(self, other: HelperClient) -> None:
        """When this client's stream ends, ``other`` is dead too (a container's socket, once its
        attach stream — its lifecycle — has ended: the helper is going, or nothing ends it)."""
        with self._lock:
            dead = self._dead
            if dead is None:
                self._linked.append(other)
        if dead is not None:
            other.mark_dead(dead)
            other.close()

    async def _call(self, op: wire.Op, *, within: float | None = None, **fields: Any) -> wire.Result:
        """The result of one request; past ``within`` seconds, SandboxTimeout and this client is
        dead (a timer on the future, not a task around it: nothing more per request)."""
        rid, fut = await self.request(op, None, **fields)
        timer = None if within is None else fut.get_loop().call_later(within, self._overdue, rid, fut, within)
        try:
            return await fut
        except asyncio.CancelledError:
            self.forget(rid)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _overdue(self, rid: int, fut: asyncio.Future[wire.Result], within: float) -> None:
        self.forget(rid)
        _settle(fut, None, SandboxTimeout(f"no answer from the sandbox {within:.0f}s after the command started"))
        self.mark_dead("the helper did not answer in time")

    async def request(self, op: wire.Op, on_step: StepSink | None, **fields: Any
                      ) -> tuple[int, asyncio.Future[wire.Result]]:
        """Send a request; its id, and the future of its reply (``on_step`` is told its steps)."""
        if self._dead is not None:
            raise SandboxUnavailable(f"{self.name}: {self._dead}")
        rid = next(self._ids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[wire.Result] = loop.create_future()
        try:
            frame = wire.encode_frame({"id": rid, "op": op, **fields})
        except wire.OpError as exc:
            raise error_for({"kind": exc.kind, "message": str(exc)}) from None
        with self._lock:
            self._pending[rid] = _Pending(loop, fut, on_step)
        try:
            if len(frame) > 65536 and self._recv is not None:  # a blocking write: not in the loop
                await asyncio.to_thread(self._locked_send, frame)
            else:
                self._locked_send(frame)
        except OSError as exc:
            self.mark_dead(f"cannot write to the helper ({exc})")
        return rid, fut

    def forget(self, rid: int) -> None:
        """Nobody waits for ``rid`` any more: a reply that still comes is dropped."""
        with self._lock:
            self._pending.pop(rid, None)

    def cancel(self, rid: int) -> None:
        """Tell the helper a ``runs`` request may start no further command (best effort)."""
        self.forget(rid)
        if self._dead is None:
            try:
                self._locked_send(wire.encode_frame({"id": next(self._ids), "op": "cancel", "target": rid}))
            except OSError as exc:
                self.mark_dead(f"cannot write to the helper ({exc})")

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
        self, command: str, *, timeout_s: float, max_output_bytes: int, env: Mapping[str, str] | None,
        within: float | None = None,
    ) -> CommandResult:
        """Run one command; no answer within ``within`` seconds is SandboxTimeout."""
        sent = time.monotonic()
        result = cast("wire.RunResult", await self._call(
            "run", within=within, command=command, timeout_s=timeout_s, max_output_bytes=max_output_bytes,
            env=dict(env or {})
        ))
        return result_from_wire(result, {"sent": sent, "settled": time.monotonic()})

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

    async def desktop(self, steps: Sequence[Sequence[Any]], *, settle_s: float, size: tuple[int, int],
                      env: Mapping[str, str] | None = None, within: float | None = None) -> wire.DesktopResult:
        """One batch of input steps on the helper's X display, then its capture."""
        return cast("wire.DesktopResult", await self._call(
            "desktop", within=within, steps=[list(step) for step in steps], settle_s=settle_s, size=list(size),
            env=dict(env or {})))


def _stamp(result: object, arrived: float) -> None:
    """Add when a command's result reached the host to its timing (host monotonic seconds)."""
    timing = result.get("timing") if isinstance(result, dict) else None
    if isinstance(timing, dict):
        timing["arrived"] = arrived


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
        return await client.run(command, timeout_s=timeout, max_output_bytes=cap, env=merged,
                                within=timeout + self.REPLY_MARGIN_S)

    async def run_many(
        self,
        commands: Sequence[str],
        *,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> list[CommandResult | SandloopError]:
        """In one request: the helper runs them one after another and answers each as soon as
        it is done, so a command costs no round trip of its own."""
        if len(commands) <= 1:  # one frame back instead of a step and a reply
            return await super().run_many(commands, timeout_s=timeout_s, max_output_bytes=max_output_bytes, env=env)
        timeout = self.limits.timeout_s(timeout_s)
        cap = self.limits.output_bytes(max_output_bytes)
        client = await self._client()
        loop = asyncio.get_running_loop()
        results: list[CommandResult | SandloopError] = []
        last_step = loop.time()

        def on_step(index: int, result: wire.RunResult | None, error: wire.ErrorBody | None) -> None:
            nonlocal last_step
            if index != len(results):  # no helper skips or repeats a step
                client.mark_dead(f"the helper answered step {index} where {len(results)} was due")
                return
            last_step = loop.time()
            if result is not None:
                results.append(result_from_wire(result, {"sent": sent, "settled": time.monotonic()}))
            else:
                results.append(error_for(error or {"kind": "internal", "message": "a step with no result"}))

        sent = time.monotonic()
        try:
            rid, fut = await client.request("runs", on_step, commands=list(commands), timeout_s=timeout,
                                            max_output_bytes=cap, env={**self.base_env, **(env or {})})
        except SandboxError as exc:  # a dead helper, or more than one frame holds: the first says why
            return [exc]
        # Each step has the command's budget plus the margin, counted from the one before.
        patience = timeout + self.REPLY_MARGIN_S
        try:
            while not fut.done():
                left = last_step + patience - loop.time()
                if left <= 0:
                    client.mark_dead("the helper did not answer in time")
                    results.append(SandboxTimeout(f"no answer from the sandbox {patience:.0f}s after the command "
                                                  "started"))
                    return results
                await asyncio.wait([fut], timeout=left)
            fut.result()
        except SandboxError as exc:  # the sandbox died under a command: it is answered with why
            if len(results) < len(commands):
                results.append(exc)
        except asyncio.CancelledError:
            client.cancel(rid)
            raise
        return results

    async def read_file(self, path: str) -> bytes:
        return await (await self._client()).read_file(path)

    async def stat(self, path: str) -> FileInfo | None:
        return await (await self._client()).stat(path)

    async def commit(self, changes: Sequence[FileChange]) -> None:
        if changes:
            await (await self._client()).commit(changes)

    async def desktop(self, steps: Sequence[Sequence[Any]], *, settle_s: float, size: tuple[int, int]
                      ) -> wire.DesktopResult:
        """A batch on the sandbox's X display (a desktop image's: :mod:`sandbox.helper.desktop`); its
        programs get the session's environment (an egress proxy's variables among them)."""
        return await (await self._client()).desktop(steps, settle_s=settle_s, size=size, env=self.base_env)


class ReplaceableSession(HelperSession):
    """A HelperSession over one sandbox that can die and be replaced (a container, a pod, a local
    helper process).

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

    @contextlib.asynccontextmanager
    async def _starting(self, last_words: Callable[[], str] = lambda: "") -> AsyncIterator[None]:
        """While a started helper is first spoken to: if that fails, the sandbox is torn down and
        the error is one line, with the helper's ``last_words()`` (its stderr's tail)."""
        try:
            yield
        except (SandboxUnavailable, TimeoutError) as exc:
            tail = last_words()
            await asyncio.to_thread(self._teardown)
            raise SandboxUnavailable(f"the sandbox helper did not start: {exc} {tail}".strip()) from exc

    async def _greet(self, helper: HelperClient, last_words: Callable[[], str] = lambda: "") -> wire.HelloResult:
        """A started helper's hello (within a minute), under ``_starting``."""
        async with self._starting(last_words):
            return await asyncio.wait_for(helper.hello(), 60)

    async def close(self) -> None:
        """Tear the sandbox down for good (idempotent); a subclass closes what else it holds after."""
        if self._closed:
            return
        self._closed = True
        async with self._start_lock:
            await asyncio.to_thread(self._teardown)

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
