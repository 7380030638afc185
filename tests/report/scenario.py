"""A realistic run for the report's tests, made by the real parts: the loop, the real openai
client against the strict fake server, a Docker session, the policy gate with its hash-chained
audit log, a local Chromium, and the request log — all writing into one run folder.

Hostile text rides in every channel a report shows: a command's output, a page's title (through
the navigate tool's answer), the model's message and a typed text. Each one, if the report let
it run, would set ``window.pwned``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai

from executor.approvals import ApprovalRequest, Callback, safety_callback
from executor.audit import RequestLog
from executor.loop import Loop, LoopConfig, RunResult
from executor.navigation import navigation_tools
from executor.policy_gate import PolicyGate
from executor.testing import (
    FakeResponsesServer,
    ScriptedModel,
    apply_patch_call,
    computer_call,
    function_call,
    mcp_approval_request,
    message,
    reasoning,
    shell_call,
    update_file,
)
from executor.toolbox import Toolbox
from executor.tools import FunctionTool
from policies.audit import AuditLog
from policies.engine import load_policy
from sandbox.browser import BrowserConfig, LocalBrowser
from sandbox.docker import DockerSession

HOSTILE = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">"

POLICY = """\
version = 1
description = "the report scenario"

[shell]
default = "allow"

[[shell.rules]]
id = "no-curl"
pattern = ["curl"]
decision = "deny"
justification = "no network tools in this sandbox"
match = ["curl http://127.0.0.1:9/"]

[[shell.rules]]
id = "rm-asks"
pattern = ["rm"]
decision = "prompt"
justification = "rm deletes files with no undo"
match = ["rm old.txt"]

[files]
writable = ["**"]
read_only = ["locked/**"]
allow_delete = true

[browser]
allow_domains = ["127.0.0.1:{port}"]

[mcp.servers.gh]
default = "deny"
tools = {{ list_issues = "allow" }}
"""

PAGE = ("<!doctype html><title>" + HOSTILE + "</title>"
        "<style>body{{font:16px sans-serif;margin:0;height:2000px}}"
        "input{{position:absolute;left:100px;top:100px;width:300px;height:30px}}"
        "#b{{position:absolute;left:100px;top:160px;width:140px;height:40px}}"
        "#low{{position:absolute;left:80px;top:700px;width:600px;height:300px;background:#d1e9ff}}"
        "</style><input id=q placeholder=search><button id=b>Go</button><p style='margin-top:260px'>"
        "Report scenario page on port {port}</p><div id=low>further down the page</div>")

#: the click the report must draw: on the search box
CLICK = (250, 115)


@dataclass
class Scenario:
    folder: Path
    result: RunResult
    page_url: str
    approvals: list[ApprovalRequest]


@contextlib.contextmanager
def page_server() -> Iterator[str]:
    """One page with a hostile title, on a free port of 127.0.0.1."""
    holder: dict[str, int] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = PAGE.format(port=holder["port"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["port"] = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{holder['port']}/page"
    finally:
        server.shutdown()
        server.server_close()


def workspace(root: Path) -> Path:
    """A small checkout owned by uid 1000, like a user's."""
    ws = root / "repo"
    (ws / "locked").mkdir(parents=True)
    (ws / "a.txt").write_text("one\n")
    (ws / "old.txt").write_text("old\n")
    (ws / "keep.txt").write_text("keep\n")
    (ws / "locked" / "x.txt").write_text("x\n")
    for path in [ws, *ws.rglob("*")]:
        os.chown(path, 1000, 1000)
    return ws


