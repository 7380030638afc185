"""function_call → function_call_output: run the application's own Python callables.

A tool is a :class:`~executor.tools.FunctionTool` (sync callables go to a thread so they never
block the loop). Whatever goes wrong — arguments that are not JSON, an unknown tool, a policy
refusal, an exception — the model gets a readable string, never a missing output. Calls marked
``async: true`` run in the background (:mod:`executor.tasks`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Sequence
from typing import Any, Literal

from openai.types.responses import ResponseFunctionToolCall

from executor.gate import Gate
from executor.items import Output, ResourceKey, echo_caller
from executor.kinds import ToolKind
from executor.tools import FunctionTool, FunctionTools

__all__ = ["FunctionCallKind", "gate_refusal", "handle_function_call", "invoke", "lookup", "output_value"]


async def invoke(tool: FunctionTool, *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(tool.fn):
        return await tool.fn(*args, **kwargs)
    result = await asyncio.to_thread(tool.fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


def output_value(value: Any) -> Any:
    """Strings pass through; a list of input_text/input_image parts is sent as content;
    anything else is JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(
        isinstance(p, dict) and str(p.get("type", "")).startswith("input_") for p in value
    ):
        return value
    return json.dumps(value, default=str)


async def gate_refusal(tool: FunctionTool, gate: Gate | None, call_id: str) -> str | None:
    """The refusal text when the policy says no, else None (built-ins such as ``wait`` and a
    run without a gate are not asked)."""
    if gate is None or not tool.gated:
        return None
    verdict = await gate.function(tool.name, call_id=call_id)
    if verdict.allowed:
        return None
    rule = f" (rule {verdict.rule_id})" if verdict.rule_id else ""
    return f"denied by policy{rule}: {verdict.justification}"


def lookup(name: str, namespace: str | None, tools: FunctionTools, kind: Literal["function", "custom"],
           loaded: FunctionTools | None) -> FunctionTool | str:
    """The tool, or the error text naming the tools that exist."""
    tool = tools.get(name, namespace) or (loaded.get(name, namespace) if loaded else None)
    if tool is None or tool.kind != kind:
        known = sorted(t.name for t in tools if t.kind == kind)
        return f"error: unknown tool {name!r}; available: {', '.join(known) or 'none'}"
    return tool


def _output(call_id: str, value: Any) -> Output:
    return {"type": "function_call_output", "call_id": call_id, "output": value}


async def handle_function_call(call: ResponseFunctionToolCall, tools: FunctionTools, gate: Gate | None,
                               *, loaded: FunctionTools | None = None) -> Output:
    """Run one function_call; any failure becomes the output text."""
    tool = lookup(call.name, call.namespace, tools, "function", loaded)
    if isinstance(tool, str):
        return _output(call.call_id, tool)
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return _output(call.call_id, f"error: arguments are not valid JSON ({exc.msg} at "
                                     f"position {exc.pos}); send a JSON object")
    if not isinstance(args, dict):
        return _output(call.call_id, "error: arguments must be a JSON object")
    refusal = await gate_refusal(tool, gate, call.call_id)
    if refusal is not None:
        return _output(call.call_id, refusal)
    return _output(call.call_id, output_value(await invoke(tool, **args)))


def append_note(output: Output, note: str) -> Output | None:
    """A text output with ``note`` on a line of its own (None when the output is not text)."""
    text = output.get("output")
    if not isinstance(text, str):
        return None
    return {**output, "output": f"{text}\n{note}" if text else note}


class FunctionCallKind(ToolKind[ResponseFunctionToolCall]):
    call_type = "function_call"
    output_type = "function_call_output"
    model = ResponseFunctionToolCall

    def summary(self, item: dict[str, Any]) -> str:
        return f"{item.get('name')}({str(item.get('arguments', ''))[:80]})"

    def tool_params(self) -> list[dict[str, Any]]:
        # Custom tools live in the same registry as functions: one list, one order.
        return [tool.to_param() for tool in self.toolbox.functions]

    def _loaded(self) -> FunctionTools | None:
        catalog = self.toolbox.catalog
        return catalog.loaded if catalog is not None else None

    def resources(self, call: ResponseFunctionToolCall) -> Sequence[ResourceKey]:
        tool = self.toolbox.functions.get(call.name, call.namespace)
        return [tool.resource] if tool is not None and tool.resource is not None else []

    def in_background(self, call: ResponseFunctionToolCall) -> bool:
        return bool(call.async_)

    async def handle(self, call: ResponseFunctionToolCall) -> Output:
        return await handle_function_call(call, self.toolbox.functions, self.toolbox.gate,
                                          loaded=self._loaded())

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return echo_caller(item, _output(self.call_id(item), text))

    def with_note(self, output: Output, note: str) -> Output | None:
        return append_note(output, note)
