"""A scripted stand-in for the model behind :class:`~executor.testing.FakeResponsesServer`.

A scenario is a list of turns, one per ``POST /v1/responses`` that reaches the model::

    model = ScriptedModel([
        [shell_call(["pytest -q"])],                      # turn 1: run the tests
        [apply_patch_call(update_file("app.py", diff))],  # turn 2: fix the code
        [message("Fixed.")],                              # turn 3: answer
    ])

Each turn is either

* a list of output items: plain dicts in the SDK's output shapes, best built with the
  helpers below (:func:`function_call`, :func:`shell_call`, :func:`message`, ...), which
  leave ``id``/``call_id``/``status`` for the model to fill;
* a :class:`Turn`, for a list of items plus a response status (``incomplete``, ``failed``)
  or fixed usage numbers; :func:`incomplete` and :func:`failed` build the common ones;
* a callable ``(request_body, history) -> items | Turn | dict`` for scripts that depend on
  what the client sent. ``history`` is the whole conversation the server resolved for the
  request (previous responses' inputs and outputs, then this request's input). A returned
  dict is used as the response (the model fills only the fields it lacks).

Every response the model produces validates against :class:`openai.types.responses.Response`.
When the scenario runs out, the server answers 500 ``scenario exhausted``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

__all__ = [
    "CALL_ITEM_PREFIXES",
    "ScenarioExhausted",
    "ScriptedModel",
    "Turn",
    "TurnFunction",
    "TurnSpec",
    "Usage",
    "apply_patch_call",
    "computer_call",
    "create_file",
    "custom_tool_call",
    "delete_file",
    "failed",
    "function_call",
    "incomplete",
    "local_shell_call",
    "mcp_approval_request",
    "message",
    "program",
    "reasoning",
    "shell_call",
    "tool_search_call",
    "update_file",
]

Item: TypeAlias = dict[str, Any]

#: Item-id prefixes the model uses when it fills ``id``, by item type (as the real API does).
CALL_ITEM_PREFIXES: Mapping[str, str] = {
    "function_call": "fc",
    "custom_tool_call": "ctc",
    "shell_call": "sh",
    "local_shell_call": "lsh",
    "apply_patch_call": "apc",
    "computer_call": "cu",
    "tool_search_call": "ts",
    "mcp_approval_request": "mcpr",
    "mcp_call": "mcp",
    "program": "prog",
    "reasoning": "rs",
    "message": "msg",
}

# Item types that carry a `call_id` the model must fill.
_HAS_CALL_ID = frozenset(
    {"function_call", "custom_tool_call", "shell_call", "local_shell_call", "apply_patch_call",
     "computer_call", "tool_search_call", "program"}
)
# Item types whose output shape has a `status` field.
_HAS_STATUS = frozenset(
    {"function_call", "shell_call", "local_shell_call", "apply_patch_call", "computer_call",
     "tool_search_call", "message", "reasoning"}
)


class ScenarioExhausted(Exception):
    """The scripted model was asked for more turns than its scenario holds."""


@dataclass(frozen=True)
class Usage:
    """Token counts reported in ``response.usage`` (``total`` defaults to the sum)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int | None = None
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        total = self.total_tokens
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens,
                                     "cache_write_tokens": 0},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.input_tokens + self.output_tokens if total is None else total,
        }


@dataclass
class Turn:
    """One scripted response: output items plus how the response ends.

    ``status`` is ``completed`` (default), ``incomplete`` (with ``incomplete_reason``, e.g.
    ``max_output_tokens``; items without a status are then marked ``incomplete`` too) or
    ``failed`` (with ``error = {"code", "message"}``). ``usage`` overrides the model's
    default token counts for this turn. ``unchecked`` serves items that break the Response
    schema (a string where a list belongs, a missing field) instead of refusing the scenario:
    for testing how a client copes with a malformed call.
    """

    items: list[Item] = field(default_factory=list)
    status: Literal["completed", "incomplete", "failed"] = "completed"
    incomplete_reason: str | None = None
    error: dict[str, str] | None = None
    usage: Usage | None = None
    unchecked: bool = False