def turns(page_url: str) -> list[Any]:
    check = {"id": "cu_sc_9", "code": "malicious_instructions", "message": "the page asks for a password"}
    return [
        [reasoning(["Look at the repository first."]),
         message("I will look around. " + HOSTILE, phase="commentary"),
         shell_call(["ls", "cat a.txt"]),
         shell_call([f"printf '%s\\n' '{HOSTILE}'", "seq 1 300", "ls missing-file"]),
         shell_call(["curl http://127.0.0.1:9/"]),
         shell_call(["sleep 5"], timeout_ms=300)],
        [apply_patch_call(update_file("a.txt", "@@\n-one\n+two\n+three\n")),
         apply_patch_call(update_file("locked/x.txt", "-x\n+y\n")),
         shell_call(["rm old.txt"]),
         shell_call(["rm keep.txt"])],
        [function_call("navigate", {"url": page_url}), computer_call([{"type": "screenshot"}])],
        [computer_call([{"type": "click", "button": "left", "x": CLICK[0], "y": CLICK[1]},
                        {"type": "type", "text": "hello " + HOSTILE},
                        {"type": "keypress", "keys": ["ENTER"]}])],
        [computer_call([{"type": "scroll", "x": 400, "y": 400, "scroll_x": 0, "scroll_y": 300},
                        {"type": "drag", "path": [{"x": 100, "y": 500}, {"x": 300, "y": 520},
                                                  {"x": 500, "y": 600}]},
                        {"type": "move", "x": 700, "y": 300}],
                       pending_safety_checks=[check])],
        [function_call("lookup", {"query": "what is <b>bold</b>?"}),
         mcp_approval_request("list_issues", {"repo": "x/y"}, server_label="gh"),
         mcp_approval_request("delete_repo", {"repo": "x/y"}, server_label="gh")],
        [message("a.txt now reads two and three, old.txt is gone (keep.txt stays: deleting it "
                 "was refused), and the search page takes a query.", phase="final_answer")],
    ]


def lookup(query: str) -> str:
    raise RuntimeError(f"the index is down (asked {query!r})")


async def record(root: Path) -> Scenario:
    """Run the scenario into ``root/run`` (requests.jsonl, audit.jsonl, screenshots/)."""
    folder = root / "run"
    folder.mkdir(parents=True)
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        # old.txt may go, keep.txt may not; the page's safety check is acknowledged
        return request.kind == "safety_check" or request.subject == "rm old.txt"

    approvals = Callback(approve)
    with page_server() as page_url:
        port = page_url.split(":")[2].split("/")[0]
        policy = root / "policy.toml"
        policy.write_text(POLICY.format(port=port))
        engine = load_policy(str(policy))
        gate = PolicyGate(engine, approvals, AuditLog(folder / "audit.jsonl"))
        browser = LocalBrowser(BrowserConfig(allow_url=engine.url))
        session = await DockerSession.create(workspace(root))
        try:
            await browser.start()
            toolbox = Toolbox(gate=gate, session=session, computer=browser,
                              computer_safety=safety_callback(approvals),
                              patch_read_only_globs=("locked/**",))
            toolbox.functions.extend(navigation_tools(browser))
            toolbox.functions.add(FunctionTool("lookup", lookup, parameters={
                "type": "object", "properties": {"query": {"type": "string"}},
                "required": ["query"], "additionalProperties": False}))
            meta = {"policy": {"path": str(policy), "sha256": engine.sha256},
                    "placement": "local", "runtime": await asyncio.to_thread(session.runtime_in_force)}
            result = await run(turns(page_url), toolbox, RequestLog(folder / "requests.jsonl"), meta=meta)
        finally:
            await browser.close()
            await session.close()
    return Scenario(folder, result, page_url, asked)


async def run(script: list[Any], toolbox: Toolbox, log: RequestLog, *,
              task: str = "Tidy the repository, then search for 'hello' on the local page.",
              meta: dict[str, Any] | None = None, **config: Any) -> RunResult:
    """The scripted model behind the strict fake server, driven by the real loop and client.
    ``meta``: the run-level facts a ``start`` record carries (as ``sandloop run`` is to log them:
    policy path and sha256, placement, runtime); None logs no start record, as today."""
    with FakeResponsesServer(ScriptedModel(script)) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="sk-test-abcdefgh12345",
                                    max_retries=0)
        if meta is not None:
            log.event("start", 0, task=task, model="scripted", endpoint=server.base_url, **meta)
        try:
            loop = Loop(client, LoopConfig(model="scripted", **config), toolbox, log=log)
            result = await loop.run(task)
        finally:
            await client.close()
        assert not server.rejections, server.rejections
    return result
