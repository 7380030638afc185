"""custom_tool_call → custom_tool_call_output: the application's free-form (text or grammar)
tools, and sandloop's own ``apply_patch`` custom tool (the multi-file envelope format).

A custom tool's callable gets the raw ``input`` text. When the run offers the patch tool as a
custom tool (``patch_tool="custom"``) and the application defines no tool of that name, a call
to ``apply_patch`` is a patch, applied through the session like an ``apply_patch_call``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from openai.types.responses import ResponseCustomToolCall

from executor.gate import Gate
from executor.handlers.apply_patch import (
    APPLY_PATCH_CUSTOM_TOOL,
    envelope_resources,
    gate_allow,
    gate_outcomes,
    gate_refused,
    handle_apply_patch_custom_call,
)
from executor.handlers.function import append_note, gate_refusal, invoke, lookup, output_value
from executor.items import Output, ResourceKey, echo_caller
from executor.kinds import ToolKind
from executor.tools import FunctionTools

__all__ = ["CustomToolCallKind", "handle_custom_tool_call"]


def _output(call_id: str, value: Any) -> Output:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": value}


async def handle_custom_tool_call(call: ResponseCustomToolCall, tools: FunctionTools, gate: Gate | None,
                                  *, loaded: FunctionTools | None = None) -> Output:
    """Run one custom_tool_call: the callable gets the raw ``input`` text."""
    tool = lookup(call.name, call.namespace, tools, "custom", loaded)
    if isinstance(tool, str):
        return _output(call.call_id, tool)
    refusal = await gate_refusal(tool, gate, call.call_id)
    if refusal is not None:
        return _output(call.call_id, refusal)
    return _output(call.call_id, output_value(await invoke(tool, call.input)))


class CustomToolCallKind(ToolKind[ResponseCustomToolCall]):
    call_type = "custom_tool_call"
    output_type = "custom_tool_call_output"
    model = ResponseCustomToolCall

    def _is_patch(self, name: str) -> bool:
        tb = self.toolbox
        return (tb.patch_tool == "custom" and name == APPLY_PATCH_CUSTOM_TOOL["name"]
                and tb.functions.get(name) is None)

    def summary(self, item: dict[str, Any]) -> str:
        return f"{item.get('name')}<{str(item.get('input', ''))[:80]!r}>"

    def tool_params(self) -> list[dict[str, Any]]:
        # The application's custom tools are listed with its functions (one registry).
        if self.toolbox.session is not None and self._is_patch(str(APPLY_PATCH_CUSTOM_TOOL["name"])):
            return [dict(APPLY_PATCH_CUSTOM_TOOL)]
        return []

    def unavailable(self, call: ResponseCustomToolCall) -> str | None:
        if self._is_patch(call.name):
            return self.toolbox.unavailable("the apply_patch custom tool", "session", "gate")
        return None

    def resources(self, call: ResponseCustomToolCall) -> Sequence[ResourceKey]:
        if self._is_patch(call.name):
            return envelope_resources(call.input)
        tool = self.toolbox.functions.get(call.name, call.namespace)
        return [tool.resource] if tool is not None and tool.resource is not None else []

    def in_background(self, call: ResponseCustomToolCall) -> bool:
        return bool(call.async_)

    async def handle(self, call: ResponseCustomToolCall) -> Output:
        tb = self.toolbox
        if self._is_patch(call.name):
            assert tb.session is not None  # unavailable() said so
            out = await handle_apply_patch_custom_call(
                call, tb.session, allow=gate_allow(tb.gate, call.call_id, len(call.input.encode("utf-8"))),
                on_applied=gate_outcomes(tb.gate, call.call_id), refused=gate_refused(tb.gate, call.call_id),
                read_only_globs=tb.patch_read_only_globs, dry_run=tb.patch_dry_run)
            return dict(out)
        loaded = tb.catalog.loaded if tb.catalog is not None else None
        return await handle_custom_tool_call(call, tb.functions, tb.gate, loaded=loaded)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        return echo_caller(item, _output(self.call_id(item), text))

    def with_note(self, output: Output, note: str) -> Output | None:
        return append_note(output, note)
