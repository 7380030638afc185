"""Cassette round trip: record a session, replay the model side offline, compare outputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from executor.testing import (
    Cassette,
    CassetteRecorder,
    FakeResponsesServer,
    ScriptedModel,
    compare_tool_outputs,
    computer_call,
    function_call,
    message,
    shell_call,
)

from .cases import SCREENSHOT, TOOLS, USER


def run_session(base_url: str, tools: Callable[[dict[str, Any]], dict[str, Any]],
                recorder: CassetteRecorder | None = None) -> list[dict[str, Any]]:
    """A minimal client loop: answer every call with `tools(call)`, chain by id."""
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
    body: dict[str, Any] = {"model": "gpt-test", "input": [USER], "tools": TOOLS}
    bodies = []
    while True:
        response = client.responses.create(**body)
        bodies.append(body)
        if recorder is not None:
            recorder.record(body, response.model_dump(mode="json"))
        calls = [i.model_dump(mode="json") for i in response.output if i.type != "message"]
        if not calls:
            return bodies
        body = {"model": "gpt-test", "tools": TOOLS, "previous_response_id": response.id,
                "input": [tools(call) for call in calls]}


def answer(call: dict[str, Any], *, weather: str = "22") -> dict[str, Any]:
    if call["type"] == "shell_call":
        return {"type": "shell_call_output", "call_id": call["call_id"], "output": [
            {"stdout": "ok\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}
    if call["type"] == "computer_call":
        return {"type": "computer_call_output", "call_id": call["call_id"],
                "output": {"type": "computer_screenshot", "image_url": SCREENSHOT}}
    return {"type": "function_call_output", "call_id": call["call_id"],
            "output": json.dumps({"temp_c": weather})}


SCENARIO = [[shell_call(["pytest -q"]), function_call("get_weather", {"city": "Oslo"})],
            [computer_call([{"type": "screenshot"}])], [message("done")]]


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    path = tmp_path / "rec" / "session.jsonl"
    with FakeResponsesServer(ScriptedModel(SCENARIO)) as server, \
            Cassette.recorder(path) as recorder:
        run_session(server.base_url, answer, recorder)
    return path


def test_recording_is_jsonl_of_request_response_pairs(cassette: Path) -> None:
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert len(lines) == 3 and all(set(line) == {"request", "response"} for line in lines)
    loaded = Cassette.load(cassette)
    assert loaded.requests[0]["input"] == [USER]
    assert loaded.responses[-1]["output"][0]["type"] == "message"


def test_replay_with_the_same_tools_shows_no_difference(cassette: Path) -> None:
    recorded = Cassette.load(cassette)
    with FakeResponsesServer(ScriptedModel.from_cassette(cassette)) as server:
        run_session(server.base_url, answer)
        assert [r["id"] for r in server.responses] == [r["id"] for r in recorded.responses]
    assert compare_tool_outputs(recorded.requests, server.requests) == []


def test_replay_reports_the_changed_tool_output(cassette: Path) -> None:
    recorded = Cassette.load(cassette)
    with FakeResponsesServer(ScriptedModel.from_cassette(cassette)) as server:
        run_session(server.base_url, lambda call: answer(call, weather="-5"))
    [difference] = compare_tool_outputs(recorded.requests, server.requests)
    weather_call = recorded.responses[0]["output"][1]["call_id"]
    assert (difference.call_id, difference.kind) == (weather_call, "changed")
    assert difference.item_type == "function_call_output"
    assert '- "output": "{\\"temp_c\\": \\"22\\"}"' in difference.diff
    assert '+ "output": "{\\"temp_c\\": \\"-5\\"}"' in difference.diff


def test_missing_and_extra_outputs_are_reported() -> None:
    old = [{"input": [{"type": "function_call_output", "call_id": "a", "output": "1"}]}]
    new = [{"input": [{"type": "mcp_approval_response", "approval_request_id": "m",
                       "approve": False}]}]
    kinds = [(d.call_id, d.kind) for d in compare_tool_outputs(old, new)]
    assert kinds == [("a", "missing"), ("m", "extra")]


def test_a_corrupt_cassette_line_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"request": {}, "response": {}}\n{"request": 1}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        Cassette.load(path)
