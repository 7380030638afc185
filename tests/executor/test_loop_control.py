"""Stops, budgets, incomplete responses, async tools, schema checks, tool search and MCP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from executor.approvals import ApprovalRequest, Callback
from executor.catalog import ToolCatalog
from executor.loop import Budgets, ExitCode, Loop, LoopConfig
from executor.testing import (
    ScriptedModel,
    Turn,
    Usage,
    failed,
    function_call,
    incomplete,
    mcp_approval_request,
    message,
    tool_search_call,
)
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from sandloop.errors import ToolSchemaError
from tests.executor.conftest import run_loop, serve

NO_ARGS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def counter_tools(calls: list[str]) -> Toolbox:
    tools = FunctionTools()
    tools.add(FunctionTool("tick", lambda: calls.append("tick") or "ok", parameters=NO_ARGS))
    return Toolbox(functions=tools)


def ticks(n: int) -> list[Any]:
    return [[function_call("tick")] for _ in range(n)]


async def test_turn_budget() -> None:
    run = await run_loop(ticks(10), counter_tools([]), budgets=Budgets(max_turns=3))
    assert (run.result.reason, run.result.exit_code) == ("max_turns", ExitCode.BUDGET)
    assert len(run.requests) == 3 and "turn budget exhausted (3)" in run.result.detail


async def test_token_budget() -> None:
    turns = [Turn([function_call("tick")], usage=Usage(400, 200)) for _ in range(5)]
    run = await run_loop(turns, counter_tools([]), budgets=Budgets(max_total_tokens=1000))
    assert (run.result.reason, run.result.exit_code) == ("max_total_tokens", ExitCode.BUDGET)
    assert run.result.usage.total_tokens == 1200 and len(run.requests) == 2


async def test_tool_call_budget_stops_before_executing() -> None:
    calls: list[str] = []
    run = await run_loop([[function_call("tick")] * 2, [function_call("tick")] * 2],
                         counter_tools(calls), budgets=Budgets(max_tool_calls=3))
    assert (run.result.reason, run.result.exit_code) == ("max_tool_calls", ExitCode.BUDGET)
    assert calls == ["tick", "tick"] and run.result.tool_calls == 4


async def test_wall_time_budget() -> None:
    tools = FunctionTools()
    tools.add(FunctionTool("nap", lambda: asyncio.sleep(0.2), parameters=NO_ARGS))
    run = await run_loop([[function_call("nap")], [message("late")]], Toolbox(functions=tools),
                         budgets=Budgets(max_wall_s=0.1))
    assert (run.result.reason, run.result.exit_code) == ("max_wall_s", ExitCode.BUDGET)
    assert len(run.requests) == 1


async def test_incomplete_is_retried_once_with_a_larger_limit() -> None:
    calls: list[str] = []
    run = await run_loop(
        [incomplete(function_call("tick")), [function_call("tick")], [message("done")]],
        counter_tools(calls), max_output_tokens=100, retry_max_output_tokens=5000)
    assert run.result.exit_code is ExitCode.ANSWERED
    assert [r.get("max_output_tokens") for r in run.requests] == [100, 5000, 100]
    assert run.result.turns[0].retried
    assert calls == ["tick"]  # the incomplete response's call was never executed


async def test_incomplete_twice_stops() -> None:
    calls: list[str] = []
    run = await run_loop([incomplete(function_call("tick")), incomplete()], counter_tools(calls),
                         max_output_tokens=100)
    assert (run.result.reason, run.result.exit_code) == ("incomplete", ExitCode.INCOMPLETE)
    assert run.requests[1]["max_output_tokens"] == 25_000 and calls == []
    assert "max_output_tokens" in run.result.detail


async def test_content_filter_and_failure_and_refusal() -> None:
    filtered = await run_loop([incomplete(reason="content_filter")], counter_tools([]))
    assert (filtered.result.reason, filtered.result.exit_code) == ("content_filter",
                                                                  ExitCode.REFUSED)
    broken = await run_loop([failed("boom")], counter_tools([]))
    assert broken.result.exit_code is ExitCode.ERROR and "boom" in broken.result.detail
    refusal = {"type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "refusal", "refusal": "I can't help with that."}]}
    refused = await run_loop([[refusal]], counter_tools([]))
    assert (refused.result.reason, refused.result.exit_code) == ("refusal", ExitCode.REFUSED)
    assert refused.result.detail == "I can't help with that."


async def test_api_error_ends_the_run() -> None:
    # The scenario has one turn; the second request is refused by the server (HTTP 4xx/5xx).
    model = ScriptedModel([[function_call("tick")]])
    import openai

    with serve(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        result = await Loop(client, LoopConfig(model="m"), counter_tools([])).run("go")
    assert (result.reason, result.exit_code) == ("api_error", ExitCode.ERROR)
    assert "scenario exhausted" in result.detail


async def test_async_tool_and_wait() -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def build() -> str:
        await release.wait()
        return "built"

    tools = FunctionTools()
    tools.add(FunctionTool("build", build, parameters=NO_ARGS, is_async=True))
    tools.add(FunctionTool("tick", lambda: "ok", parameters=NO_ARGS))

    def wait_for_build(request: dict[str, Any], history: list[Any]) -> list[Any]:
        # The build finishes only now, while the model asks to wait for it (the fake server
        # runs this in its own thread).
        loop.call_soon_threadsafe(release.set)
        build_call = next(i for i in history if i.get("type") == "function_call"
                          and i.get("name") == "build")
        return [function_call("wait", {"handles": [build_call["call_id"]], "timeout_s": 10})]

    run = await run_loop(
        [[function_call("build", is_async=True), function_call("tick")],  # build: background
         [function_call("tick")],  # the loop goes on while build still runs
         wait_for_build,
         [message("done")]],
        Toolbox(functions=tools))
    assert run.result.exit_code is ExitCode.ANSWERED
    build_id = run.server.responses[0]["output"][0]["call_id"]
    assert any(t["name"] == "wait" for t in run.requests[0]["tools"])
    assert next(t for t in run.requests[0]["tools"] if t["name"] == "build")["async"] is True
    assert [o["output"] for o in run.outputs(1)] == ["ok"]  # build is not answered yet
    assert [o["output"] for o in run.outputs(2)] == ["ok"]
    third = run.outputs(3)
    status = json.loads(third[0]["output"])
    assert status == {build_id: "done (output sent with this request)"}
    assert third[1] == {"type": "function_call_output", "call_id": build_id, "output": "built"}


async def test_async_output_sent_when_the_model_stops_first() -> None:
    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "late result"

    tools = FunctionTools()
    tools.add(FunctionTool("slow", slow, parameters=NO_ARGS, is_async=True))
    run = await run_loop([[function_call("slow", is_async=True), message("working on it")],
                          [message("got it")]], Toolbox(functions=tools))
    assert run.result.final_text == "got it"
    assert run.outputs(1)[0]["output"] == "late result"


@pytest.mark.parametrize(("schema", "path", "what"), [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
     "at $:", "'additionalProperties' is required"),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
      "required": ["a"], "additionalProperties": False}, "at $:", "missing ['b']"),
    ({"type": "object", "additionalProperties": False, "required": ["rows"],
      "properties": {"rows": {"type": "array", "items": {
          "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}},
     "at $.properties.rows.items:", "'additionalProperties'"),
])
async def test_schema_check_before_the_first_request(schema: dict[str, Any], path: str,
                                                     what: str) -> None:
    tools = FunctionTools()
    tools.add(FunctionTool("plot", lambda **kw: "x", parameters=schema))
    model = ScriptedModel([[message("never")]])
    import openai

    with serve(model) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k")
        with pytest.raises(ToolSchemaError) as err:
            Loop(client, LoopConfig(), Toolbox(functions=tools))
        assert server.requests == []
    assert "'plot'" in str(err.value) and path in str(err.value) and what in str(err.value)


async def test_tool_search_loads_once_then_tools_are_callable() -> None:
    orders = FunctionTool("list_open_orders", lambda customer_id: f"orders of {customer_id}",
                          description="List open orders", namespace="crm",
                          parameters={"type": "object",
                                      "properties": {"customer_id": {"type": "string"}},
                                      "required": ["customer_id"],
                                      "additionalProperties": False})
    weather = FunctionTool("forecast", lambda: "sun", description="weather forecast",
                           parameters=NO_ARGS)
    catalog = ToolCatalog([orders, weather], namespaces={"crm": "CRM tools"})
    run = await run_loop(
        [[tool_search_call({"query": "open orders"})],
         [tool_search_call({"query": "orders"})],
         [function_call("list_open_orders", {"customer_id": "c7"}, namespace="crm")],
         [message("ok")]],
        Toolbox(catalog=catalog))
    assert run.result.exit_code is ExitCode.ANSWERED
    first = run.outputs(1)[0]
    assert first["execution"] == "client" and first["status"] == "completed"
    assert first["tools"] == [{"type": "namespace", "name": "crm", "description": "CRM tools",
                               "tools": [orders.to_param()]}]
    assert run.outputs(2)[0]["tools"] == []  # already loaded: not re-sent
    assert run.outputs(3)[0]["output"] == "orders of c7"
    assert all(t["type"] != "function" for t in run.requests[0]["tools"])  # deferred


async def test_mcp_denied_by_default() -> None:
    run = await run_loop([[mcp_approval_request("delete_repo", {"name": "x"},
                                                server_label="gh")],
                          [message("ok")]], Toolbox())
    (answer,) = run.outputs(1)
    assert answer["type"] == "mcp_approval_response" and answer["approve"] is False
    assert answer["approval_request_id"] == run.server.responses[0]["output"][0]["id"]
    assert answer["reason"].startswith("denied")


async def test_mcp_approved_by_a_callback(tmp_path: Any) -> None:
    from executor.policy_gate import PolicyGate
    from policies import engine as engine_mod

    policy = tmp_path / "p.toml"
    policy.write_text('version = 1\n[mcp]\ndefault = "prompt"\n')
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return request.subject == "gh.list_issues"

    gate = PolicyGate(engine_mod.load_policy(str(policy)), Callback(approve))
    run = await run_loop([[mcp_approval_request("list_issues", server_label="gh"),
                           mcp_approval_request("delete_repo", server_label="gh")],
                          [message("ok")]], Toolbox(gate=gate))
    yes, no = run.outputs(1)
    assert yes["approve"] is True and yes["reason"].startswith("approved")
    assert no["approve"] is False and no["reason"].startswith("denied")
    assert [r.kind for r in asked] == ["mcp", "mcp"]
