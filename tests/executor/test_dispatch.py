"""The dispatcher's promises, through the real openai client and the strict fake server: every
call answered once and in the right shape — malformed calls, reused call ids, missing back-ends —
and what an output cannot carry sent beside it."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam
from pydantic import TypeAdapter

from executor.registry import KINDS, kinds_for
from executor.testing import (
    Turn,
    apply_patch_call,
    computer_call,
    custom_tool_call,
    function_call,
    local_shell_call,
    mcp_approval_request,
    message,
    shell_call,
    tool_search_call,
    update_file,
)
from executor.testing.state import CALL_OUTPUT_TYPES
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from sandbox.local import LocalSession
from sandloop.files import PatchKind
from sandloop.limits import Limits
from sandloop.verdict import Decision, Verdict
from tests.executor.conftest import run_loop

NO_ARGS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
INPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseInputItemParam)


class RecordingGate:
    """Allows everything and remembers what it was asked: proof of what reached the back-end."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def _yes(self, subject: str) -> Verdict:
        self.asked.append(subject)
        return Verdict(Decision.ALLOW, "test", "test.allow")

    async def shell(self, command: str, *, call_id: str) -> Verdict:
        return await self._yes(command)

    def shell_asks(self, command: str) -> bool:
        return False

    async def patch(self, path: str, kind: PatchKind, *, call_id: str, size_bytes: int | None = None) -> Verdict:
        return await self._yes(f"{kind} {path}")

    async def url(self, url: str, *, call_id: str) -> Verdict:
        return await self._yes(url)

    async def function(self, name: str, *, call_id: str) -> Verdict:
        return await self._yes(name)

    async def mcp(self, server_label: str, tool: str, *, call_id: str) -> Verdict:
        return await self._yes(f"{server_label}.{tool}")

    async def outcome(self, action: str, subject: str, *, call_id: str, ok: bool, detail: str = "",
                      **fields: Any) -> None:
        return None


@pytest.fixture
def local_session(tmp_path: Path) -> Iterator[LocalSession]:
    # The host-subprocess back-end: nothing here may reach it, and it shows when something does.
    yield LocalSession(tmp_path, Limits())


def _ticker(calls: list[str]) -> FunctionTools:
    tools = FunctionTools()
    tools.add(FunctionTool("tick", lambda: calls.append("tick") or "ok", parameters=NO_ARGS))
    return tools


async def test_malformed_shell_calls_are_answered_with_what_is_wrong(tmp_path: Path) -> None:
    as_string = shell_call(["x"], call_id="c_str")
    as_string["action"]["commands"] = "echo pwned > proof"  # one string, not a list of lines
    no_action = shell_call(["x"], call_id="c_none")
    del no_action["action"]
    empty = shell_call([], call_id="c_empty")
    gate, calls = RecordingGate(), []
    session = await LocalSession.create(tmp_path)
    try:
        run = await run_loop(
            [Turn([as_string, no_action, empty, function_call("tick")], unchecked=True), [message("done")]],
            Toolbox(gate=gate, session=session, functions=_ticker(calls)))
    finally:
        await session.close()
    by_id = {o["call_id"]: o for o in run.outputs(1)}
    assert set(by_id) == {"c_str", "c_none", "c_empty", run.server.responses[0]["output"][3]["call_id"]}
    for call_id, words in [("c_str", ["action.commands", "valid list"]),
                           ("c_none", ["action", "required"]),
                           ("c_empty", ["action.commands is empty"])]:
        (entry,) = by_id[call_id]["output"]
        assert entry["outcome"] == {"type": "exit", "exit_code": 1}
        assert entry["stderr"].startswith("invalid shell_call:") and entry["stdout"] == ""
        assert all(w in entry["stderr"] for w in words), entry["stderr"]
        INPUT_ITEM.validate_python(by_id[call_id])
    # Nothing of a malformed call ran — not even one character of it — and the valid call did.
    assert gate.asked == ["tick"] and calls == ["tick"]
    assert not (tmp_path / "proof").exists() and not list(tmp_path.iterdir())