TurnFunction: TypeAlias = Callable[[dict[str, Any], list[Item]], "Sequence[Item] | Turn | Item"]
TurnSpec: TypeAlias = "Sequence[Item] | Turn | TurnFunction"


def incomplete(*items: Item, reason: str = "max_output_tokens",
               usage: Usage | None = None) -> Turn:
    """A response cut short (``status: incomplete``), e.g. by ``max_output_tokens``."""
    return Turn(list(items), status="incomplete", incomplete_reason=reason, usage=usage)


def failed(message: str = "The server had an error while processing your request.",
           code: str = "server_error") -> Turn:
    """A response with ``status: failed`` and ``error: {code, message}`` (HTTP 200)."""
    return Turn([], status="failed", error={"code": code, "message": message})


# --- output item helpers -------------------------------------------------------------------
# Each returns a plain dict in the SDK's *output* shape; `id`, `call_id` and `status` are
# left out unless given, and filled when the model issues the turn.


def _item(type_: str, fields: Mapping[str, Any], extra: Mapping[str, Any]) -> Item:
    item: Item = {"type": type_}
    item.update({k: v for k, v in fields.items() if v is not None})
    item.update(extra)
    return item


def function_call(name: str, arguments: Mapping[str, Any] | str = "{}", *,
                  call_id: str | None = None, namespace: str | None = None,
                  caller: Mapping[str, Any] | None = None, is_async: bool | None = None,
                  **extra: Any) -> Item:
    """A ``function_call``; ``arguments`` as a dict is encoded to the JSON string the API sends."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return _item("function_call", {"name": name, "arguments": args, "call_id": call_id,
                                   "namespace": namespace, "caller": caller,
                                   "async": is_async}, extra)


def custom_tool_call(name: str, input: str, *, call_id: str | None = None,
                     namespace: str | None = None, caller: Mapping[str, Any] | None = None,
                     is_async: bool | None = None, **extra: Any) -> Item:
    """A ``custom_tool_call`` carrying raw text ``input``."""
    return _item("custom_tool_call", {"name": name, "input": input, "call_id": call_id,
                                      "namespace": namespace, "caller": caller,
                                      "async": is_async}, extra)


def shell_call(commands: Sequence[str], *, timeout_ms: int | None = None,
               max_output_length: int | None = None, call_id: str | None = None,
               environment: Mapping[str, Any] | None = None,
               caller: Mapping[str, Any] | None = None, **extra: Any) -> Item:
    """A ``shell_call`` (environment ``local`` unless given)."""
    action = {"commands": list(commands), "timeout_ms": timeout_ms,
              "max_output_length": max_output_length}
    return _item("shell_call", {"action": action, "call_id": call_id,
                                "environment": environment or {"type": "local"},
                                "caller": caller}, extra)


def local_shell_call(command: Sequence[str], *, env: Mapping[str, str] | None = None,
                     timeout_ms: int | None = None, working_directory: str | None = None,
                     user: str | None = None, call_id: str | None = None,
                     **extra: Any) -> Item:
    """A legacy ``local_shell_call``: ``command`` is an argv list, not a shell string."""
    action = {"type": "exec", "command": list(command), "env": dict(env or {}),
              "timeout_ms": timeout_ms, "working_directory": working_directory, "user": user}
    return _item("local_shell_call", {"action": action, "call_id": call_id}, extra)


def create_file(path: str, diff: str) -> dict[str, str]:
    """An ``apply_patch`` operation creating ``path`` (every diff line starts with ``+``)."""
    return {"type": "create_file", "path": path, "diff": diff}


def update_file(path: str, diff: str) -> dict[str, str]:
    """An ``apply_patch`` operation editing ``path`` with a headerless V4A diff."""
    return {"type": "update_file", "path": path, "diff": diff}


def delete_file(path: str) -> dict[str, str]:
    """An ``apply_patch`` operation deleting ``path``."""
    return {"type": "delete_file", "path": path}


def apply_patch_call(operation: Mapping[str, Any], *, call_id: str | None = None,
                     caller: Mapping[str, Any] | None = None, **extra: Any) -> Item:
    """An ``apply_patch_call`` with one operation (see :func:`create_file` & co.)."""
    return _item("apply_patch_call", {"operation": dict(operation), "call_id": call_id,
                                      "caller": caller}, extra)


def computer_call(actions: Sequence[Mapping[str, Any]], *,
                  pending_safety_checks: Sequence[Mapping[str, Any]] = (),
                  call_id: str | None = None, **extra: Any) -> Item:
    """A GA ``computer_call`` with a batch of ``actions`` (``{"type": "click", ...}``)."""
    return _item("computer_call", {"actions": [dict(a) for a in actions], "call_id": call_id,
                                   "pending_safety_checks": [dict(c) for c in
                                                             pending_safety_checks]}, extra)


def tool_search_call(arguments: Mapping[str, Any], *, call_id: str | None = None,
                     execution: Literal["client", "server"] = "client", **extra: Any) -> Item:
    """A ``tool_search_call``; ``arguments`` is an object (not a string)."""
    return _item("tool_search_call", {"arguments": dict(arguments), "call_id": call_id,
                                      "execution": execution}, extra)


def mcp_approval_request(name: str, arguments: Mapping[str, Any] | str = "{}", *,
                         server_label: str = "mcp", id: str | None = None,
                         **extra: Any) -> Item:
    """An ``mcp_approval_request``; answer with ``approval_request_id`` = its ``id``."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return _item("mcp_approval_request", {"name": name, "arguments": args,
                                          "server_label": server_label, "id": id}, extra)


