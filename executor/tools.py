"""Function and custom tools: what the model is told (the definition sent in ``tools``) and
the Python callable that runs each call, plus the strict-mode schema check that catches a bad
definition before the first request instead of as a 400 mid-run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from sandloop.errors import ToolSchemaError

__all__ = ["FunctionTool", "FunctionTools", "check_strict_schema"]


@dataclass
class FunctionTool:
    """One function (or custom) tool: what the model is told, and what runs."""

    name: str
    fn: Callable[..., Any]
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool = True
    kind: Literal["function", "custom"] = "function"
    format: dict[str, Any] | None = None  # custom tools: {"type":"text"} or a grammar
    is_async: bool = False  # sent as "async": true; runs in the background
    namespace: str | None = None
    #: a back-end resource the tool touches, e.g. ("browser",): calls sharing one run in order.
    resource: tuple[str, ...] | None = None
    #: ask the gate (policy) before running; built-ins such as ``wait`` opt out.
    gated: bool = True

    def to_param(self) -> dict[str, Any]:
        if self.kind == "custom":
            param: dict[str, Any] = {"type": "custom", "name": self.name}
            if self.description:
                param["description"] = self.description
            if self.format is not None:
                param["format"] = self.format
        else:
            param = {
                "type": "function",
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters
                or {"type": "object", "properties": {}, "required": [],
                    "additionalProperties": False},
                "strict": self.strict,
            }
        if self.is_async:
            param["async"] = True
        return param


@dataclass
class FunctionTools:
    """The name → tool map the function handlers look calls up in."""

    tools: dict[tuple[str | None, str], FunctionTool] = field(default_factory=dict)

    def add(self, tool: FunctionTool) -> FunctionTool:
        key = (tool.namespace, tool.name)
        if key in self.tools:
            raise ValueError(f"duplicate tool name {tool.name!r}")
        self.tools[key] = tool
        return tool

    def extend(self, tools: Iterable[FunctionTool]) -> None:
        for tool in tools:
            self.add(tool)

    def get(self, name: str, namespace: str | None = None) -> FunctionTool | None:
        return self.tools.get((namespace, name))

    def __iter__(self) -> Iterator[FunctionTool]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)

    def check_schemas(self) -> None:
        for tool in self:
            if tool.kind == "function" and tool.strict and tool.parameters is not None:
                check_strict_schema(tool.name, tool.parameters)


# -- strict-mode schema check ------------------------------------------------------------

_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("$defs", "definitions")


def _nullable(schema: dict[str, Any]) -> bool:
    t = schema.get("type")
    if t == "null" or (isinstance(t, list) and "null" in t):
        return True
    return any(isinstance(s, dict) and _nullable(s) for s in schema.get("anyOf", []))


def _check(tool: str, schema: Any, path: str) -> None:
    if not isinstance(schema, dict):
        return
    t = schema.get("type")
    is_object = t == "object" or (isinstance(t, list) and "object" in t) or "properties" in schema
    if is_object:
        if schema.get("additionalProperties") is not False:
            raise ToolSchemaError(
                f"Invalid schema for function {tool!r}: at {path}: 'additionalProperties' is "
                "required to be supplied and to be false (strict mode)")
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        missing = [name for name in props if name not in required]
        if missing:
            raise ToolSchemaError(
                f"Invalid schema for function {tool!r}: at {path}: every property must be "
                f"listed in 'required' (strict mode); missing {missing}. Make optional "
                "fields required and nullable, e.g. \"type\": [\"string\", \"null\"]")
        for name, sub in props.items():
            _check(tool, sub, f"{path}.properties.{name}")
    if "items" in schema:
        _check(tool, schema["items"], f"{path}.items")
    for key in _SUBSCHEMA_LISTS:
        for i, sub in enumerate(schema.get(key) or []):
            _check(tool, sub, f"{path}.{key}[{i}]")
    for key in _SUBSCHEMA_MAPS:
        for name, sub in (schema.get(key) or {}).items():
            _check(tool, sub, f"{path}.{key}.{name}")


def check_strict_schema(tool: str, parameters: dict[str, Any]) -> None:
    """Raise :class:`ToolSchemaError` naming the tool and the JSON path of the first breach of
    the strict-mode rules — the check the API would otherwise make with a 400 mid-run."""
    if parameters.get("type") != "object":
        raise ToolSchemaError(
            f"Invalid schema for function {tool!r}: at $: the root must be \"type\": \"object\"")
    _check(tool, parameters, "$")
