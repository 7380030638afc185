"""function_call and custom_tool_call: user tools, async tools, the built-in ``wait``, and the
strict-mode schema check.

A tool is a :class:`FunctionTool`: its definition (sent in ``tools``) and the Python callable
that runs it (sync callables go to a thread so they never block the loop). Whatever goes
wrong — arguments that are not JSON, an unknown tool, a policy refusal, an exception — the
model gets a readable string, never a missing output.

Async tools (``async: true``, protocol.md A.9) start as background tasks; the loop carries on
and sends their outputs, with the original call_id, in a later request. The built-in ``wait``
tool lets the model block on those task handles (the call_ids).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from executor.gate import Gate
from executor.handlers import Output, echo_caller, error_output
from sandloop.errors import ToolSchemaError, describe

__all__ = [
    "WAIT_TOOL_NAME",
    "AsyncTasks",
    "FunctionTool",
    "FunctionTools",
    "check_strict_schema",
    "handle_custom_tool_call",
    "handle_function_call",
]

WAIT_TOOL_NAME = "wait"


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


# -- running calls ------------------------------------------------------------------------


async def _invoke(tool: FunctionTool, *args: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(tool.fn):
        return await tool.fn(*args, **kwargs)
    result = await asyncio.to_thread(tool.fn, *args, **kwargs)
    if inspect.isawaitable(result):
        return await result
    return result


def _to_output_value(value: Any) -> Any:
    """Strings pass through; a list of input_text/input_image parts is sent as content;
    anything else is JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(
        isinstance(p, dict) and str(p.get("type", "")).startswith("input_") for p in value
    ):
        return value
    return json.dumps(value, default=str)


async def _gate_refusal(tool: FunctionTool, gate: Gate | None, call_id: str) -> str | None:
    if gate is None or not tool.gated:
        return None
    verdict = await gate.function(tool.name, call_id=call_id)
    if verdict.allowed:
        return None
    return f"denied by policy: {verdict.justification}"


def _lookup(
    item: dict[str, Any], tools: FunctionTools, kind: str, extra: FunctionTools | None
) -> FunctionTool | str:
    name, namespace = item.get("name", ""), item.get("namespace")
    tool = tools.get(name, namespace) or (extra.get(name, namespace) if extra else None)
    if tool is None or tool.kind != kind:
        known = sorted(t.name for t in tools if t.kind == kind)
        return f"error: unknown tool {name!r}; available: {', '.join(known) or 'none'}"
    return tool


async def handle_function_call(
    item: dict[str, Any],
    tools: FunctionTools,
    gate: Gate | None,
    *,
    loaded: FunctionTools | None = None,
) -> Output:
    """Run one function_call; any failure becomes the output text."""
    tool = _lookup(item, tools, "function", loaded)
    if isinstance(tool, str):
        return error_output(item, tool)
    try:
        args = json.loads(item.get("arguments") or "{}")
    except json.JSONDecodeError as exc:
        return error_output(item, f"error: arguments are not valid JSON ({exc.msg} at "
                                  f"position {exc.pos}); send a JSON object")
    if not isinstance(args, dict):
        return error_output(item, "error: arguments must be a JSON object")
    refusal = await _gate_refusal(tool, gate, item["call_id"])
    if refusal is not None:
        return error_output(item, refusal)
    value = await _invoke(tool, **args)
    out: Output = {"type": "function_call_output", "call_id": item["call_id"],
                   "output": _to_output_value(value)}
    return echo_caller(item, out)


async def handle_custom_tool_call(
    item: dict[str, Any],
    tools: FunctionTools,
    gate: Gate | None,
    *,
    loaded: FunctionTools | None = None,
) -> Output:
    """Run one custom_tool_call: the callable gets the raw ``input`` text."""
    tool = _lookup(item, tools, "custom", loaded)
    if isinstance(tool, str):
        return error_output(item, tool)
    refusal = await _gate_refusal(tool, gate, item["call_id"])
    if refusal is not None:
        return error_output(item, refusal)
    value = await _invoke(tool, item.get("input", ""))
    out: Output = {"type": "custom_tool_call_output", "call_id": item["call_id"],
                   "output": _to_output_value(value)}
    return echo_caller(item, out)


# -- async tools --------------------------------------------------------------------------


class AsyncTasks:
    """Background runs of ``async: true`` calls, keyed by call_id (the model's task handle)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Output]] = {}
        self._items: dict[str, dict[str, Any]] = {}
        self._delivered: set[str] = set()

    def start(self, item: dict[str, Any], run: Callable[[], Any]) -> None:
        call_id = item["call_id"]

        async def guarded() -> Output:
            try:
                result: Output = await run()
                return result
            except Exception as exc:  # the call is answered even when the tool raises
                return error_output(item, describe(exc))

        self._items[call_id] = item
        self._tasks[call_id] = asyncio.create_task(guarded(), name=f"async-tool-{call_id}")

    @property
    def pending(self) -> list[str]:
        return [cid for cid, task in self._tasks.items() if not task.done()]

    def __len__(self) -> int:
        return len(self._tasks)

    def take_ready(self) -> list[Output]:
        """Outputs of tasks that finished since the last call, in start order."""
        ready = []
        for cid, task in list(self._tasks.items()):
            if task.done():
                ready.append(task.result())
                del self._tasks[cid]
                self._delivered.add(cid)
        return ready

    async def wait(self, handles: Sequence[str] | None, timeout_s: float | None) -> dict[str, str]:
        """Block until the given tasks (all pending ones when None) finish or the timeout."""
        wanted = list(handles) if handles else list(self._tasks)
        tasks = [self._tasks[h] for h in wanted if h in self._tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        status = {}
        for h in wanted:
            if h in self._delivered:
                status[h] = "done (output already sent)"
            elif h not in self._tasks:
                status[h] = "unknown handle"
            else:
                status[h] = "done (output sent with this request)" if self._tasks[h].done() \
                    else "still running"
        return status

    async def wait_any(self, timeout_s: float | None) -> None:
        """Block until at least one pending task finishes (or the timeout)."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)

    async def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()

    def wait_tool(self) -> FunctionTool:
        """The built-in ``wait`` function tool bound to these tasks."""

        async def wait(handles: list[str] | None, timeout_s: float | None) -> str:
            return json.dumps(await self.wait(handles, timeout_s))

        return FunctionTool(
            name=WAIT_TOOL_NAME,
            fn=wait,
            description=(
                "Block until background (async) tool calls finish. handles: the call_ids to "
                "wait for, or null for all pending ones; timeout_s: seconds, or null for no "
                "limit. Finished results arrive as their own tool outputs."),
            parameters={
                "type": "object",
                "properties": {
                    "handles": {"type": ["array", "null"], "items": {"type": "string"}},
                    "timeout_s": {"type": ["number", "null"]},
                },
                "required": ["handles", "timeout_s"],
                "additionalProperties": False,
            },
            gated=False,
        )
