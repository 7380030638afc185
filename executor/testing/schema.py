"""Shape validation of request items against the ``openai`` SDK's own param types.

Every ``input`` item is checked against :data:`openai.types.responses.ResponseInputItemParam`
and every ``tools`` entry against :data:`openai.types.responses.ToolParam`, with unknown
keys forbidden (the real API answers ``Unknown parameter: 'input[0].foo'.``). The SDK is the
authority on shapes; the only keys tolerated beyond it are listed in :data:`TOLERATED_EXTRAS`.

Items are dispatched on their ``type`` to the matching TypedDict(s) of the union, so that a
bad item yields one precise error (``input[2].output[0].outcome.exit_code``) rather than a
hundred union-member mismatches.
"""

from __future__ import annotations

import copy
import typing
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

import pydantic
from openai.types.responses import ResponseInputItemParam, ToolParam
from pydantic_core import ErrorDetails

from .errors import ApiError

__all__ = ["TOLERATED_EXTRAS", "validate_input_items", "validate_tools"]

#: Keys accepted although the SDK 3.57 types do not declare them, per item ``type``, as
#: paths inside the item. ``detail`` on a computer screenshot is what the current
#: computer-use guide recommends (``"original"``), and the real API takes it.
TOLERATED_EXTRAS: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "computer_call_output": (("output", "detail"),),
}

_FORBID = pydantic.ConfigDict(extra="forbid")


def _literal_strings(annotation: Any) -> list[str]:
    """The string values of a ``Literal`` found anywhere inside ``Required[...]``/``Optional``."""
    if typing.get_origin(annotation) is typing.Literal:
        return [a for a in typing.get_args(annotation) if isinstance(a, str)]
    found: list[str] = []
    for arg in typing.get_args(annotation):
        found.extend(_literal_strings(arg))
    return found


def _is_required(member: Any, hint: Any) -> bool:
    # The SDK modules use `from __future__ import annotations`, so `__required_keys__` is not
    # reliable there; read `Required[...]` off the evaluated hint instead.
    origin = typing.get_origin(hint)
    if origin is typing.Required:
        return True
    return bool(getattr(member, "__total__", True)) and origin is not typing.NotRequired


@cache
def _members_by_type(union: Any) -> dict[str | None, tuple[Any, ...]]:
    """Map each ``type`` value to the union members that accept it (``None``: type optional)."""
    table: dict[str | None, list[Any]] = {}
    for member in typing.get_args(union):
        hints = typing.get_type_hints(member, include_extras=True)
        values: list[str | None] = list(_literal_strings(hints.get("type")))
        if not _is_required(member, hints.get("type")):
            values.append(None)  # e.g. EasyInputMessageParam, ItemReference
        for value in values:
            table.setdefault(value, []).append(member)
    return {k: tuple(v) for k, v in table.items()}


@cache
def _adapter(member: Any) -> pydantic.TypeAdapter[Any]:
    # pydantic refuses `config` on a bare TypedDict but applies it through a container, to
    # every nested TypedDict too; hence the one-element list (its index is dropped from locs).
    return pydantic.TypeAdapter(list[member], config=_FORBID)


def _drain(value: Any, loc: tuple[int | str, ...] = ()) -> list[ErrorDetails]:
    """Force pydantic's lazy ``Iterable[...]`` validators, so nested errors surface now.

    The SDK types many lists as ``Iterable``, which pydantic validates lazily; without this
    a malformed ``shell_call_output.output[0]`` would be accepted. Errors are returned with
    their location inside the validated value.
    """
    if isinstance(value, Mapping):
        return [e for k, v in value.items() for e in _drain(v, (*loc, k))]
    if isinstance(value, list | tuple):
        return [e for i, v in enumerate(value) for e in _drain(v, (*loc, i))]
    if isinstance(value, Iterator):
        try:
            consumed = list(value)
        except pydantic.ValidationError as exc:
            errors = exc.errors(include_url=False)
            for error in errors:
                error["loc"] = (*loc, *error["loc"])
            return errors
        return _drain(consumed, loc)
    return []


def _validate_one(member: Any, item: Any) -> list[ErrorDetails]:
    try:
        errors = _drain(_adapter(member).validate_python([item]))
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
    for error in errors:
        error["loc"] = error["loc"][1:]  # drop the wrapping list's index
    return errors


def _param(prefix: str, item: Any, loc: Sequence[int | str], missing: bool) -> str:
    """Render an error location as the API does (``input[2].output[0].stdout``).

    pydantic puts the names of union members into locations (``output.str``,
    ``outcome.OutcomeExit``); walking the actual item tells keys from such tags.
    """
    text, node = prefix, item
    for position, part in enumerate(loc):
        last = missing and position == len(loc) - 1  # a missing key is not in the item
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            text, node = f"{text}[{part}]", node[part]
        elif isinstance(part, str) and isinstance(node, dict) and (part in node or last):
            text, node = f"{text}.{part}", node.get(part)
    return text


