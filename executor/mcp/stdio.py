"""The stdio transport: newline-delimited JSON-RPC on this process's stdin and stdout, each
message bounded, and no thread per message.

The MCP SDK's ``stdio_server`` reads a line whatever its length (a 1 GB line is 1 GB in memory
before it is parsed), and hops to a worker thread for every line it reads, every write and every
flush. This one reads and writes on the event loop, through asyncio's pipe transports and their
flow control, and holds at most ``limit`` bytes of one message: past that it reads on to the
line's end keeping only its first and last :data:`EDGE` bytes, where a request's top-level ``id``
is (before its parameters or after them), and answers the request with an error that names the
limit. A line that is not a JSON-RPC message is answered as JSON-RPC says (a parse error with a
null id, or an invalid request). The connection goes on after either.

Like the SDK's, it points fd 0 at /dev/null and fd 1 at stderr while it serves, so nothing
else in the process (a library's stray print, a child) can read the client's messages or write
into the protocol's stream; both are restored afterwards, with their file status flags.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import selectors
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["EDGE", "Oversize", "lines", "request_id", "stdio"]

#: bytes of an oversized message kept at each end, to find its id in
EDGE = 64 * 1024
_CHUNK = 64 * 1024

Read = Callable[[], Awaitable[bytes]]
Tell = Callable[[str], None]


@dataclass(frozen=True)
class Oversize:
    """A line longer than the limit: its size, and its two ends."""

    size: int
    head: bytes
    tail: bytes


async def lines(read: Read, limit: int) -> AsyncIterator[bytes | Oversize]:
    """The lines ``read`` yields (without their newline), each at most ``limit`` bytes; a longer
    one is consumed to its end in constant memory and given as an :class:`Oversize`."""
    buf = bytearray()
    while True:
        end = buf.find(b"\n")
        while end < 0 and len(buf) <= limit:
            chunk = await read()
            if not chunk:
                if buf.strip():
                    yield bytes(buf)
                return
            start = len(buf)
            buf += chunk
            end = buf.find(b"\n", start)
        if 0 <= end <= limit:
            yield bytes(buf[:end])
            del buf[: end + 1]
            continue
        if end >= 0:  # the whole line is here, and too long
            yield Oversize(end, bytes(buf[:EDGE]), bytes(buf[max(0, end - EDGE) : end]))
            del buf[: end + 1]
            continue
        size, head, tail = len(buf), bytes(buf[:EDGE]), bytes(buf[-EDGE:])
        buf.clear()
        while True:
            chunk = await read()
            if not chunk:
                yield Oversize(size, head, tail)
                return
            cut = chunk.find(b"\n")
            part = chunk if cut < 0 else chunk[:cut]
            size += len(part)
            tail = (tail + part)[-EDGE:]
            if cut >= 0:
                buf += chunk[cut + 1 :]
                yield Oversize(size, head, tail)
                break


# -- the id of a message that is never parsed --------------------------------------------------

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_ID_KEY = re.compile(r'"id"[ \t\n\r]*:')


class _NoId(Exception):
    pass


def _skip(text: str, i: int) -> int:
    match = _WS.match(text, i)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _value(text: str, i: int) -> tuple[Any, int]:
    try:
        return _DECODER.raw_decode(text, i)
    except (ValueError, IndexError):
        raise _NoId from None


def _valid(value: Any) -> types.RequestId | None:
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _NoId


def _id_from_head(head: str) -> types.RequestId | None:
    """The object's members from its start, until ``id`` or a member that is cut off."""
    i = _skip(head, 0)
    if head[i : i + 1] != "{":
        raise _NoId
    i += 1
    while True:
        i = _skip(head, i)
        key, i = _value(head, i)
        i = _skip(head, i)
        if not isinstance(key, str) or head[i : i + 1] != ":":
            raise _NoId
        value, i = _value(head, _skip(head, i + 1))
        if key == "id":
            return _valid(value)
        i = _skip(head, i)
        if head[i : i + 1] != ",":
            raise _NoId
        i += 1


def _members_to_end(tail: str, i: int) -> bool:
    """From ``i``, ``"key": value`` members to the object's closing brace at the very end."""
    while True:
        key, i = _value(tail, _skip(tail, i))
        i = _skip(tail, i)
        if not isinstance(key, str) or tail[i : i + 1] != ":":
            return False
        _, i = _value(tail, _skip(tail, i + 1))
        i = _skip(tail, i)
        if tail[i : i + 1] == "}":
            return not tail[i + 1 :].strip()
        if tail[i : i + 1] != ",":
            return False
        i += 1


def _id_from_tail(tail: str) -> types.RequestId | None:
    """An ``"id": value`` whose members run on to the closing brace at the end: only a
    top-level member can (a nested one's object closes before the end)."""
    for match in reversed(list(_ID_KEY.finditer(tail))):
        with contextlib.suppress(_NoId):
            if _members_to_end(tail, match.start()):
                value, _ = _value(tail, _skip(tail, match.end()))
                return _valid(value)
    raise _NoId


