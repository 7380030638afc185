"""Helpers for the MCP server's tests: launching ``sandloop mcp``, answering elicitations, and
finding the sandboxes a server started (by the checkout they mount)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.stdio import StdioServerParameters

from sandbox.lifecycle import LABEL

SANDLOOP = str(Path(sys.executable).with_name("sandloop"))


def env() -> dict[str, str]:
    """The server's environment: this one's (XDG_STATE_HOME included), never an API key."""
    return {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}


def stdio(repo: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=SANDLOOP, args=["mcp", "--repo", str(repo), *args], env=env())


@dataclass
class Elicitor:
    """An MCP client's elicitation callback answering from a script: "accept" (allow),
    "refuse" (the form sent with allow false), "decline", "cancel"."""

    answers: list[str]
    asked: list[str] = field(default_factory=list)

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.asked.append(params.message)
        answer = self.answers.pop(0)
        if answer in ("accept", "refuse"):
            return types.ElicitResult(action="accept", content={"allow": answer == "accept"})
        return types.ElicitResult(action=answer)


def sandboxes(docker_client: Any, repo: Path) -> list[dict[str, Any]]:
    """The sandloop containers that mount ``repo`` (each test has a checkout of its own)."""
    rows = docker_client.api.containers(all=True, filters={"label": [LABEL]})
    source = str(repo.resolve())
    return [row for row in rows if any(m.get("Source") == source for m in row.get("Mounts") or [])]


def peak_rss(pid: int) -> int:
    """The most memory the process has held (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    (kib,) = re.findall(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(kib) * 1024


def server_pid(repo: Path) -> int:
    """The pid of the ``sandloop mcp`` serving ``repo`` (each test has a checkout of its own)."""
    wanted = ["mcp", "--repo", str(repo)]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone, or not a process
            continue
        if any(argv[i:i + 3] == wanted for i in range(len(argv))):
            return int(proc.name)
    raise AssertionError(f"no sandloop mcp serves {repo}")


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.2)


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result.content
    return result.structured_content


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    token: str
    lines: list[str]


@contextmanager
def http_server(repo: Path, *args: str) -> Iterator[HttpServer]:
    """``sandloop mcp --http 127.0.0.1:0``: its URL and token read from what it prints."""
    process = subprocess.Popen([SANDLOOP, "mcp", "--repo", str(repo), "--http", "127.0.0.1:0", *args],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env())
    lines: list[str] = []
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            for key, pattern in (("url", r"serving MCP on (\S+)"), ("token", r"bearer token: (\S+)")):
                match = re.search(pattern, line)
                if match:
                    found[key] = match.group(1)
            if len(found) == 2:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        ready.wait(120)
        assert len(found) == 2, f"the server did not start: {''.join(lines)}"
        yield HttpServer(process, found["url"], found["token"], lines)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
