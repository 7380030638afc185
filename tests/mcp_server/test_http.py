"""``sandloop mcp --http``: Streamable HTTP on loopback behind a bearer token, one sandbox per
MCP session, the SDK's client connecting as any client would."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION

from tests.mcp_server.harness import SANDLOOP, env, http_server, sandboxes, structured, wait_until

pytestmark = pytest.mark.docker


def _client(url: str, token: str, **kwargs: Any) -> tuple[httpx2.AsyncClient, Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    return http, Client(streamable_http_client(url, http_client=http), **kwargs)


async def test_sessions_over_http_each_get_a_sandbox_removed_when_they_end(
        docker_client: Any, repo: Path, state: Path) -> None:
    with http_server(repo, "--browser", "off") as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")

        # No token, a wrong one: refused before anything is served.
        async with httpx2.AsyncClient(timeout=30) as raw:
            body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
            assert (await raw.post(server.url, json=body)).status_code == 401
            wrong = await raw.post(server.url, json=body, headers={"Authorization": "Bearer " + "x" * 43})
            assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
            almost = await raw.post(server.url, json=body, headers={"Authorization": f"Bearer {server.token}x"})
            assert almost.status_code == 401

        http_a, a = _client(server.url, server.token)
        http_b, b = _client(server.url, server.token)
        async with http_a, a:
            await a.call_tool("shell", {"commands": ["echo a > from_a"]})
            async with http_b, b:
                rb = await b.call_tool("shell", {"commands": ["cat from_a"]})
                # Two sessions, two containers, one checkout.
                assert structured(rb)["results"][0]["stdout"] == "a\n"
                assert len(sandboxes(docker_client, repo)) == 2

                # A client that cannot answer elicitations: the prompt is refused, the file stays.
                result = await a.call_tool("shell", {"commands": ["rm victim"]})
                (entry,) = structured(result)["results"]
                assert entry["refused"]["rule_id"] == "rm"
                assert "does not support elicitation" in entry["refused"]["justification"]
                assert (repo / "victim").exists()
            # b's client sent DELETE: its session ended, its sandbox is removed; a's goes on.
            wait_until(lambda: len(sandboxes(docker_client, repo)) == 1, 60, "session b's sandbox removed")
            result = await a.call_tool("shell", {"commands": ["echo still here"]})
            assert structured(result)["results"][0]["stdout"] == "still here\n"
        wait_until(lambda: not sandboxes(docker_client, repo), 60, "session a's sandbox removed")

        # A client pinned to the sessionless 2026-07-28 revision is told which versions are served.
        http, pinned = _client(server.url, server.token, mode="2026-07-28")
        async with http, pinned:
            with pytest.raises(MCPError) as refused:
                await pinned.call_tool("shell", {"commands": ["true"]})
        assert refused.value.code == UNSUPPORTED_PROTOCOL_VERSION
        assert not sandboxes(docker_client, repo)

    runs = list((state / "sandloop" / "runs").iterdir())
    assert len(runs) == 2 and all((run / "summary.json").is_file() for run in runs)


async def test_an_open_session_is_closed_when_the_server_stops(docker_client: Any, repo: Path, state: Path) -> None:
    with http_server(repo, "--browser", "off") as server:
        http, client = _client(server.url, server.token)
        async with http:
            await client.__aenter__()
            try:
                await client.call_tool("shell", {"commands": ["true"]})
                assert len(sandboxes(docker_client, repo)) == 1
                server.process.terminate()
                server.process.wait(60)
                wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed at shutdown")
            finally:
                with contextlib.suppress(Exception):  # the server is gone
                    await client.__aexit__(None, None, None)
    (run,) = (state / "sandloop" / "runs").iterdir()
    assert (run / "summary.json").is_file()  # closed properly, not only reaped


def test_the_url_is_printed_once_the_server_accepts_connections(repo: Path) -> None:
    # A client that connects the moment it reads the URL must not be refused: frozen right
    # after printing it, the server's socket must already complete a handshake (the kernel
    # does that for a listening socket, whoever is frozen).
    with http_server(repo, "--browser", "off") as server:
        server.process.send_signal(signal.SIGSTOP)
        try:
            port = int(server.url.rsplit(":", 1)[1].split("/", 1)[0])
            with socket.create_connection(("127.0.0.1", port), timeout=10):
                pass
        finally:
            server.process.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("bind", ["0.0.0.0:0", "[::]:0", "example.test:8000"])
def test_only_loopback_is_served_without_allow_remote(bind: str, tmp_path: Path) -> None:
    done = subprocess.run([SANDLOOP, "mcp", "--repo", str(tmp_path), "--http", bind],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert done.returncode == 2
    assert ("--allow-remote" in done.stdout + done.stderr) or ("IP address" in done.stdout + done.stderr)
