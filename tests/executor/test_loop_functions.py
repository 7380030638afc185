"""The loop end to end with function and custom tools: the strict fake server, the real client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from executor.loop import ExitCode
from executor.testing import (
    custom_tool_call,
    function_call,
    message,
    program,
    reasoning,
    shell_call,
    tool_search_call,
)
from executor.toolbox import Toolbox
from executor.tools import FunctionTool, FunctionTools
from tests.executor.conftest import run_loop

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}


def weather_tools(calls: list[str] | None = None) -> Toolbox:
    def weather(city: str) -> dict[str, Any]:
        if calls is not None:
            calls.append(city)
        return {"city": city, "temp_c": 22}

    def broken(city: str) -> str:
        raise ValueError(f"no station in {city}")

    tools = FunctionTools()
    tools.add(FunctionTool("weather", weather, description="weather", parameters=CITY))
    tools.add(FunctionTool("broken", broken, description="always raises", parameters=CITY))
    tools.add(FunctionTool("shout", lambda text: text.upper(), kind="custom",
                           description="upper-cases its input"))
    return Toolbox(functions=tools)


@pytest.mark.parametrize("sync_client", [False, True], ids=["async-client", "sync-client"])
@pytest.mark.parametrize("stateless", [False, True], ids=["chained", "stateless"])
async def test_function_calls_errors_and_answer(sync_client: bool, stateless: bool) -> None:
    run = await run_loop(
        [
            [reasoning(["think"]),
             function_call("weather", {"city": "Paris"}),
             function_call("weather", "{not json"),
             function_call("nope", {}),
             function_call("broken", {"city": "Oslo"}),
             custom_tool_call("shout", "hello")],
            [message("It is 22 °C in Paris.")],
        ],
        weather_tools(), sync_client=sync_client, stateless=stateless,
        required_tools=["function:weather", "custom:shout"],
    )
    assert run.result.exit_code is ExitCode.ANSWERED and run.result.reason == "answered"
    assert run.result.final_text == "It is 22 °C in Paris."
    outputs = run.outputs(1)
    calls = [i for i in run.server.responses[0]["output"] if "call_id" in i]
    assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]  # call order
    assert json.loads(outputs[0]["output"]) == {"city": "Paris", "temp_c": 22}
    assert outputs[1]["output"].startswith("error: arguments are not valid JSON")
    assert "unknown tool 'nope'" in outputs[2]["output"] and "weather" in outputs[2]["output"]
    assert outputs[3]["output"] == "internal error (ValueError): no station in Oslo"
    assert outputs[4] == {"type": "custom_tool_call_output", "call_id": calls[4]["call_id"],
                          "output": "HELLO"}
    assert all("id" not in o for o in outputs)  # never set id on outputs we create
    second = run.requests[1]
    if stateless:
        assert second["store"] is False and second["include"] == ["reasoning.encrypted_content"]
        assert "previous_response_id" not in second
        # the user message, every output item of the first response in order, then outputs
        replayed = second["input"][1:1 + len(run.server.responses[0]["output"])]
        assert [i["id"] for i in replayed] == [i["id"] for i in run.server.responses[0]["output"]]
        assert replayed[0]["encrypted_content"] == run.server.responses[0]["output"][0][
            "encrypted_content"]
    else:
        assert second["previous_response_id"] == run.server.responses[0]["id"]
        assert second["input"] == outputs  # only the new items


async def test_tools_instructions_and_tool_choice_on_every_request() -> None:
    choice = {"type": "allowed_tools", "mode": "auto",
              "tools": [{"type": "function", "name": "weather"}]}
    turns: list[Any] = [[function_call("weather", {"city": str(i)})] for i in range(3)]
    run = await run_loop([*turns, [message("done")]], weather_tools(), tool_choice=choice,
                         instructions="be brief")
    assert run.result.exit_code is ExitCode.ANSWERED
    first = run.requests[0]
    for request in run.requests:
        assert request["tools"] == first["tools"]  # byte-stable tool list (prompt cache)
        assert request["tool_choice"] == choice
        assert request["instructions"] == "be brief"


@pytest.mark.parametrize("stateless", [False, True], ids=["chained", "stateless"])
async def test_twenty_turn_session(stateless: bool) -> None:
    seen: list[str] = []
    turns: list[Any] = [[function_call("weather", {"city": f"c{i}"})] for i in range(19)]
    run = await run_loop([*turns, [message("twenty")]], weather_tools(seen), stateless=stateless)
    assert run.result.exit_code is ExitCode.ANSWERED and len(run.result.turns) == 20
    assert seen == [f"c{i}" for i in range(19)]
    assert len(run.requests) == 20
    if stateless:  # the last request replays all 19 calls and their 19 outputs
        kinds = [i.get("type") for i in run.requests[-1]["input"]]
        assert kinds.count("function_call") == 19 and kinds.count("function_call_output") == 19


async def test_programmatic_calls_echo_caller_and_replay_program_unchanged() -> None:
    prog = program("await tools.weather({city: 'Rome'})")
    prog["id"], prog["call_id"] = "prog_1", "call_prog_1"
    caller = {"type": "program", "caller_id": "call_prog_1"}
    run = await run_loop(
        [[prog, function_call("weather", {"city": "Rome"}, caller=caller),
          custom_tool_call("shout", "x", caller=caller)],
         [message("ok")]],
        weather_tools(), stateless=True)
    assert run.result.exit_code is ExitCode.ANSWERED
    outputs = run.outputs(1)
    assert [o["caller"] for o in outputs] == [caller, caller]
    sent_program = next(i for i in run.requests[1]["input"] if i.get("type") == "program")
    assert sent_program == run.server.responses[0]["output"][0]  # fingerprint round-trips


async def test_created_by_is_stripped_on_stateless_replay() -> None:
    # A hosted shell call answered by the server in the same response: nothing to execute,
    # and both items carry output-only created_by fields (also inside each output chunk).
    hosted = shell_call(["ls"], environment={"type": "container_reference", "container_id": "c"},
                        call_id="call_h", created_by="server")
    hosted_out = {"type": "shell_call_output", "id": "sho_1", "call_id": "call_h",
                  "status": "completed", "created_by": "server",
                  "output": [{"stdout": "a\n", "stderr": "", "created_by": "server",
                              "outcome": {"type": "exit", "exit_code": 0}}]}
    server_search = tool_search_call({"query": "x"}, execution="server")
    run = await run_loop(
        [[hosted, hosted_out, server_search, function_call("weather", {"city": "Lima"})],
         [message("ok")]],
        weather_tools(), stateless=True)
    assert run.result.exit_code is ExitCode.ANSWERED
    replay = run.requests[1]["input"]
    text = json.dumps(replay)
    assert "created_by" not in text
    assert [o["type"] for o in run.outputs(1)] == ["shell_call_output", "function_call_output"]
    assert run.outputs(1)[0]["id"] == "sho_1"  # the server's own output, replayed
    assert len(run.result.turns[0].calls) == 1  # only the function call was executed


async def test_handler_deadline_still_answers_in_call_order() -> None:
    async def slow(city: str) -> str:
        await asyncio.sleep(30)
        return "never"

    tools = FunctionTools()
    tools.add(FunctionTool("slow", slow, parameters=CITY))
    tools.add(FunctionTool("fast", lambda city: "fast " + city, parameters=CITY))
    toolbox = Toolbox(functions=tools, call_timeout_s=0.2)
    run = await run_loop([[function_call("slow", {"city": "a"}), function_call("fast",
                                                                               {"city": "b"})],
                          [message("ok")]], toolbox)
    first, second = run.outputs(1)
    assert first["output"] == "timed out: the call ran past its 0.2 s deadline"
    assert second["output"] == "fast b"


async def test_waiting_for_a_shared_resource_counts_against_the_deadline() -> None:
    release = asyncio.Event()

    async def hold(city: str) -> str:
        await release.wait()  # holds the browser until the test lets go: past any deadline
        return "held"

    tools = FunctionTools()
    tools.add(FunctionTool("hold", hold, parameters=CITY, resource=("browser",)))
    tools.add(FunctionTool("page", lambda city: "page " + city, parameters=CITY, resource=("browser",)))
    run = await run_loop([[function_call("hold", {"city": "a"}), function_call("page", {"city": "b"})],
                          [message("ok")]], Toolbox(functions=tools, call_timeout_s=0.3))
    release.set()
    first, second = run.outputs(1)
    # The second call never got the browser: it times out on its own deadline, not the first's.
    assert first["output"] == second["output"] == "timed out: the call ran past its 0.3 s deadline"


async def test_calls_run_concurrently_but_shared_resources_in_order() -> None:
    barrier = asyncio.Barrier(3)
    log: list[str] = []

    async def meet(city: str) -> str:
        # Only passes if all three calls run at the same time.
        async with asyncio.timeout(5):
            await barrier.wait()
        return "met"

    async def ordered(city: str) -> str:
        log.append(f"start {city}")
        await asyncio.sleep(0.01)
        log.append(f"end {city}")
        return city

    tools = FunctionTools()
    tools.add(FunctionTool("meet", meet, parameters=CITY))
    tools.add(FunctionTool("page", ordered, parameters=CITY, resource=("browser",)))
    run = await run_loop(
        [[function_call("meet", {"city": str(i)}) for i in range(3)]
         + [function_call("page", {"city": str(i)}) for i in range(3)],
         [message("ok")]], Toolbox(functions=tools))
    assert [o["output"] for o in run.outputs(1)] == ["met"] * 3 + ["0", "1", "2"]
    assert log == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]


async def test_unavailable_backends_answer_not_enabled() -> None:
    from executor.testing import apply_patch_call, computer_call, tool_search_call, update_file

    run = await run_loop(
        [[shell_call(["ls"]), apply_patch_call(update_file("a.py", "-a\n+b\n")),
          computer_call([{"type": "screenshot"}]), tool_search_call({"query": "crm"})],
         [message("ok")]], Toolbox())
    shell, patch, computer, search = run.outputs(1)
    assert "not enabled" in shell["output"][0]["stderr"]
    assert patch["status"] == "failed" and "not enabled" in patch["output"]
    assert computer["output"]["image_url"].startswith("data:image/png;base64,")
    assert search["tools"] == []


def test_run_sync_wrapper_with_the_sync_client() -> None:
    import openai

    from executor.loop import LoopConfig, run_sync
    from executor.testing import FakeResponsesServer, ScriptedModel

    model = ScriptedModel([[function_call("weather", {"city": "Kyiv"})], [message("sync ok")]])
    with FakeResponsesServer(model) as server, openai.OpenAI(
            base_url=server.base_url, api_key="k", max_retries=0) as client:
        result = run_sync(client, "weather?", LoopConfig(model="m"), weather_tools())
        assert server.rejections == []
    assert (result.final_text, result.exit_code) == ("sync ok", ExitCode.ANSWERED)
    assert result.turns[0].calls[0].outcome == '{"city": "Kyiv", "temp_c": 22}'


async def test_a_call_the_run_does_not_offer_is_an_audited_refusal(tmp_path: Path) -> None:
    from executor.approvals import DenyAll
    from executor.policy_gate import PolicyGate
    from executor.testing import apply_patch_call, create_file
    from policies.audit import AuditLog, verify
    from policies.engine import load_policy

    # A gate but no sandbox: neither the shell nor apply_patch is offered, and the model calls both.
    shown: list[dict[str, Any]] = []  # what the run's progress is told
    gate = PolicyGate(load_policy("default"), DenyAll(), AuditLog(tmp_path / "audit.jsonl"),
                      on_event=lambda kind, data: shown.append(data))
    run = await run_loop(
        [[shell_call(["rm -rf ."], call_id="c_sh"),
          apply_patch_call(create_file(".git/hooks/pre-commit", "+x\n"), call_id="c_ap")],
         [message("ok")]], Toolbox(gate=gate))
    shell, patch = run.outputs(1)
    assert "not enabled" in shell["output"][0]["stderr"] and patch["status"] == "failed"
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["call_id"], r["action"], r["decision"], r["rule_id"]) for r in records] == [
        ("c_sh", "shell_call", "deny", "tools.not_enabled"),
        ("c_ap", "apply_patch_call", "deny", "tools.not_enabled")]
    assert records[1]["subject"] == "create_file .git/hooks/pre-commit"
    assert [(d["decision"], d["rule_id"]) for d in shown] == [("deny", "tools.not_enabled")] * 2
    assert verify(tmp_path / "audit.jsonl") == []