def reasoning(summary: Sequence[str] = (), *, encrypted_content: str | None = None,
              id: str | None = None, **extra: Any) -> Item:
    """A ``reasoning`` item; ``encrypted_content`` is generated when not given."""
    return _item("reasoning", {"summary": [{"type": "summary_text", "text": s}
                                           for s in summary],
                               "encrypted_content": encrypted_content, "id": id}, extra)


def message(text: str, *, phase: Literal["commentary", "final_answer"] | None = None,
            **extra: Any) -> Item:
    """An assistant ``message`` with one ``output_text`` part."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return _item("message", {"role": "assistant", "content": content, "phase": phase}, extra)


def program(code: str, *, fingerprint: str | None = None, call_id: str | None = None,
            **extra: Any) -> Item:
    """A programmatic-tool-calling ``program``; calls it makes carry
    ``caller={"type": "program", "caller_id": <this call_id>}``."""
    return _item("program", {"code": code, "call_id": call_id,
                             "fingerprint": fingerprint or
                             "fp_" + hashlib.sha256(code.encode()).hexdigest()[:16]}, extra)


# --- the model ----------------------------------------------------------------------------


def _rough_tokens(value: Any) -> int:
    # Deterministic and proportional to size: about four characters per token.
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


class ScriptedModel:
    """Plays a scenario, one turn per request, filling what a real model's response carries.

    ``required_tools`` names tools that must be declared in ``tools`` on *every* request
    (tools are not inherited through ``previous_response_id``): a tool ``type`` such as
    ``"shell"``, or ``"function:NAME"`` / ``"custom:NAME"``; the server rejects a request
    that lacks one. ``usage`` fixes the token counts of every turn (by default they grow with
    the size of the conversation and of the output). ``name`` is reported as ``model`` when
    the request names none.

    Thread-safe: the server may call :meth:`respond` from several request threads.
    """

    def __init__(self, turns: Iterable[TurnSpec], *, required_tools: Sequence[str] = (),
                 usage: Usage | None = None, name: str = "scripted-model") -> None:
        self._turns: list[TurnSpec] = list(turns)
        self._next = 0
        self.required_tools: tuple[str, ...] = tuple(required_tools)
        self.usage = usage
        self.name = name
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: ids of responses served from ``Turn(unchecked=True)``: exempt from the schema check
        self.unchecked: set[str] = set()

    @classmethod
    def from_cassette(cls, path: str | Path, **kwargs: Any) -> ScriptedModel:
        """Replay the model side of a recorded cassette: its responses, in order, ids kept."""
        from .cassette import Cassette  # here to keep the module import graph acyclic

        responses = [dict(exchange.response) for exchange in Cassette.load(path).exchanges]
        return cls([_fixed(r) for r in responses], **kwargs)

    @property
    def turns_left(self) -> int:
        """How many scripted turns have not been played yet."""
        with self._lock:
            return len(self._turns) - self._next

    def new_id(self, prefix: str) -> str:
        """A fresh id such as ``fc_0003`` (unique within this model)."""
        return f"{prefix}_{next(self._ids):04d}"

    def respond(self, request: dict[str, Any], history: list[Item]) -> dict[str, Any]:
        """Produce the next response for ``request`` (raises :class:`ScenarioExhausted`)."""
        with self._lock:
            if self._next >= len(self._turns):
                raise ScenarioExhausted(
                    f"scenario exhausted: all {len(self._turns)} scripted turns were used;"
                    " the client sent one request more than the script expects"
                )
            spec = self._turns[self._next]
            self._next += 1
        produced: Any = spec(request, history) if callable(spec) else spec
        if isinstance(produced, Mapping):
            return self._complete(dict(produced), request, history)
        turn = produced if isinstance(produced, Turn) else Turn(list(produced))
        response = self._complete(self._from_turn(turn, request, history), request, history)
        if turn.unchecked:
            self.unchecked.add(response["id"])
        return response

    def _from_turn(self, turn: Turn, request: dict[str, Any],
                   history: list[Item]) -> dict[str, Any]:
        default_status = "incomplete" if turn.status == "incomplete" else "completed"
        output = [self._fill(item, default_status) for item in turn.items]
        usage = turn.usage or self.usage or Usage(_rough_tokens(history), _rough_tokens(output))
        return {
            "status": turn.status,
            "output": output,
            "usage": usage.to_json(),
            "error": turn.error,
            "incomplete_details": (
                {"reason": turn.incomplete_reason} if turn.status == "incomplete" else None
            ),
        }

    def _fill(self, item: Mapping[str, Any], default_status: str) -> Item:
        filled = dict(item)
        kind = str(filled.get("type"))
        filled.setdefault("id", self.new_id(CALL_ITEM_PREFIXES.get(kind, "item")))
        if kind in _HAS_CALL_ID and filled.get("call_id") is None and (
            kind != "tool_search_call" or filled.get("execution") == "client"
        ):
            filled["call_id"] = self.new_id("call")
        if kind in _HAS_STATUS:
            filled.setdefault("status", default_status)
        if kind == "reasoning" and filled.get("encrypted_content") is None:
            # Opaque and unguessable, like the real blob: the server checks it comes back intact.
            filled["encrypted_content"] = f"gAAAA{secrets.token_urlsafe(24)}"
        return filled

    def _complete(self, response: dict[str, Any], request: dict[str, Any],
                  history: list[Item]) -> dict[str, Any]:
        """Fill the fields of a Response that the turn did not set, echoing the request."""
        now = int(time.time())
        response.setdefault("id", self.new_id("resp"))
        response.setdefault("object", "response")
        response.setdefault("created_at", now)
        response.setdefault("status", "completed")
        response.setdefault("model", request.get("model") or self.name)
        response.setdefault("output", [])
        response.setdefault("usage", (self.usage or Usage(
            _rough_tokens(history), _rough_tokens(response["output"]))).to_json())
        if response["status"] == "completed":
            response.setdefault("completed_at", now)
        for key, default in (("tools", []), ("tool_choice", "auto"),
                             ("parallel_tool_calls", True), ("instructions", None),
                             ("previous_response_id", None), ("max_output_tokens", None),
                             ("metadata", {}), ("reasoning", None),
                             ("temperature", None), ("top_p", None), ("truncation", None)):
            echoed = request.get(key)
            response.setdefault(key, default if echoed is None else echoed)
        response.setdefault("error", None)
        response.setdefault("incomplete_details", None)
        return response


def _fixed(response: dict[str, Any]) -> TurnFunction:
    """A turn that re-issues a recorded response unchanged."""
    return lambda _request, _history: dict(response)
