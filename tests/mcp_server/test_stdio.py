"""``sandloop mcp`` over stdio, launched by the MCP SDK's own client as clients launch servers:
real Docker sandboxes, a real checkout, the policy, elicitation, the audit chain and the report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.api.scenario import CALC, FIX, GIT_CONFIG
from tests.mcp_server.harness import SANDLOOP, Elicitor, env, sandboxes, stdio, structured, text, wait_until

pytestmark = pytest.mark.docker


def _run_folder(state: Path) -> Path:
    (folder,) = list((state / "sandloop" / "runs").iterdir())
    return folder


async def test_a_session_runs_the_tools_in_its_own_sandbox_under_the_policy(
        docker_client: Any, repo: Path, policy: Path, state: Path) -> None:
    elicitor = Elicitor(["accept", "decline", "refuse"])
    async with Client(stdio(repo, "--policy", str(policy), "--browser", "off"),
                      elicitation_callback=elicitor) as client:
        # The SDK's client probes the 2026-07-28 revision first and falls back to the handshake.
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == ["apply_patch", "shell"]  # --browser off: no computer
        assert tools["shell"].input_schema["required"] == ["commands"]
        assert "results" in (tools["shell"].output_schema or {})["properties"]

        # The command runs in the container, as the checkout's owner, with the helper as PID 1.
        result = await client.call_tool("shell", {"commands": [
            "id -u; tr '\\0' ' ' </proc/1/cmdline", "python3 -m unittest -q"]})
        first, tests = structured(result)["results"]
        assert first["exit_code"] == 0 and first["stdout"].startswith("1000\n")
        assert "/opt/sandloop/helper.pyz" in first["stdout"]
        assert tests["exit_code"] == 1 and "FAILED" in tests["stderr"]
        assert not result.is_error
        (container,) = sandboxes(docker_client, repo)
        assert container["State"] == "running"

        # A deny rule: the command does not run, the rule comes back structured, the rest runs.
        result = await client.call_tool("shell", {"commands": ["curl http://example.test", "echo after"]})
        refused, after = structured(result)["results"]
        assert result.is_error
        assert refused["exit_code"] == 126 and refused["refused"]["rule_id"] == "no-curl"
        assert refused["refused"]["justification"] == "no network tools in these tests"
        assert refused["refused"]["source"].endswith("policy.toml:4")
        assert after["stdout"] == "after\n"
        assert "refused by policy (rule no-curl)" in text(result)

        # A prompt: asked through elicitation. Accepted, it runs; declined or answered "no", it
        # is refused with the rule, and the file stays.
        result = await client.call_tool("shell", {"commands": ["rm victim"]})
        assert structured(result)["results"][0]["exit_code"] == 0
        assert not (repo / "victim").exists()
        assert "rm victim" in elicitor.asked[0] and "Rule rm:" in elicitor.asked[0]
        for _ in range(2):
            result = await client.call_tool("shell", {"commands": ["rm calc.py"]})
            (entry,) = structured(result)["results"]
            assert entry["exit_code"] == 126 and entry["refused"]["rule_id"] == "rm"
            assert "denied through MCP elicitation" in entry["refused"]["justification"]
        assert (repo / "calc.py").read_text() == CALC
        assert len(elicitor.asked) == 3

        # apply_patch: a V4A diff on the real checkout; .git is read-only, all or nothing.
        result = await client.call_tool("apply_patch", {"patch": FIX, "operation": "update_file", "path": "calc.py"})
        assert structured(result) == {"applied": True, "files": [{"path": "calc.py", "change": "written"}],
                                      "message": "updated calc.py: 1 hunk, +1 −1", "refused": None}
        assert "a + b" in (repo / "calc.py").read_text()
        result = await client.call_tool("apply_patch", {"patch": (
            "*** Begin Patch\n*** Add File: notes.txt\n+ok\n*** Update File: .git/config\n@@\n-[core]\n+[x]\n"
            "*** End Patch\n")})
        assert result.is_error and not structured(result)["applied"]
        assert not (repo / "notes.txt").exists() and (repo / ".git" / "config").read_text() == GIT_CONFIG
        result = await client.call_tool("apply_patch", {"patch": (
            "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+from a unified diff\n")})
        assert structured(result)["applied"] and (repo / "notes.txt").read_text() == "from a unified diff\n"

        # Output caps: what was cut is counted.
        result = await client.call_tool("shell", {"commands": ["seq 1000"], "max_output_length": 100})
        (entry,) = structured(result)["results"]
        assert entry["truncated"]["chars"] == len("".join(f"{i}\n" for i in range(1, 1001))) - 100
        assert len(entry["stdout"]) == 100

        # Arguments are checked against the schema offered.
        result = await client.call_tool("shell", {"commands": []})
        assert result.is_error and "invalid arguments for shell" in text(result)

    # The client closed the pipe: the session's sandbox is removed.
    wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after the client left")

    # One run folder: the audit chain verifies against the head the summary kept, and the
    # report renders the MCP calls with their decisions.
    folder = _run_folder(state)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["result"]["reason"] == "disconnected" and summary["result"]["tool_calls"] == 9
    verify = subprocess.run([SANDLOOP, "audit", "verify", "--summary", str(folder / "summary.json"),
                             str(folder / "audit.jsonl")], capture_output=True, text=True, env=env())
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "chain intact" in verify.stdout
    report = subprocess.run([SANDLOOP, "report", str(folder)], capture_output=True, text=True, env=env())
    assert report.returncode == 0, report.stderr
    html = (folder / "report.html").read_text()
    assert "MCP session from mcp" in html and "no-curl" in html and "denied through MCP elicitation" in html
    assert all(f'id="call-{record["call_id"]}"' in html for record in _calls(folder))
    assert len(_calls(folder)) == 9


def _calls(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "requests.jsonl").read_text().splitlines()
    return [json.loads(line)["item"] for line in lines if json.loads(line)["kind"] == "call"]


async def test_a_client_without_elicitation_gets_a_refusal(docker_client: Any, repo: Path, state: Path) -> None:
    async with Client(stdio(repo, "--browser", "off")) as client:
        result = await client.call_tool("shell", {"commands": ["rm victim"]})
    (entry,) = structured(result)["results"]
    assert entry["exit_code"] == 126 and entry["refused"]["rule_id"] == "rm"
    assert "does not support elicitation" in entry["refused"]["justification"]
    assert (repo / "victim").read_text() == "keep me\n"
    wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after the client left")


async def test_a_killed_server_leaves_no_sandbox(docker_client: Any, repo: Path, state: Path) -> None:
    client = Client(stdio(repo, "--browser", "off"))
    await client.__aenter__()
    try:
        result = await client.call_tool("shell", {"commands": ["echo up"]})
        assert structured(result)["results"][0]["stdout"] == "up\n"
        (container,) = sandboxes(docker_client, repo)
        owner = int(container["Labels"]["sandloop.owner_pid"])
        os.kill(owner, signal.SIGKILL)  # no clean-up code runs in the server
        # The helper sees its attach stream close and the container removes itself.
        wait_until(lambda: not sandboxes(docker_client, repo), 60, "the sandbox removed after SIGKILL")
    finally:
        with contextlib.suppress(Exception):  # the server is gone: closing may complain about it
            await client.__aexit__(None, None, None)
