"""Bad input to ``sandloop mcp``, sent by the MCP SDK's own client: each answered as the MCP spec
says (an unknown tool or a message too large is a JSON-RPC error; arguments the tool refuses are
a tool result with ``isError``, which the model reads and can correct), nothing started or
leaked for it, and the session answering the next good call. The bounds are
:mod:`executor.mcp.limits`'."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from executor.mcp.limits import MAX_COMMAND_CHARS, MAX_COMMANDS
from tests.mcp_server.harness import (
    http_server,
    peak_rss,
    sandboxes,
    server_pid,
    stdio,
    structured,
    text,
    wait_until,
)

pytestmark = pytest.mark.docker

MB50 = 50_000_000


async def _alive(client: Client) -> None:
    result = await client.call_tool("shell", {"commands": ["echo alive"]})
    assert structured(result)["results"][0]["stdout"] == "alive\n"


def _refused(result: types.CallToolResult, *phrases: str) -> str:
    """A tool result the model can read: isError, no structured content, no traceback."""
    said = text(result)
    assert result.is_error and result.structured_content is None, said
    assert all(p in said for p in phrases), said
    assert "Traceback" not in said and len(said) < 1000, said
    return said


async def test_bad_calls_are_answered_and_the_session_goes_on(docker_client: Any, repo: Path, state: Path) -> None:
    async with Client(stdio(repo, "--browser", "off")) as client:
        # An unknown tool: a protocol error, as the spec's tools/call example shows.
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("rm_rf", {"path": "/"})
        assert unknown.value.code == types.INVALID_PARAMS
        assert str(unknown.value) == "Unknown tool: 'rm_rf'; this server offers shell, apply_patch"

        # Arguments the schema refuses: wrong types, a missing field, a field it does not have.
        _refused(await client.call_tool("shell", {"commands": "ls"}),
                 "invalid arguments for shell: commands: 'ls' is not of type 'array'")
        _refused(await client.call_tool("shell", {"timeout_ms": 5}), "'commands' is a required property")
        _refused(await client.call_tool("shell", {"commands": ["true"], "sudo": True}),
                 "Additional properties are not allowed ('sudo' was unexpected)")
        _refused(await client.call_tool("shell", {"commands": ["true"], "timeout_ms": "soon"}),
                 "timeout_ms: 'soon' is not of type 'integer'")
        _refused(await client.call_tool("apply_patch", {"patch": 5}), "patch: 5 is not of type 'string'")
        _refused(await client.call_tool("apply_patch", {"patch": "x", "operation": "chmod"}), "operation")

        # Too much in one call: 10 000 commands; command lines over 16 KiB together; a patch
        # over the policy's max_patch_bytes (it is refused before it is parsed).
        _refused(await client.call_tool("shell", {"commands": ["true"] * 10_000}),
                 f"invalid arguments for shell: commands: 10000 items; at most {MAX_COMMANDS}")
        _refused(await client.call_tool("shell", {"commands": []}), "invalid arguments for shell: commands: 0 items; "
                                                                    "at least 1")
        lines = ["echo " + "a" * (MAX_COMMAND_CHARS // 2)] * 3
        _refused(await client.call_tool("shell", {"commands": lines}),
                 f"shell: the command lines total {sum(map(len, lines))} characters; a call may carry "
                 f"{MAX_COMMAND_CHARS}", "apply_patch")
        patch = "*** Begin Patch\n*** Add File: big.txt\n" + "+x\n" * 600_000 + "*** End Patch\n"
        _refused(await client.call_tool("apply_patch", {"patch": patch}),
                 f"the patch is {len(patch)} bytes; the policy allows 1048576 (files.max_patch_bytes)")
        assert not sandboxes(docker_client, repo)  # none of these started a sandbox

        # 50 MB in one message (a command, a patch): refused unread, a JSON-RPC error naming the
        # limit; the server's memory grows by far less than one of them.
        pid = server_pid(repo)
        before = peak_rss(pid)
        for name, arguments in (("shell", {"commands": ["x" * MB50]}), ("apply_patch", {"patch": "+" * MB50})):
            with pytest.raises(MCPError) as huge:
                await client.call_tool(name, arguments)
            assert huge.value.code == types.INVALID_REQUEST
            said = str(huge.value)
            assert said.startswith("message too large: 50000") and "at most 4194304 bytes" in said
        assert peak_rss(pid) - before < 32 << 20

        await _alive(client)
        (container,) = sandboxes(docker_client, repo)

        # A command that times out: the timeout in the result, what it printed before kept,
        # the rest of the call skipped; the session (and its sandbox) goes on.
        result = await client.call_tool("shell", {"commands": ["echo before; sleep 30; echo never", "echo skipped"],
                                                  "timeout_ms": 1000})
        timed_out, skipped = structured(result)["results"]
        assert structured(result)["timeout_ms"] == 1000 and not result.is_error
        assert timed_out["timed_out"] and timed_out["exit_code"] is None and timed_out["stdout"] == "before\n"
        assert "timed out after 1000 ms" in timed_out["stderr"] and timed_out["duration_s"] < 30
        assert skipped["skipped"] and skipped["stdout"] == ""
        assert "→ timed out after 1000 ms" in text(result)
        await _alive(client)
        assert [c["Id"] for c in sandboxes(docker_client, repo)] == [container["Id"]]
    wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after the client left")

    # The run's log holds the calls that ran, and nothing of the refused ones.
    (folder,) = (state / "sandloop" / "runs").iterdir()
    log = (folder / "requests.jsonl").read_text()
    assert len(log) < 1 << 20 and "rm_rf" not in log
    calls = [json.loads(line) for line in log.splitlines() if json.loads(line)["kind"] == "call"]
    assert len(calls) == 3


async def test_a_body_over_the_limit_is_a_json_rpc_error_over_http(docker_client: Any, repo: Path,
                                                                   state: Path) -> None:
    with http_server(repo, "--browser", "off") as server:
        before = peak_rss(server.process.pid)
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}, timeout=120)
        async with http, Client(streamable_http_client(server.url, http_client=http)) as client:
            with pytest.raises(MCPError) as huge:
                await client.call_tool("shell", {"commands": ["x" * MB50]})
            assert huge.value.code == types.INVALID_REQUEST
            assert str(huge.value).startswith("message too large: 50000")
            assert peak_rss(server.process.pid) - before < 32 << 20
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("nope", {})
            assert unknown.value.code == types.INVALID_PARAMS
            await _alive(client)