def _most_telling(errors: list[ErrorDetails]) -> ErrorDetails:
    """Pick the error a person would want to see first.

    Inside a union, every member that does not match reports a wrong ``type`` literal; the
    member whose ``type`` did match reports the real fault, usually deeper in the item.
    """
    def rank(error: ErrorDetails) -> tuple[int, int]:
        wrong_branch = error["type"] == "literal_error" and error["loc"][-1:] == ("type",)
        return (0 if wrong_branch else 1, len(error["loc"]))

    return max(errors, key=rank)


def _api_error(prefix: str, item: Any, error: ErrorDetails) -> ApiError:
    """Word a pydantic error the way the real API words its 400s."""
    kind = error["type"]
    param = _param(prefix, item, error["loc"], missing=kind == "missing")
    if kind == "missing":
        return ApiError(
            f"Missing required parameter: '{param}'.", param=param,
            code="missing_required_parameter",
        )
    if kind == "extra_forbidden":
        return ApiError(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")
    if kind == "literal_error":
        expected = (error.get("ctx") or {}).get("expected", "")
        return ApiError(
            f"Invalid value: {error['input']!r}. Supported values are: {expected}.",
            param=param, code="invalid_value",
        )
    expected = _EXPECTED.get(kind)
    if expected is not None:
        return ApiError(
            f"Invalid type for '{param}': expected {expected}, but got"
            f" {_json_kind(error['input'])} instead.", param=param, code="invalid_type",
        )
    return ApiError(
        f"Invalid value for '{param}': {error['msg']}.", param=param, code="invalid_value"
    )


# pydantic error types, worded as the JSON type the API expected.
_EXPECTED = {
    "string_type": "a string", "int_type": "an integer", "int_parsing": "an integer",
    "int_from_float": "an integer", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "a boolean", "bool_parsing": "a boolean", "dict_type": "an object",
    "model_type": "an object", "list_type": "an array", "iterable_type": "an array",
}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    return "an array"


def _strip_tolerated(item: dict[str, Any]) -> dict[str, Any]:
    paths = TOLERATED_EXTRAS.get(str(item.get("type")), ())
    if not paths:
        return item
    item = copy.deepcopy(item)
    for path in paths:
        node: Any = item
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return item


def _validate_against(union: Any, item: Any, prefix: str, kind_name: str) -> None:
    if not isinstance(item, dict):
        raise ApiError(
            f"Invalid type for '{prefix}': expected an object, but got {type(item).__name__}"
            " instead.", param=prefix, code="invalid_type",
        )
    table = _members_by_type(union)
    item_type = item.get("type")
    if item_type is not None and not isinstance(item_type, str):
        raise ApiError(f"Invalid type for '{prefix}.type'.", param=f"{prefix}.type",
                       code="invalid_type")
    members = table.get(item_type)
    if not members:
        supported = ", ".join(repr(t) for t in sorted(k for k in table if k))
        raise ApiError(
            f"Invalid value: {item_type!r}. Supported values are: {supported}.",
            param=f"{prefix}.type", code="invalid_value",
        )
    errors: list[ErrorDetails] = []
    for member in members:
        member_errors = _validate_one(member, item)
        if not member_errors:
            return
        errors.extend(member_errors)
    raise _api_error(prefix, item, _most_telling(errors))


def validate_input_items(
    items: Sequence[Any], *, accept_local_shell_call_id: bool = False
) -> list[dict[str, Any]]:
    """Check each ``input`` item against the SDK param types; return the items to use.

    ``accept_local_shell_call_id`` also accepts ``local_shell_call_output`` carrying its call
    id in ``call_id`` (the guide's spelling) rather than ``id`` (the SDK's); such items are
    returned rewritten to the SDK shape.
    """
    checked: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        if (
            accept_local_shell_call_id
            and isinstance(item, dict)
            and item.get("type") == "local_shell_call_output"
            and "call_id" in item
            and "id" not in item
        ):
            item = {("id" if k == "call_id" else k): v for k, v in item.items()}
        candidate = _strip_tolerated(item) if isinstance(item, dict) else item
        _validate_against(ResponseInputItemParam, candidate, f"input[{index}]", "input item")
        checked.append(item)
    return checked


def validate_tools(tools: Sequence[Any]) -> None:
    """Check each ``tools`` entry against :data:`openai.types.responses.ToolParam`."""
    for index, tool in enumerate(tools):
        _validate_against(ToolParam, tool, f"tools[{index}]", "tool")
