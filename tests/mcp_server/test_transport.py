"""``sandloop mcp``'s stdio transport: lines bounded in memory, the id of a message too large to
parse found at its ends, and what the server answers to lines that are no JSON-RPC message —
spoken raw on the pipe, as a client that is not the SDK could write it. No tool runs here, so no
sandbox starts."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from executor.mcp.stdio import EDGE, Oversize, lines, request_id
from tests.mcp_server.harness import SANDLOOP, env, peak_rss


def _reader(chunks: list[bytes]) -> Any:
    pending = list(chunks)

    async def read() -> bytes:
        return pending.pop(0) if pending else b""

    return read


async def _lines(chunks: list[bytes], limit: int) -> list[bytes | Oversize]:
    return [line async for line in lines(_reader(chunks), limit)]


async def test_lines_split_across_chunks_and_end_without_a_newline() -> None:
    assert await _lines([b"a\nb", b"c\n\nd", b"ef"], 10) == [b"a", b"bc", b"", b"def"]
    assert await _lines([b"x" * 10 + b"\n"], 10) == [b"x" * 10]  # exactly the limit
    assert await _lines([], 10) == []


async def test_a_line_over_the_limit_is_read_to_its_end_and_given_by_its_ends() -> None:
    head, tail = b"{" + b"h" * EDGE, b"t" * EDGE + b"}"
    # In one chunk with the next line, and streamed in many chunks past the buffer.
    got = await _lines([head + b"m" * 100 + tail + b"\nnext\n"], 1000)
    assert got == [Oversize(len(head) + 100 + len(tail), head[:EDGE], tail[-EDGE:]), b"next"]
    chunks = [head, *[b"m" * 4096] * 64, tail + b"\nnext", b"\n"]
    (big, after) = await _lines(chunks, 1000)
    assert isinstance(big, Oversize) and big.size == len(head) + 64 * 4096 + len(tail)
    assert big.head == head[:EDGE] and big.tail == tail[-EDGE:] and after == b"next"
    (cut,) = await _lines([b"x" * 5000], 1000)  # and one the input ends inside
    assert isinstance(cut, Oversize) and cut.size == 5000


def _ends(message: dict[str, Any], order: list[str]) -> tuple[bytes, bytes]:
    text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(message[k])}" for k in order) + "}"
    data = text.encode()
    return data[:EDGE], data[-EDGE:]


@pytest.mark.parametrize("order", [["jsonrpc", "id", "method", "params"],  # the Python SDK's order
                                   ["method", "params", "jsonrpc", "id"],  # the TypeScript SDK's
                                   ["params", "id", "method", "jsonrpc"]])
def test_the_id_of_a_huge_message_is_found_before_or_after_its_parameters(order: list[str]) -> None:
    big = {"name": "shell", "arguments": {"commands": ["x" * (3 * EDGE)], "id": 99}}
    assert request_id(*_ends({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": big}, order)) == 42
    assert request_id(*_ends({"jsonrpc": "2.0", "id": "a-7", "method": "tools/call", "params": big}, order)) == "a-7"


def test_no_id_is_made_up() -> None:
    big = {"arguments": {"commands": ["x" * (3 * EDGE)], "id": 99}}
    # A notification (its nested "id" is not the message's), an id of the wrong type, no JSON.
    assert request_id(*_ends({"jsonrpc": "2.0", "method": "n", "params": big}, ["jsonrpc", "method", "params"])) is None
    assert request_id(*_ends({"method": "m", "params": big, "id": True}, ["method", "params", "id"])) is None
    assert request_id(b"\x00garbage", b'"id": 5') is None


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``sandloop mcp`` spoken to raw, past the handshake."""
    proc = subprocess.Popen([SANDLOOP, "mcp", "--repo", str(tmp_path), "--browser", "off"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env())
    _send(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
    assert "result" in _receive(proc)
    _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(60) == 0


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any] | bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _receive(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    answer: dict[str, Any] = json.loads(proc.stdout.readline())
    return answer


def test_lines_that_are_no_request_are_answered_and_the_session_goes_on(raw: subprocess.Popen[bytes],
                                                                        tmp_path: Path) -> None:
    _send(raw, b"this is not json\n")
    assert _receive(raw) == {"jsonrpc": "2.0", "id": None,
                             "error": {"code": types.PARSE_ERROR, "message": "parse error: the line is not JSON"}}
    _send(raw, {"jsonrpc": "1.0", "id": 3, "method": "tools/list"})
    assert _receive(raw)["error"]["code"] == types.INVALID_REQUEST
    # A tools/call whose params break the CallToolRequest schema: the spec's protocol error.
    _send(raw, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "shell", "arguments": [1]}})
    answer = _receive(raw)
    assert answer["id"] == 4 and answer["error"]["code"] == types.INVALID_PARAMS

    # 50 MB, its id last (as the TypeScript SDK orders a request): refused unread, by its id, in
    # bounded memory; what the server holds grows by far less than the message.
    before = peak_rss(raw.pid)
    huge = {"method": "tools/call", "params": {"name": "shell", "arguments": {"commands": ["x" * 50_000_000]}},
            "jsonrpc": "2.0", "id": 5}
    _send(raw, huge)
    answer = _receive(raw)
    assert answer["id"] == 5 and answer["error"]["code"] == types.INVALID_REQUEST
    assert answer["error"]["message"].startswith("message too large: 50000")
    assert "at most 4194304 bytes" in answer["error"]["message"]
    assert peak_rss(raw.pid) - before < 32 << 20

    _send(raw, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"})
    answer = _receive(raw)
    assert answer["id"] == 6 and [t["name"] for t in answer["result"]["tools"]] == ["shell", "apply_patch"]
    assert not list(tmp_path.iterdir())  # no tool ran: the checkout is as it was


@pytest.mark.parametrize("streams", ["stdin", "stdin and stdout", "a file as stdin"])
def test_dev_null_as_the_wire_ends_the_session_at_once(tmp_path: Path, streams: str) -> None:
    # /dev/null is a character device epoll refuses (and a regular file is no pipe): the server
    # must read its EOF (and write into it) like a file's, and exit cleanly, not fail inside the
    # event loop and wait forever.
    out = subprocess.DEVNULL if "stdout" in streams else subprocess.PIPE
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with empty.open("rb") as file:
        wire_in: Any = file if "file" in streams else subprocess.DEVNULL
        done = subprocess.run([SANDLOOP, "mcp", "--repo", str(tmp_path), "--browser", "off"], stdin=wire_in,
                              stdout=out, stderr=subprocess.PIPE, env=env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
