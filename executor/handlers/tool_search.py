"""tool_search_call with ``execution: "client"`` → tool_search_output from the run's catalog.

The search finds function tools in the catalog (:class:`~executor.catalog.ToolCatalog`) that are
not in ``tools`` yet; they are sent back grouped into namespaces and become callable. A search
that fails is answered with an empty result: the output type has no failed status.
"""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import ResponseToolSearchCall

from executor.catalog import ToolCatalog
from executor.items import Output, echo_caller
from executor.kinds import ToolKind

__all__ = ["ToolSearchCallKind", "handle_tool_search_call"]


def _output(call_id: str, tools: list[dict[str, Any]]) -> Output:
    return {"type": "tool_search_output", "call_id": call_id, "execution": "client",
            "status": "completed", "tools": tools}


async def handle_tool_search_call(call: ResponseToolSearchCall, catalog: ToolCatalog) -> Output:
    arguments = call.arguments
    found = await catalog.search(arguments if isinstance(arguments, dict) else {})
    return _output(str(call.call_id), catalog.to_tool_params(found))


class ToolSearchCallKind(ToolKind[ResponseToolSearchCall]):
    call_type = "tool_search_call"
    output_type = "tool_search_output"
    model = ResponseToolSearchCall

    def actionable(self, item: dict[str, Any]) -> bool:
        # A server-side search (or one without a call_id) is answered by the server.
        return item.get("execution") == "client" and bool(item.get("call_id"))

    def summary(self, item: dict[str, Any]) -> str:
        return json.dumps(item.get("arguments"))[:120]

    def tool_params(self) -> list[dict[str, Any]]:
        catalog = self.toolbox.catalog
        return [catalog.tool_param()] if catalog is not None else []

    def unavailable(self, call: ResponseToolSearchCall) -> str | None:
        return self.toolbox.unavailable("client tool search", "catalog")

    async def handle(self, call: ResponseToolSearchCall) -> Output:
        assert self.toolbox.catalog is not None  # unavailable() said so
        return await handle_tool_search_call(call, self.toolbox.catalog)

    def error_output(self, item: dict[str, Any], text: str) -> Output:
        # No failed status exists for this output: an empty result is the honest answer.
        return echo_caller(item, _output(self.call_id(item), []))

    def outcome(self, output: Output) -> tuple[bool, str]:
        return True, f"{len(output.get('tools') or [])} tool group(s)"