async def test_a_reused_call_id_is_answered_once_and_the_answer_says_so() -> None:
    gate, calls = RecordingGate(), []
    run = await run_loop(
        [[shell_call(["echo from the shadowed call"], call_id="dup"), function_call("tick", call_id="dup")],
         [message("done")]],
        Toolbox(gate=gate, functions=_ticker(calls)))  # run_loop: the strict server accepted it
    (out,) = run.outputs(1)
    assert out["type"] == "function_call_output" and out["call_id"] == "dup"
    assert out["output"].startswith("ok\n[sandloop] the call_id dup was used by 2 calls (shell_call, function_call)")
    assert gate.asked == ["tick"] and calls == ["tick"]  # the shell call never ran
    assert [r.type for r in run.result.turns[0].calls] == ["function_call"]


async def test_each_missing_back_end_is_named(local_session: LocalSession) -> None:
    run = await run_loop(
        [[shell_call(["true"], call_id="no_gate"), computer_call([{"type": "screenshot"}], call_id="no_browser"),
          apply_patch_call(update_file("a.txt", "@@\n-a\n+b\n"), call_id="no_session")],
         [message("done")]],
        Toolbox(session=None))
    texts = {o["call_id"]: str(o.get("output")) for o in run.outputs(1)}
    assert "no sandbox session" in texts["no_gate"] and "no sandbox session" in texts["no_session"]
    run = await run_loop([[shell_call(["true"], call_id="no_gate")], [message("done")]],
                         Toolbox(session=local_session))
    (out,) = run.outputs(1)
    assert "no policy gate" in out["output"][0]["stderr"]


@pytest.mark.browser
async def test_what_a_screenshot_cannot_say_goes_beside_it() -> None:
    from sandbox.browser import LocalBrowser

    browser = LocalBrowser()  # 1280×800: the click below lies outside it, so it does not run
    try:
        await browser.start()
        run = await run_loop(
            [[computer_call([{"type": "click", "button": "left", "x": 5000, "y": 5}], call_id="cu_1")],
             [message("seen")]],
            Toolbox(computer=browser))
    finally:
        await browser.close()
    inputs = run.requests[1]["input"]
    assert [i.get("type") for i in inputs] == ["computer_call_output", "message"]
    note = inputs[1]
    assert note["role"] == "developer" and "computer_call cu_1" in note["content"]
    assert "(5000, 5) is outside the 1280x800 display" in note["content"]


def _minimal(kind_type: str) -> dict[str, Any]:
    """The smallest item of each type, as malformed as a model could send it."""
    items: dict[str, Any] = {
        "function_call": function_call("f"), "custom_tool_call": custom_tool_call("c", ""),
        "shell_call": shell_call([]), "local_shell_call": local_shell_call([]),
        "apply_patch_call": apply_patch_call({"type": "bogus"}),
        "computer_call": computer_call([{"type": "warp"}]), "tool_search_call": tool_search_call({}),
        "mcp_approval_request": mcp_approval_request("t"),
    }
    return dict(items[kind_type], call_id="call_min", id="id_min", caller={"type": "direct"})


@pytest.mark.parametrize("kind_cls", KINDS, ids=[k.call_type for k in KINDS])
def test_every_kind_answers_an_error_in_the_sdks_shape(kind_cls: Any) -> None:
    kind = kinds_for(Toolbox())[kind_cls.call_type]
    item = _minimal(kind.call_type)
    out = kind.error_output(item, "error: something went wrong")
    INPUT_ITEM.validate_python(out)
    assert out["type"] == kind.output_type and kind.answers(item, out)


def test_the_registry_covers_every_call_the_client_must_answer() -> None:
    answered = {cls.call_type: cls.output_type for cls in KINDS}
    expected = {call: out for call, (out, _) in CALL_OUTPUT_TYPES.items()}
    expected["mcp_approval_request"] = "mcp_approval_response"
    assert answered == expected
    # and every kind's output type is an input item the SDK knows
    known = {typing.get_args(typing.get_type_hints(t)["type"])[0]
             for t in typing.get_args(ResponseInputItemParam) if "type" in typing.get_type_hints(t)}
    assert set(answered.values()) <= known
