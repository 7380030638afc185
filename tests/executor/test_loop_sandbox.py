"""The loop against the real back-ends: a DockerSession for shell and patches, Chromium for
computer use. Each test runs the real openai client against the strict fake server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from executor.approvals import DenyAll
from executor.loop import ExitCode
from executor.policy_gate import PolicyGate
from executor.testing import (
    apply_patch_call,
    custom_tool_call,
    function_call,
    local_shell_call,
    message,
    shell_call,
    update_file,
)
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from policies.audit import AuditLog
from policies.engine import load_policy
from sandbox.docker import DockerSession
from tests.executor.conftest import run_loop

pytestmark = pytest.mark.docker

POLICY = """\
version = 1
unattended = true
[shell]
default = "allow"
[files]
writable = ["**"]
read_only = ["locked/**"]
[browser]
allow_domains = ["127.0.0.1"]
"""

NO_ARGS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


@pytest.fixture
def gate(tmp_path: Path) -> PolicyGate:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return PolicyGate(load_policy(str(policy)), DenyAll(), AuditLog(tmp_path / "audit.jsonl"))


@pytest.fixture
async def session(docker_client: Any, user_workspace: Path) -> AsyncIterator[DockerSession]:
    s = await DockerSession.create(user_workspace)
    try:
        yield s
    finally:
        await s.close()


async def test_five_parallel_shell_calls_in_one_turn(session: DockerSession,
                                                     gate: PolicyGate) -> None:
    # Each command marks itself, then waits until all five marks exist: it can only print
    # ok<i> if the five calls overlap in time (run one by one, the first would give up: exit 9).
    def call(i: int) -> dict[str, Any]:
        return shell_call([f"touch m{i}; n=0; while [ $(ls m* | wc -l) -lt 5 ]; do sleep 0.05; "
                           f"n=$((n+1)); [ $n -gt 200 ] && exit 9; done; echo ok{i}"])

    run = await run_loop([[call(i) for i in range(5)], [message("all five")]],
                         Toolbox(gate=gate, session=session), required_tools=["shell"])
    assert run.result.exit_code is ExitCode.ANSWERED
    outputs = run.outputs(1)
    calls = run.server.responses[0]["output"]
    assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
    assert [o["output"][0]["stdout"] for o in outputs] == [f"ok{i}\n" for i in range(5)]
    assert all(o["output"][0]["outcome"] == {"type": "exit", "exit_code": 0} for o in outputs)


async def test_shell_local_shell_and_caller(session: DockerSession, gate: PolicyGate) -> None:
    caller = {"type": "direct"}
    run = await run_loop(
        [[shell_call(["echo hi", "exit 3"], max_output_length=100, caller=caller),
          local_shell_call(["bash", "-lc", "echo legacy"])],
         [message("ok")]],
        Toolbox(gate=gate, session=session), stateless=True)
    assert run.result.exit_code is ExitCode.ANSWERED
    shell, legacy = run.outputs(1)
    assert shell["max_output_length"] == 100 and shell["caller"] == caller
    assert [c["outcome"] for c in shell["output"]] == [{"type": "exit", "exit_code": 0},
                                                       {"type": "exit", "exit_code": 3}]
    assert legacy["id"] == run.server.responses[0]["output"][1]["call_id"]
    assert json.loads(legacy["output"])["stdout"] == "legacy\n"


async def test_backend_killed_mid_call(session: DockerSession, gate: PolicyGate) -> None:
    async def kill() -> str:
        await asyncio.sleep(0.3)  # let the sleep start; a kill before it fails the call too
        assert session.container is not None
        await asyncio.to_thread(session.container.kill)
        return "killed"

    tools = FunctionTools()
    tools.add(FunctionTool("kill_backend", kill, parameters=NO_ARGS))
    run = await run_loop(
        [[shell_call(["sleep 30"]), function_call("kill_backend")],
         [shell_call(["echo back"])],
         [message("recovered")]],
        Toolbox(gate=gate, session=session, functions=tools))
    assert run.result.exit_code is ExitCode.ANSWERED
    dead, killed = run.outputs(1)
    assert killed["output"] == "killed"
    (chunk,) = dead["output"]
    assert chunk["outcome"] != {"type": "exit", "exit_code": 0}
    assert chunk["stderr"].startswith("sandbox unavailable")
    assert run.outputs(2)[0]["output"][0]["stdout"] == "back\n"  # a fresh container answered


async def test_two_patches_to_one_file_apply_in_order(session: DockerSession, gate: PolicyGate,
                                                      user_workspace: Path) -> None:
    (user_workspace / "a.txt").write_text("one\n")
    (user_workspace / "locked").mkdir()
    (user_workspace / "locked" / "x.txt").write_text("x\n")
    run = await run_loop(
        [[apply_patch_call(update_file("a.txt", "-one\n+two\n")),
          apply_patch_call(update_file("a.txt", "-two\n+three\n")),
          apply_patch_call(update_file("locked/x.txt", "-x\n+y\n"))],
         [message("patched")]],
        Toolbox(gate=gate, session=session), required_tools=["apply_patch"])
    first, second, locked = run.outputs(1)
    assert (first["status"], second["status"], locked["status"]) == ("completed", "completed",
                                                                      "failed")
    assert (user_workspace / "a.txt").read_text() == "three\n"
    assert (user_workspace / "locked" / "x.txt").read_text() == "x\n"


async def test_apply_patch_as_a_custom_tool(session: DockerSession, gate: PolicyGate,
                                            user_workspace: Path) -> None:
    envelope = "*** Begin Patch\n*** Add File: notes.md\n+# Notes\n*** End Patch\n"
    run = await run_loop([[custom_tool_call("apply_patch", envelope)], [message("ok")]],
                         Toolbox(gate=gate, session=session, patch_tool="custom"),
                         required_tools=["custom:apply_patch"])
    (out,) = run.outputs(1)
    assert out["type"] == "custom_tool_call_output"
    assert (user_workspace / "notes.md").read_text() == "# Notes\n"


@pytest.mark.browser
async def test_computer_call_and_a_refused_safety_check(gate: PolicyGate, tmp_path: Path) -> None:
    from executor.demo import DEMO_DIR, page_server
    from executor.navigation import navigation_tools
    from executor.testing import computer_call
    from sandbox.browser import BrowserConfig, LocalBrowser

    browser = LocalBrowser(BrowserConfig(allow_url=gate.engine.url))
    try:
        await browser.start()
        tools = FunctionTools()
        tools.extend(navigation_tools(browser))
        with page_server(DEMO_DIR / "page") as url:
            check = {"id": "cu_sc_1", "code": "malicious_instructions", "message": "odd page"}
            run = await run_loop(
                [[function_call("navigate", {"url": url}),
                  computer_call([{"type": "move", "x": 10, "y": 10}, {"type": "screenshot"}])],
                 [computer_call([{"type": "screenshot"}], pending_safety_checks=[check])]],
                Toolbox(gate=gate, computer=browser, functions=tools),
                required_tools=["computer", "function:navigate"])
    finally:
        await browser.close()
    nav, shot = run.outputs(1)
    assert "calc status" in nav["output"]
    assert shot["output"]["image_url"].startswith("data:image/png;base64,")
    assert shot["output"]["detail"] == "original"
    # The computer actions and the navigation share the one browser: they ran in order.
    assert (run.result.reason, run.result.exit_code) == ("safety_check", ExitCode.REFUSED)
    assert "cu_sc_1" in run.result.detail and len(run.requests) == 2


@pytest.mark.browser
async def test_safety_check_acknowledged_through_the_approvals_callback(tmp_path: Path) -> None:
    from executor.approvals import ApprovalRequest, Callback, safety_callback
    from executor.testing import computer_call
    from sandbox.browser import LocalBrowser

    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    check = {"id": "cu_sc_2", "code": "irrelevant_domain", "message": "about:blank?"}
    browser = LocalBrowser()
    try:
        await browser.start()
        run = await run_loop(
            [[computer_call([{"type": "screenshot"}], pending_safety_checks=[check])],
             [message("seen")]],
            Toolbox(computer=browser, computer_safety=safety_callback(Callback(approve))))
    finally:
        await browser.close()
    assert run.result.exit_code is ExitCode.ANSWERED
    (out,) = run.outputs(1)
    assert out["acknowledged_safety_checks"] == [check]
    assert [(r.kind, r.details["check_id"]) for r in asked] == [("safety_check", "cu_sc_2")]


@pytest.mark.browser
async def test_preview_computer_tool_declares_its_display_and_gets_it(tmp_path: Path) -> None:
    import base64
    import io

    from PIL import Image

    from executor.safety import acknowledge_all
    from executor.testing import computer_call
    from sandbox.browser import LocalBrowser

    browser = LocalBrowser()  # viewport 1280×800; the preview tool declares half of it
    try:
        await browser.start()
        item = computer_call([])
        del item["actions"]
        item["action"] = {"type": "screenshot"}  # the preview tool's single action
        run = await run_loop([[item], [message("seen")]],
                             Toolbox(computer=browser, computer_display=(640, 400),
                                     computer_safety=acknowledge_all))
    finally:
        await browser.close()
    (tool,) = run.requests[0]["tools"]
    assert tool == {"type": "computer_use_preview", "display_width": 640, "display_height": 400,
                    "environment": "browser"}
    (out,) = run.outputs(1)
    png = base64.b64decode(out["output"]["image_url"].split(",", 1)[1])
    assert Image.open(io.BytesIO(png)).size == (640, 400)
    assert "detail" not in out["output"]  # "original" is the GA tool's extra field
