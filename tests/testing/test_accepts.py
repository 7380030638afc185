"""The fake server accepts every valid reply shape (docs/protocol.md), and both state modes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from executor.testing import (
    FakeResponsesServer,
    apply_patch_call,
    computer_call,
    create_file,
    custom_tool_call,
    function_call,
    local_shell_call,
    mcp_approval_request,
    message,
    program,
    reasoning,
    shell_call,
    tool_search_call,
)

from .cases import SCREENSHOT, TOOLS, USER, fco
from .conftest import acreate, create

Serve = Callable[..., FakeResponsesServer]

PROGRAM_CALLER = {"type": "program", "caller_id": "call_prog"}
DIRECT = {"type": "direct"}
SAFETY = {"id": "cu_sc_1", "code": "malicious_instructions", "message": "Check the page."}


def every_call_turn() -> list[dict[str, Any]]:
    return [
        reasoning(["plan"]),
        program("await tools.get_weather({city: 'Oslo'})", call_id="call_prog"),
        function_call("get_weather", {"city": "Oslo"}, call_id="call_fn", caller=PROGRAM_CALLER),
        custom_tool_call("code_exec", "print(1)", call_id="call_ct", caller=DIRECT),
        shell_call(["ls", "git status"], max_output_length=4096, timeout_ms=1000,
                   call_id="call_sh", caller=DIRECT),
        local_shell_call(["bash", "-lc", "ls"], call_id="call_ls", working_directory="/repo"),
        apply_patch_call(create_file("NOTES.md", "+hi\n"), call_id="call_ap", caller=DIRECT),
        computer_call([{"type": "click", "button": "left", "x": 1, "y": 2},
                       {"type": "type", "text": "penguin"}],
                      pending_safety_checks=[SAFETY], call_id="call_cu"),
        tool_search_call({"query": "crm"}, call_id="call_ts"),
        mcp_approval_request("search_docs", {"q": "x"}, server_label="docs", id="mcpr_1"),
    ]


ANSWERS: list[dict[str, Any]] = [
    fco("call_fn", '{"temp_c": 22}', caller=PROGRAM_CALLER),
    {"type": "custom_tool_call_output", "call_id": "call_ct", "caller": DIRECT,
     "output": [{"type": "input_text", "text": "1\n"}]},
    {"type": "shell_call_output", "call_id": "call_sh", "max_output_length": 4096,
     "caller": DIRECT, "output": [
         {"stdout": "a.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
         {"stdout": "", "stderr": "fatal: not a git repository\n",
          "outcome": {"type": "timeout"}}]},
    {"type": "local_shell_call_output", "id": "call_ls",
     "output": '{"stdout": "a.txt\\n", "exit_code": 0}'},
    {"type": "apply_patch_call_output", "call_id": "call_ap", "status": "completed",
     "output": "Created NOTES.md", "caller": DIRECT},
    {"type": "computer_call_output", "call_id": "call_cu", "acknowledged_safety_checks": [SAFETY],
     "output": {"type": "computer_screenshot", "image_url": SCREENSHOT, "detail": "original"}},
    {"type": "tool_search_output", "call_id": "call_ts", "execution": "client",
     "status": "completed", "tools": [{"type": "namespace", "name": "crm",
                                       "description": "CRM tools", "tools": [
         {"type": "function", "name": "list_orders", "description": "List orders.",
          "defer_loading": True, "strict": True,
          "parameters": {"type": "object", "properties": {"id": {"type": "string"}},
                         "required": ["id"], "additionalProperties": False}}]}]},
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": False,
     "reason": "denied by policy"},
]
PTC_TOOLS = [*TOOLS, {"type": "programmatic_tool_calling"}]


def test_every_reply_shape_is_accepted_sync(serve: Serve) -> None:
    server = serve([every_call_turn(), [message("all answered")]])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    first = create(client, model="gpt-test", input=[USER], tools=PTC_TOOLS)
    assert [item.type for item in first.output] == [i["type"] for i in every_call_turn()]
    final = create(client, model="gpt-test", input=ANSWERS, tools=PTC_TOOLS,
                   previous_response_id=first.id)
    assert final.output_text == "all answered"
    assert final.previous_response_id == first.id
    assert server.requests[1]["input"] == ANSWERS  # recorded as sent


async def test_every_reply_shape_is_accepted_async(serve: Serve) -> None:
    server = serve([every_call_turn(), [message("all answered")]])
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test",
                                  max_retries=0) as client:
        first = await acreate(client, model="gpt-test", input=[USER], tools=PTC_TOOLS)
        final = await acreate(client, model="gpt-test", input=ANSWERS, tools=PTC_TOOLS,
                              previous_response_id=first.id)
        assert final.output_text == "all answered"
        stored = await client.responses.retrieve(final.id)
        assert stored.id == final.id


def test_chaining_keeps_calls_answered_on_earlier_turns(serve: Serve) -> None:
    seen: list[int] = []

    def third(request: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append(len(history))
        return [message("three turns")]

    server = serve([[function_call("get_weather", {"city": "A"}, call_id="call_1")],
                    [function_call("get_weather", {"city": "B"}, call_id="call_2")], third])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    r1 = create(client, model="gpt-test", input=[USER], tools=TOOLS)
    r2 = create(client, model="gpt-test", input=[fco("call_1")], tools=TOOLS,
                previous_response_id=r1.id)
    r3 = create(client, model="gpt-test", input=[fco("call_2")], tools=TOOLS,
                previous_response_id=r2.id)
    assert r3.output_text == "three turns"
    assert seen == [5]  # user, call_1, output, call_2, output


def test_stateless_replay_with_reasoning(serve: Serve) -> None:
    histories: list[list[dict[str, Any]]] = []

    def answer(request: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        histories.append(history)
        return [message("stateless ok")]

    server = serve([[reasoning(["plan"]), function_call("get_weather", {"city": "Oslo"}),
                     function_call("get_weather", {"city": "Rome"})], answer])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    stateless: dict[str, Any] = {"store": False, "include": ["reasoning.encrypted_content"]}
    first = create(client, model="gpt-test", input=[USER], tools=TOOLS, **stateless)
    rs, call1, call2 = (item.model_dump(mode="json", exclude_none=True) for item in first.output)
    assert rs["encrypted_content"]
    replay = [USER, rs, call1, call2, fco(call1["call_id"]), fco(call2["call_id"])]
    final = create(client, model="gpt-test", input=replay, tools=TOOLS, **stateless)
    assert final.output_text == "stateless ok"
    assert [item.get("type") for item in histories[0]] == [
        None, "reasoning", "function_call", "function_call", "function_call_output",
        "function_call_output"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_store_false_without_include_withholds_encrypted_reasoning(serve: Serve) -> None:
    client = openai.OpenAI(base_url=serve([[reasoning(), message("x")]]).base_url,
                           api_key="test", max_retries=0)
    response = create(client, model="gpt-test", input="hi", store=False)
    assert response.output[0].type == "reasoning"
    assert response.output[0].encrypted_content is None


def test_async_calls_may_be_answered_on_a_later_turn(serve: Serve) -> None:
    server = serve([[function_call("slow_job", "{}", call_id="call_async", is_async=True),
                     function_call("get_weather", {"city": "Oslo"}, call_id="call_sync")],
                    [message("waiting")], [message("done")]])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    r1 = create(client, model="gpt-test", input=[USER], tools=TOOLS)
    r2 = create(client, model="gpt-test", input=[fco("call_sync")], tools=TOOLS,
                previous_response_id=r1.id)
    r3 = create(client, model="gpt-test", input=[fco("call_async", "job done")],
                tools=TOOLS, previous_response_id=r2.id)
    assert r3.output_text == "done"


def test_item_reference_resolves_stored_items(serve: Serve) -> None:
    server = serve([[function_call("get_weather", {"city": "Oslo"}, call_id="call_1")],
                    [message("by reference")]])
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    first = create(client, model="gpt-test", input=[USER], tools=TOOLS)
    final = create(
        client,
        model="gpt-test", tools=TOOLS,
        input=[USER, {"type": "item_reference", "id": first.output[0].id}, fco("call_1")])
    assert final.output_text == "by reference"
