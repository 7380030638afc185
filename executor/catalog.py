"""Client-side tool search: deferred function tools the model finds by searching a catalog.

The catalog holds function tools that are *not* in ``tools``; a search returns the matching
ones (grouped into namespaces), which then become callable. Tools an earlier search loaded are
never re-sent: re-loading or changing a loaded set would break the prompt cache.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from executor.tools import FunctionTool, FunctionTools

__all__ = ["SearchFn", "ToolCatalog", "keyword_search"]

#: (arguments, catalog tools) → the matching tools, best first.
SearchFn = Callable[
    [dict[str, Any], Sequence[FunctionTool]],
    "Sequence[FunctionTool] | Awaitable[Sequence[FunctionTool]]",
]


def keyword_search(arguments: dict[str, Any], tools: Sequence[FunctionTool]) -> list[FunctionTool]:
    """Default search: tools whose name, namespace or description contains a query word."""
    words = [w.lower() for w in str(arguments.get("query", "")).split() if w]
    limit = arguments.get("limit")

    def score(tool: FunctionTool) -> int:
        text = f"{tool.namespace or ''} {tool.name} {tool.description}".lower().replace("_", " ")
        return sum(1 for w in words if w in text)

    ranked = sorted((t for t in tools if score(t) > 0), key=score, reverse=True)
    return ranked[: int(limit)] if isinstance(limit, int) and limit > 0 else ranked


class ToolCatalog:
    """Deferred tools the model can find with client-side tool search."""

    def __init__(
        self,
        tools: Sequence[FunctionTool],
        *,
        namespaces: dict[str, str] | None = None,
        search: SearchFn | None = None,
        description: str = "Search the tool catalog for tools that can help with the task.",
    ) -> None:
        self.tools = list(tools)
        self.namespaces = namespaces or {}
        self._search = search or keyword_search
        self.description = description
        #: what earlier searches loaded: these are callable and never re-sent.
        self.loaded = FunctionTools()

    def tool_param(self) -> dict[str, Any]:
        return {
            "type": "tool_search",
            "execution": "client",
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": ["integer", "null"]},
                },
                "required": ["query", "limit"],
                "additionalProperties": False,
            },
        }

    async def search(self, arguments: dict[str, Any]) -> list[FunctionTool]:
        found = self._search(arguments, self.tools)
        if inspect.isawaitable(found):
            found = await found
        fresh = [t for t in found if self.loaded.get(t.name, t.namespace) is None]
        for tool in fresh:
            self.loaded.add(tool)
        return fresh

    def to_tool_params(self, tools: Sequence[FunctionTool]) -> list[dict[str, Any]]:
        """Loose functions stay functions; namespaced ones are grouped, in first-seen order."""
        params: list[dict[str, Any]] = []
        groups: dict[str, dict[str, Any]] = {}
        for tool in tools:
            param = tool.to_param()
            if tool.namespace is None:
                params.append(param)
                continue
            group = groups.get(tool.namespace)
            if group is None:
                group = {"type": "namespace", "name": tool.namespace,
                         "description": self.namespaces.get(tool.namespace, tool.namespace),
                         "tools": []}
                groups[tool.namespace] = group
                params.append(group)
            group["tools"].append(param)
        return params