def request_id(head: bytes, tail: bytes) -> types.RequestId | None:
    """The top-level ``id`` of a JSON-RPC message of which only the two ends were kept, or None
    when neither end shows it (JSON-RPC's id for a request whose id cannot be told)."""
    for find, part in ((_id_from_head, head), (_id_from_tail, tail)):
        with contextlib.suppress(_NoId):
            return find(part.decode("utf-8", "replace"))
    return None


# -- the transport -------------------------------------------------------------------------


def _error(rid: types.RequestId | None, code: int, message: str) -> SessionMessage:
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message)))


def _unreadable(line: bytes) -> SessionMessage:
    """The answer to a line that is no JSON-RPC message: a parse error, or an invalid request
    (with the request's id where it has one)."""
    try:
        data = json.loads(line)
    except ValueError:
        return _error(None, types.PARSE_ERROR, "parse error: the line is not JSON")
    rid = data.get("id") if isinstance(data, dict) else None
    valid = rid if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)) else None
    return _error(valid, types.INVALID_REQUEST, "invalid request: not a JSON-RPC 2.0 message")


@contextlib.contextmanager
def _claimed(fd: int, replacement: int) -> Iterator[int]:
    """A private descriptor for ``fd``'s stream while ``fd`` itself points at ``replacement``."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(replacement, fd)
    try:
        yield private
    finally:
        os.dup2(private, fd)
        os.close(private)
        with contextlib.suppress(OSError):  # asyncio left the stream non-blocking
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)


def _pollable(fd: int) -> bool:
    """Whether the event loop can wait on ``fd``. epoll refuses regular files and some character
    devices (/dev/null): asyncio's pipe transports would fail on them only later, inside a loop
    callback, leaving a traceback and a read that never ends. Reading or writing those does not
    block, so they are used directly. (asyncio's pipes also take only a pipe, a socket or a
    character device; a selector that accepts a regular file, like kqueue, is not enough.)"""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
        except PermissionError:
            return False
    return True


async def _reader(fd: int, stack: contextlib.AsyncExitStack) -> Read:
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=_CHUNK, loop=loop)
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    if not _pollable(fd):
        stack.callback(pipe.close)

        async def read_file() -> bytes:
            return pipe.read(_CHUNK) or b""

        return read_file
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe)
    stack.callback(transport.close)

    async def read() -> bytes:
        return await stream.read(_CHUNK)

    return read


async def _writer(fd: int, stack: contextlib.AsyncExitStack) -> Callable[[bytes], Awaitable[None]]:
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(os.dup(fd), "wb", buffering=0)
    if not _pollable(fd):
        stack.callback(pipe.close)

        async def write_file(data: bytes) -> None:
            pipe.write(data)

        return write_file
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    stack.callback(transport.close)

    async def write(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return write


async def _pump_in(read: Read, limit: int, inbox: MemoryObjectSendStream[SessionMessage | Exception],
                   outbox: MemoryObjectSendStream[SessionMessage], tell: Tell) -> None:
    async with inbox, outbox:
        async for line in lines(read, limit):
            if isinstance(line, Oversize):
                rid = request_id(line.head, line.tail)
                tell(f"refused a message of {line.size} bytes (request id {rid!r}): the limit is {limit}")
                await outbox.send(_error(rid, types.INVALID_REQUEST, (
                    f"message too large: {line.size} bytes; this server reads at most {limit} bytes in one "
                    "JSON-RPC message (sandloop mcp's limit; it was not read)")))
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValidationError:
                await outbox.send(_unreadable(line))
                continue
            await inbox.send(SessionMessage(message))


async def _pump_out(write: Callable[[bytes], Awaitable[None]],
                    outbox: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """Every message to the client, in order, until the server's side is closed. A client that
    went away is not written to, but the messages are still taken (a sender never waits)."""
    gone = False
    async with outbox:
        async for item in outbox:
            if gone:
                continue
            try:
                await write(item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                gone = True


@contextlib.asynccontextmanager
async def stdio(limit: int, tell: Tell) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception],
                                                                MemoryObjectSendStream[SessionMessage]]]:
    """The server's ends of the connection on stdin and stdout: what the client sent, and
    where to send to it. Messages longer than ``limit`` bytes are answered here. On the way
    out, what the server sent is written before the streams are given back."""
    sys.stdout.flush()
    inbox_w, inbox_r = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbox_w, outbox_r = anyio.create_memory_object_stream[SessionMessage](0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with _claimed(0, null) as wire_in, _claimed(1, 2) as wire_out:
            async with contextlib.AsyncExitStack() as stack:
                read = await _reader(wire_in, stack)
                write = await _writer(wire_out, stack)
                async with anyio.create_task_group() as writing:
                    writing.start_soon(_pump_out, write, outbox_r)
                    async with anyio.create_task_group() as reading:
                        reading.start_soon(_pump_in, read, limit, inbox_w, outbox_w.clone(), tell)
                        try:
                            yield inbox_r, outbox_w
                        finally:
                            reading.cancel_scope.cancel()
                    await outbox_w.aclose()
    finally:
        os.close(null)
