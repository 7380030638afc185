"""Every URL the browser is asked to open, and every request a page makes, is decided through
the gate and recorded in the audit chain with its rule id and the call that caused it; a
request the policy refuses never reaches its server; a ``prompt`` rule asks the human once per
host per run."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from executor.approvals import ApprovalAnswer, ApprovalRequest
from executor.run import RunOptions, run_task
from executor.testing import FakeResponsesServer, ScriptedModel, computer_call, function_call, message
from policies.audit import verify

pytestmark = [pytest.mark.docker, pytest.mark.browser]


class _Site:
    """A tiny HTTP server on one loopback address that counts what it was asked for."""

    def __init__(self, host: str, pages: dict[str, str]) -> None:
        self.paths: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.paths.append(self.path)
                body = pages.get(self.path, "").encode()
                self.send_response(200 if self.path in pages else 404)
                self.send_header("content-type", "text/html" if self.path.endswith(".html") else "image/svg+xml")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.origin = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextlib.contextmanager
    def running(self) -> Iterator[_Site]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()


_SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'


@pytest.fixture
def sites() -> Iterator[tuple[_Site, _Site]]:
    other = _Site("127.0.0.2", {"/pixel.svg": _SVG})
    with other.running():
        page = f'<title>t</title><img src="/own.svg"><img src="{other.origin}/pixel.svg">'
        home = _Site("127.0.0.1", {"/index.html": page, "/own.svg": _SVG, "/second.html": page})
        with home.running():
            yield home, other


def _policy(tmp_path: Path, home: _Site, other: _Site, *, other_decision: str) -> Path:
    path = tmp_path / "policy.toml"
    other_host = other.origin.removeprefix("http://")
    path.write_text(
        'version = 1\nextends = ["default"]\n\n[browser]\n'
        f'allow_domains = [{json.dumps(home.origin.removeprefix("http://"))}]\n'
        + (f'default = "{other_decision}"\n' if other_decision == "prompt" else "")
        + f'block_domains = [{json.dumps(other_host)}]\n' * (other_decision == "deny"))
    return path


def _records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]


def _run(tmp_path: Path, workspace: Path, policy: Path, script: list[list[dict[str, Any]]],
         approvals: Any = None) -> Path:
    with FakeResponsesServer(ScriptedModel(script)) as server:
        opts = RunOptions(task="look", repo=workspace, base_url=server.base_url, api_key="sk-test-0000",
                          policy=str(policy), browser="local", log=tmp_path / "run" / "requests.jsonl",
                          approvals=approvals)
        import asyncio

        outcome = asyncio.run(run_task(opts, Console(file=io.StringIO())))
    assert outcome.result.exit_code == 0, outcome.result.detail
    assert verify(outcome.folder / "audit.jsonl", head=outcome.audit_head) == []
    return outcome.folder


def test_a_refused_subresource_is_recorded_and_never_fetched(tmp_path: Path, user_workspace: Path,
                                                             sites: tuple[_Site, _Site]) -> None:
    home, other = sites
    script = [[function_call("navigate", {"url": f"{home.origin}/index.html"}, call_id="nav1")],
              [computer_call([{"type": "screenshot"}], call_id="shot1")],
              [message("seen")]]
    folder = _run(tmp_path, user_workspace, _policy(tmp_path, home, other, other_decision="deny"), script)
    assert other.paths == []  # the real effect: the refused host was never contacted
    assert "/own.svg" in home.paths
    urls = [r for r in _records(folder) if r.get("action") == "url"]
    decided = {(r["subject"], r["decision"], r["rule_id"], r["call_id"]) for r in urls if r["kind"] == "decision"}
    assert (f"{home.origin}/index.html", "allow", "browser.allow_domains", "nav1") in decided
    assert (f"{home.origin}/own.svg", "allow", "browser.allow_domains", "nav1") in decided
    assert (f"{other.origin}/pixel.svg", "deny", "browser.block_domains", "nav1") in decided
    blocked = [r for r in urls if r["kind"] == "outcome"]
    assert [(r["subject"], r["outcome"], r["rule_id"]) for r in blocked] == [
        (f"{other.origin}/pixel.svg", "blocked", "browser.block_domains")]


def test_a_prompted_host_is_asked_once_and_every_request_recorded(tmp_path: Path, user_workspace: Path,
                                                                   sites: tuple[_Site, _Site]) -> None:
    home, other = sites
    asked: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> ApprovalAnswer:
        asked.append(request)
        return ApprovalAnswer(True, "approved by the test")

    script = [[function_call("navigate", {"url": f"{home.origin}/index.html"}, call_id="nav1")],
              [function_call("navigate", {"url": f"{home.origin}/second.html"}, call_id="nav2")],
              [message("seen")]]
    folder = _run(tmp_path, user_workspace, _policy(tmp_path, home, other, other_decision="prompt"), script,
                  approvals=approve)
    assert [(r.kind, r.subject) for r in asked] == [("url", f"{other.origin}/pixel.svg")]
    assert other.paths.count("/pixel.svg") >= 1  # approved: fetched
    pixels = [r for r in _records(folder) if r.get("subject") == f"{other.origin}/pixel.svg"
              and r["kind"] == "decision"]
    assert len(pixels) >= 2 and {r["decision"] for r in pixels} == {"allow"}
    assert {r["call_id"] for r in pixels} == {"nav1", "nav2"}
    assert all(r["rule_id"] == "browser.default" for r in pixels)


@pytest.mark.parametrize(("mode", "answer"), [("acknowledge", "acknowledge"), ("refuse", "refuse")])
def test_safety_check_answers_are_recorded(tmp_path: Path, user_workspace: Path, sites: tuple[_Site, _Site],
                                           mode: str, answer: str) -> None:
    home, other = sites
    policy = _policy(tmp_path, home, other, other_decision="deny")
    policy.write_text(policy.read_text().replace("[browser]\n", f'[browser]\nsafety_checks = "{mode}"\n'))
    check = {"id": "sc_1", "code": "malicious_instructions", "message": "the page asks for a password"}
    script = [[function_call("navigate", {"url": f"{home.origin}/index.html"}, call_id="nav1")],
              [computer_call([{"type": "screenshot"}], pending_safety_checks=[check], call_id="shot1")],
              [message("seen")]]
    with FakeResponsesServer(ScriptedModel(script)) as server:
        opts = RunOptions(task="look", repo=user_workspace, base_url=server.base_url, api_key="sk-test-0000",
                          policy=str(policy), browser="local", log=tmp_path / "run" / "requests.jsonl")
        import asyncio

        outcome = asyncio.run(run_task(opts, Console(file=io.StringIO())))
    records = [r for r in _records(outcome.folder) if r.get("action") == "safety_check"]
    assert [(r["subject"], r["call_id"], r["decision"], r["rule_id"], r["code"]) for r in records] == [
        ("sc_1", "shot1", answer, "browser.safety_checks", "malicious_instructions")]
    assert records[0]["source"].endswith("policy.toml:5")  # the safety_checks line
    start = [json.loads(line) for line in (outcome.folder / "requests.jsonl").read_text().splitlines()
             if json.loads(line)["kind"] == "start"]
    assert start and start[0]["task"] == "look" and start[0]["placement"] == "local"
    assert len(start[0]["policy"]["sha256"]) == 64 and start[0]["runtime"] == "runc"
