"""Conversation state and the rules the real Responses API enforces on it.

:class:`Conversations` resolves the context of each request (the chain reached through
``previous_response_id``, then the request's ``input``) and rejects, with the real API's
error text where it is known, what the real API rejects:

* an actionable call in the context with no output (``No tool output found for function
  call call_X.``), except calls marked ``async: true``, calls not ``completed``, hosted
  shells and server-side tool searches;
* an output whose call is not in the context (``No tool call found for function call output
  with call_id call_X.``) — under stateless replay the call must be replayed before it;
* an output whose ``id`` is its call's item id (reported as the call being unanswered, as the
  real API does), and any other duplicate item id;
* an unknown or unstored ``previous_response_id``, and ``previous_response_id`` together with
  ``conversation``;
* a reasoning item or ``item_reference`` that cannot be resolved (with ``store: false``:
  ``Item with id 'rs_…' not found. Items are not persisted when `store` is set to false…``),
  encrypted reasoning content that was altered, and reasoning items separated from the item
  they came with;
* an ``mcp_approval_response`` for an approval request not in the context.

Texts marked "fake server" in the code are not known verbatim from the real API.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ApiError
from .schema import validate_input_items, validate_tools

__all__ = ["CALL_OUTPUT_TYPES", "Conversations", "call_key"]

Item = dict[str, Any]

#: Each client-executed call type, the output type that answers it, and how errors name it.
CALL_OUTPUT_TYPES: Mapping[str, tuple[str, str]] = {
    "function_call": ("function_call_output", "function call"),
    "custom_tool_call": ("custom_tool_call_output", "custom tool call"),
    "shell_call": ("shell_call_output", "shell call"),
    "local_shell_call": ("local_shell_call_output", "local shell call"),
    "apply_patch_call": ("apply_patch_call_output", "apply patch call"),
    "computer_call": ("computer_call_output", "computer call"),
    "tool_search_call": ("tool_search_output", "tool search call"),
}
_CALL_OF_OUTPUT = {out: call for call, (out, _) in CALL_OUTPUT_TYPES.items()}

_NOT_PERSISTED = (
    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)


def call_key(item: Mapping[str, Any]) -> str | None:
    """The call id an output item answers (``local_shell_call_output`` uses ``id``)."""
    if item.get("type") == "local_shell_call_output":
        return item.get("id")
    if item.get("type") == "mcp_approval_response":
        return item.get("approval_request_id")
    return item.get("call_id")


def _needs_answer(call: Mapping[str, Any]) -> bool:
    """Whether the client must answer this call item in the conversation."""
    if call.get("status", "completed") != "completed" or call.get("async") is True:
        return False
    if call["type"] == "shell_call":
        environment = call.get("environment")
        return environment is None or environment.get("type") == "local"
    if call["type"] == "tool_search_call":
        return call.get("execution") == "client" and call.get("call_id") is not None
    return True


def _item_ids(item: Mapping[str, Any]) -> str | None:
    # `local_shell_call_output.id` is the call id, not an item id.
    if item.get("type") == "local_shell_call_output":
        return None
    value = item.get("id")
    return value if isinstance(value, str) else None


@dataclass
class _Stored:
    response: dict[str, Any]
    context: list[Item]  # the conversation after this response: inputs, then its output


class Conversations:
    """Stored responses, the items they issued, and the checks every request goes through."""

    def __init__(self, *, accept_local_shell_call_id: bool = False) -> None:
        self.accept_local_shell_call_id = accept_local_shell_call_id
        self._responses: dict[str, _Stored] = {}
        self._issued: dict[str, Item] = {}  # every output item ever issued, by item id
        self._persisted: dict[str, Item] = {}  # items of stored responses, resolvable by id
        self._reasoning_before: dict[str, str] = {}  # item id -> reasoning id issued just before
        self._after_reasoning: dict[str, str] = {}  # reasoning id -> item id issued just after
        self._lock = threading.Lock()

    def get(self, response_id: str) -> dict[str, Any] | None:
        """A stored response, as ``GET /v1/responses/{id}`` returns it."""
        with self._lock:
            stored = self._responses.get(response_id)
            return None if stored is None else stored.response

    # -- request side ----------------------------------------------------------------------

    def prepare(self, body: Mapping[str, Any], required_tools: Sequence[str] = ()) -> list[Item]:
        """Validate a ``POST /v1/responses`` body; return the conversation it continues.

        The returned context ends with this request's input items (references resolved).
        """
        if not isinstance(body.get("model"), str) or not body.get("model"):
            raise ApiError("Missing required parameter: 'model'.", param="model",
                           code="missing_required_parameter")
        previous = body.get("previous_response_id")
        if previous is not None and body.get("conversation") is not None:
            raise ApiError(
                "Mutually exclusive parameters: Ensure you are only providing one of: "
                "'previous_response_id' or 'conversation'.",
                param=None, code="mutually_exclusive_parameters",
            )
        if body.get("conversation") is not None:
            raise ApiError("conversation objects are not supported by the fake server",
                           param="conversation")
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise ApiError("Invalid type for 'tools': expected an array.", param="tools",
                           code="invalid_type")
        validate_tools(tools)
        _check_required_tools(tools, required_tools)
        new_input = self._input_items(body.get("input"))
        store = body.get("store") is not False
        with self._lock:
            base: list[Item] = []
            if previous is not None:
                stored = self._responses.get(previous)
                if stored is None:
                    raise ApiError(f"Previous response with id '{previous}' not found.",
                                   param="previous_response_id",
                                   code="previous_response_not_found")
                base = stored.context
            resolved = [self._resolve(item, store) for item in new_input]
            context = [*base, *resolved]
            self._check_output_ids(context, len(base))
            _check_unique_ids(context)
            self._check_reasoning_adjacency(context)
        _check_answers(context)
        return context

    def _input_items(self, raw: Any) -> list[Item]:
        if raw is None:
            return []
        if isinstance(raw, str):
            return [{"role": "user", "content": raw}]
        if not isinstance(raw, list):
            raise ApiError("Invalid type for 'input': expected a string or an array.",
                           param="input", code="invalid_type")
        return validate_input_items(
            raw, accept_local_shell_call_id=self.accept_local_shell_call_id
        )

    def _resolve(self, item: Item, store: bool) -> Item:
        """Resolve an ``item_reference`` or a reasoning item given by id alone."""
        kind = item.get("type")
        by_reference = kind == "item_reference" or (kind is None and set(item) == {"id"})
        bare_reasoning = kind == "reasoning" and item.get("encrypted_content") is None
        item_id = item.get("id")
        if by_reference or bare_reasoning:
            if not store:
                raise ApiError(_NOT_PERSISTED.format(id=item_id), param="input")
            found = self._persisted.get(str(item_id))
            if found is None:
                raise ApiError(f"Item with id '{item_id}' not found.", param="input")
            return found if by_reference else item
        if kind == "reasoning" and isinstance(item_id, str) and item_id in self._issued:
            issued = self._issued[item_id].get("encrypted_content")
            if item.get("encrypted_content") != issued:
                raise ApiError(
                    f"The encrypted content for item {item_id} could not be verified.",
                    param="input", code="invalid_encrypted_content",
                )
        return item

    @staticmethod
    def _check_output_ids(context: list[Item], start: int) -> None:
        """An output whose ``id`` is its call's item id leaves the call unanswered."""
        call_item_ids = {item.get("call_id"): item.get("id") for item in context
                         if item.get("type") in CALL_OUTPUT_TYPES}
        for item in context[start:]:
            if item.get("type") in _CALL_OF_OUTPUT and item.get("type") != (
                "local_shell_call_output"
            ):
                key = call_key(item)
                if item.get("id") is not None and item.get("id") == call_item_ids.get(key):
                    kind = CALL_OUTPUT_TYPES[_CALL_OF_OUTPUT[item["type"]]][1]
                    raise ApiError(f"No tool output found for {kind} {key}.", param="input")

    def _check_reasoning_adjacency(self, context: list[Item]) -> None:
        """Reasoning items must travel with the item issued right after them, and back."""
        positions = {i: n for n, item in enumerate(context) if (i := _item_ids(item))}
        for n, item in enumerate(context):
            item_id = _item_ids(item)
            if item_id is None:
                continue
            reasoning_id = self._reasoning_before.get(item_id)
            if reasoning_id is not None and positions.get(reasoning_id, n) >= n:
                raise ApiError(
                    f"Item '{item_id}' of type '{item.get('type')}' was provided without its"
                    f" required 'reasoning' item: '{reasoning_id}'.", param="input",
                )
            following = self._after_reasoning.get(item_id)
            if following is not None and (
                n + 1 >= len(context) or _item_ids(context[n + 1]) != following
            ):
                raise ApiError(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required"
                    " following item.", param="input",
                )

    # -- response side ---------------------------------------------------------------------

    def commit(self, body: Mapping[str, Any], context: list[Item],
               response: dict[str, Any]) -> dict[str, Any]:
        """Record a response the model produced for ``body``; return it as served.

        With ``store: false`` and without ``include: ["reasoning.encrypted_content"]``, the
        reasoning items are served without their encrypted content (so a client that forgets
        the ``include`` cannot replay them), and the response is not retrievable later.
        """
        store = body.get("store") is not False
        include = body.get("include") or []
        output: list[Item] = response.get("output") or []
        if not store and "reasoning.encrypted_content" not in include:
            output = [{**item, "encrypted_content": None} if item.get("type") == "reasoning"
                      else item for item in output]
            response = {**response, "output": output}
        with self._lock:
            previous_id: str | None = None
            for item in output:
                item_id = _item_ids(item)
                if item_id is None:
                    continue
                self._issued[item_id] = item
                if previous_id is not None and self._issued[previous_id].get("type") == (
                    "reasoning"
                ):
                    self._reasoning_before[item_id] = previous_id
                    self._after_reasoning[previous_id] = item_id
                previous_id = item_id
            if store:
                full = [*context, *output]
                self._responses[str(response["id"])] = _Stored(response, full)
                for item in full:
                    if (item_id := _item_ids(item)) is not None:
                        self._persisted[item_id] = item
        return response


