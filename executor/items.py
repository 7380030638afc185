"""Response items as plain data: the shapes every part of the loop passes around.

Call items arrive as the SDK's models (or as dicts, from tests and cassettes); they are handled
as the JSON the server sent (:func:`as_dict`), and every answer is an :data:`Output`: the dict of
one input item, built to the SDK's param types.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["COMPUTER", "Output", "ResourceKey", "as_dict", "echo_caller"]

#: One output item (an input item of the next request), as JSON.
Output = dict[str, Any]
#: A back-end resource calls take in turn, e.g. ("computer",) or ("file", "src/a.py").
ResourceKey = tuple[str, ...]
#: The run's computer: computer calls and the browser's navigation tools take it in turn, and
#: the browser's requests are recorded against the call holding it.
COMPUTER: ResourceKey = ("computer",)


def as_dict(item: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """The item as the server sent it (aliases such as ``async``, unset fields left out)."""
    if isinstance(item, BaseModel):
        # The SDK builds response models without validating them, so a malformed call is kept
        # as sent; dumping it must not warn (the dispatcher validates and answers it).
        return item.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
    return dict(item)


def echo_caller(item: dict[str, Any], output: Output) -> Output:
    """Copy ``caller`` from the call onto its output: a call made by a program (programmatic
    tool calling) is answered to that program."""
    caller = item.get("caller")
    if caller is not None and output.get("type") != "mcp_approval_response":
        output["caller"] = caller
    return output
