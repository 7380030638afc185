"""Shared request material for the fake server's tests: tools, answers, rejection cases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from executor.testing import (
    apply_patch_call,
    computer_call,
    custom_tool_call,
    function_call,
    local_shell_call,
    message,
    reasoning,
    shell_call,
    tool_search_call,
    update_file,
)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_weather", "description": "Weather for a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"], "additionalProperties": False}, "strict": True},
    {"type": "custom", "name": "code_exec", "description": "Run code."},
    {"type": "shell", "environment": {"type": "local"}},
    {"type": "local_shell"},
    {"type": "apply_patch"},
    {"type": "computer"},
    {"type": "tool_search", "execution": "client", "description": "Search the catalog.",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                    "required": ["query"], "additionalProperties": False}},
    {"type": "mcp", "server_label": "docs", "server_url": "http://127.0.0.1:9/mcp",
     "require_approval": "always"},
]

USER = {"role": "user", "content": "do the task"}
SCREENSHOT = "data:image/png;base64,iVBORw0KGgo="

# One call of every client-executed type, with the call_id "call_A".
CALLS: dict[str, Callable[[], dict[str, Any]]] = {
    "function call": lambda: function_call("get_weather", {"city": "Paris"}, call_id="call_A"),
    "custom tool call": lambda: custom_tool_call("code_exec", "print(1)", call_id="call_A"),
    "shell call": lambda: shell_call(["ls"], call_id="call_A"),
    "local shell call": lambda: local_shell_call(["ls"], call_id="call_A"),
    "apply patch call": lambda: apply_patch_call(update_file("a.py", "-a\n+b\n"),
                                                 call_id="call_A"),
    "computer call": lambda: computer_call([{"type": "screenshot"}], call_id="call_A"),
    "tool search call": lambda: tool_search_call({"query": "crm"}, call_id="call_A"),
}


def fco(call_id: str, output: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output, **extra}


def shell_out(call_id: str) -> dict[str, Any]:
    return {"type": "shell_call_output", "call_id": call_id, "output": [
        {"stdout": "a\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}


Body = dict[str, Any]


@dataclass
class Rejection:
    """A scenario, an optional accepted first request, and the request that must fail."""

    name: str
    expected: str  # the exact `error.message`
    bad: Callable[[dict[str, Any]], Body]  # built from the first response's JSON ({} if none)
    first: Body | None = None
    turns: list[Any] = field(default_factory=lambda: [[message("unused")]])
    model_kw: dict[str, Any] = field(default_factory=dict)
    param: str | None = "input"


def _base(**body: Any) -> Body:
    return {"model": "gpt-test", "tools": TOOLS, **body}


def _chain(*items: Any, **body: Any) -> Callable[[dict[str, Any]], Body]:
    def build(first: dict[str, Any]) -> Body:
        return _base(previous_response_id=first["id"], input=list(items), **body)
    return build


def _stateless(build_input: Callable[[list[dict[str, Any]]], list[Any]]
               ) -> Callable[[dict[str, Any]], Body]:
    def build(first: dict[str, Any]) -> Body:
        return _base(store=False, include=["reasoning.encrypted_content"],
                     input=build_input(first["output"]))
    return build


def _alone(**body: Any) -> Callable[[dict[str, Any]], Body]:
    return lambda _first: _base(**body)


STATELESS_FIRST = _base(input=[USER], store=False, include=["reasoning.encrypted_content"])
WITH_REASONING = [[reasoning(["plan"]), function_call("get_weather", {"city": "Oslo"},
                                                       call_id="call_R")], [message("x")]]


def _strip(item: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in keys}


REJECTIONS: list[Rejection] = [
    *(
        Rejection(f"unanswered {noun}", f"No tool output found for {noun} call_A.",
                  _chain({"role": "user", "content": "go on"}), first=_base(input=[USER]),
                  turns=[[make()], [message("x")]])
        for noun, make in CALLS.items()
    ),
    Rejection("output without its call",
              "No tool call found for function call output with call_id call_X.",
              _alone(input=[USER, fco("call_X")])),
    Rejection("output of the wrong type for its call",
              "No tool call found for shell call output with call_id call_A.",
              _chain(shell_out("call_A")), first=_base(input=[USER]),
              turns=[[CALLS["function call"]()], [message("x")]]),
    Rejection("unknown previous_response_id", "Previous response with id 'resp_nope' not found.",
              _alone(previous_response_id="resp_nope", input=[USER]),
              param="previous_response_id"),
    Rejection("previous_response_id with conversation",
              "Mutually exclusive parameters: Ensure you are only providing one of: "
              "'previous_response_id' or 'conversation'.",
              _alone(previous_response_id="resp_x", conversation="conv_1", input=[USER]),
              param=None),
    Rejection("store:false replay of reasoning by id",
              "Item with id 'rs_0001' not found. Items are not persisted when `store` is set"
              " to false. Try again with `store` set to true, or remove this item from your"
              " input.",
              _stateless(lambda out: [USER, {"type": "reasoning", "id": out[0]["id"],
                                             "summary": []},
                                      _strip(out[1], "created_by"), fco("call_R")]),
              first=STATELESS_FIRST, turns=WITH_REASONING),
    Rejection("stateless replay without the call",
              "No tool call found for function call output with call_id call_R.",
              _stateless(lambda out: [USER, fco("call_R")]),
              first=STATELESS_FIRST, turns=WITH_REASONING),
    Rejection("stateless replay without the reasoning item",
              "Item 'fc_0002' of type 'function_call' was provided without its required"
              " 'reasoning' item: 'rs_0001'.",
              _stateless(lambda out: [USER, out[1], fco("call_R")]),
              first=STATELESS_FIRST, turns=WITH_REASONING),
    Rejection("stateless replay with altered encrypted content",
              "The encrypted content for item rs_0001 could not be verified.",
              _stateless(lambda out: [USER, {**out[0], "encrypted_content": "gAAAAforged"},
                                      out[1], fco("call_R")]),
              first=STATELESS_FIRST, turns=WITH_REASONING),
    Rejection("mcp_approval_response for an unknown request",
              "No MCP approval request found for mcp_approval_response with"
              " approval_request_id mcpr_nope.",
              _alone(input=[USER, {"type": "mcp_approval_response",
                                   "approval_request_id": "mcpr_nope", "approve": True}])),
    Rejection("output id set to its call's item id",
              "No tool output found for function call call_A.",
              lambda first: _chain(fco("call_A", id=first["output"][0]["id"]))(first),
              first=_base(input=[USER]), turns=[[CALLS["function call"]()], [message("x")]]),
    Rejection("an item sent again on a chain", "Duplicate item found with id fc_0001. Remove"
              " duplicate items from your input and try again.",
              lambda first: _chain(*first["output"], fco("call_A"))(first),
              first=_base(input=[USER]), turns=[[CALLS["function call"]()], [message("x")]]),
    Rejection("unknown field on an output", "Unknown parameter: 'input[1].exit_code'.",
              _alone(input=[USER, {**fco("call_A"), "exit_code": 0}]),
              param="input[1].exit_code"),
    Rejection("output without call_id on shell output",
              "Missing required parameter: 'input[1].call_id'.",
              _alone(input=[USER, _strip(shell_out("c"), "call_id")]),
              param="input[1].call_id"),
    Rejection("bad outcome in shell output",
              "Missing required parameter: 'input[1].output[0].outcome.exit_code'.",
              _alone(input=[USER, {"type": "shell_call_output", "call_id": "c", "output": [
                  {"stdout": "", "stderr": "", "outcome": {"type": "exit"}}]}]),
              param="input[1].output[0].outcome.exit_code"),
    Rejection("unknown item type", "Invalid value: 'shell_output'. Supported values are: "
              "'additional_tools', 'apply_patch_call', 'apply_patch_call_output', "
              "'code_interpreter_call', 'compaction', 'compaction_trigger', 'computer_call', "
              "'computer_call_output', 'configuration_update', 'custom_tool_call', "
              "'custom_tool_call_output', 'file_search_call', 'function_call', "
              "'function_call_output', 'image_generation_call', 'item_reference', "
              "'local_shell_call', 'local_shell_call_output', 'mcp_approval_request', "
              "'mcp_approval_response', 'mcp_call', 'mcp_list_tools', 'message', 'program', "
              "'program_output', 'reasoning', 'shell_call', 'shell_call_output', "
              "'tool_search_call', 'tool_search_output', 'web_search_call'.",
              _alone(input=[USER, {"type": "shell_output", "call_id": "c"}]),
              param="input[1].type"),
    Rejection("local_shell_call_output with call_id (switch off)",
              "Missing required parameter: 'input[1].id'.",
              _alone(input=[USER, {"type": "local_shell_call_output", "call_id": "call_A",
                                   "output": "a"}]),
              param="input[1].id"),
    Rejection("replayed call with a null field the SDK types as a string",
              "Invalid type for 'input[1].namespace': expected a string, but got null instead.",
              _alone(input=[USER, {**CALLS["function call"](), "id": "fc_1",
                                   "namespace": None}, fco("call_A")]),
              param="input[1].namespace"),
    Rejection("function_call_output with an object as output",
              "Invalid type for 'input[1].output': expected a string, but got an object"
              " instead.",
              _alone(input=[USER, {"type": "function_call_output", "call_id": "c",
                                   "output": {"temp": 1}}]),
              param="input[1].output"),
    Rejection("tools dropped on a later turn",
              "Tool 'shell' is missing from `tools`; the scenario requires it on every request"
              " (tools are not inherited through previous_response_id).",
              lambda first: {"model": "gpt-test", "previous_response_id": first["id"],
                             "input": [{"role": "user", "content": "more"}]},
              first=_base(input=[USER]), turns=[[message("a")], [message("b")]],
              model_kw={"required_tools": ("shell",)}, param="tools"),
    Rejection("missing model", "Missing required parameter: 'model'.",
              lambda _first: {"model": "", "input": "hi"}, param="model"),
]