def _check_required_tools(tools: list[Any], required: Sequence[str]) -> None:
    declared: set[str] = set()
    for tool in tools:
        declared.add(str(tool.get("type")))
        if tool.get("name"):
            declared.add(f"{tool.get('type')}:{tool.get('name')}")
    for name in required:
        if name not in declared:
            # Fake-server text: the real API would just not offer the tool to the model.
            raise ApiError(
                f"Tool '{name}' is missing from `tools`; the scenario requires it on every"
                " request (tools are not inherited through previous_response_id).",
                param="tools",
            )


def _check_unique_ids(context: list[Item]) -> None:
    seen: set[str] = set()
    for item in context:
        item_id = _item_ids(item)
        if item_id is None:
            continue
        if item_id in seen:
            raise ApiError(
                f"Duplicate item found with id {item_id}. Remove duplicate items from your"
                " input and try again.", param="input",
            )
        seen.add(item_id)


def _check_answers(context: list[Item]) -> None:
    """Every output answers an earlier call; every call that needs an answer has one."""
    calls: dict[str, Item] = {}
    approvals: set[str] = set()
    answered: set[str] = set()
    for item in context:
        kind = item.get("type")
        if kind in CALL_OUTPUT_TYPES and item.get("call_id") is not None:
            calls[str(item["call_id"])] = item
        elif kind == "mcp_approval_request":
            approvals.add(str(item.get("id")))
        elif kind == "mcp_approval_response":
            request_id = str(item.get("approval_request_id"))
            if request_id not in approvals:
                # Fake-server text: the real API's wording is not documented.
                raise ApiError(
                    f"No MCP approval request found for mcp_approval_response with"
                    f" approval_request_id {request_id}.", param="input",
                )
        elif isinstance(kind, str) and kind in _CALL_OF_OUTPUT:
            key = call_key(item)
            if key is None and kind == "tool_search_output":
                continue  # a server-side search result
            if key is None:
                raise ApiError("Missing required parameter: 'call_id'.", param="input",
                               code="missing_required_parameter")
            call = calls.get(key)
            if call is None or call.get("type") != _CALL_OF_OUTPUT[kind]:
                noun = CALL_OUTPUT_TYPES[_CALL_OF_OUTPUT[kind]][1]
                raise ApiError(
                    f"No tool call found for {noun} output with call_id {key}.", param="input"
                )
            answered.add(key)
    for call_id, call in calls.items():
        if call_id not in answered and _needs_answer(call):
            noun = CALL_OUTPUT_TYPES[call["type"]][1]
            raise ApiError(f"No tool output found for {noun} {call_id}.", param="input")
