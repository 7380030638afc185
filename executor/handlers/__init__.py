"""Handlers: one module per actionable item type, plus what they all share.

Every handler turns one call item into exactly one output item. What is shared lives here:
the item → dict conversion, the echo of ``caller`` (programmatic tool calling), and
:func:`error_output`, the one place that knows how to answer *any* call type with an error
text — dispatch and the async-tool runner both use it so a failure never leaves a call_id
unanswered.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

__all__ = [
    "OUTPUT_TYPE",
    "Output",
    "as_dict",
    "call_id_of",
    "echo_caller",
    "error_output",
    "error_screenshot_url",
]

Output = dict[str, Any]

#: call item type → the type of the output item that answers it (protocol.md table A).
OUTPUT_TYPE: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "computer_call": "computer_call_output",
    "tool_search_call": "tool_search_output",
    "mcp_approval_request": "mcp_approval_response",
}


def as_dict(item: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """The item as the server sent it (aliases such as ``async``, unset fields left out)."""
    if isinstance(item, BaseModel):
        return item.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return dict(item)


def call_id_of(item: dict[str, Any]) -> str:
    """The correlation key. local_shell_call may carry it as ``call_id`` or only as ``id``
    (protocol.md A.4); mcp_approval_request is answered by its ``id``."""
    if item.get("type") == "mcp_approval_request":
        return str(item["id"])
    return str(item.get("call_id") or item.get("id") or "")


def echo_caller(item: dict[str, Any], output: Output) -> Output:
    """Copy ``caller`` from the call onto its output (protocol.md A, PTC)."""
    caller = item.get("caller")
    if caller is not None and output.get("type") != "mcp_approval_response":
        output["caller"] = caller
    return output


def error_screenshot_url(text: str) -> str:
    """A PNG data URL showing ``text``: computer_call_output must carry a screenshot, so when
    the browser cannot produce one the model is shown the error instead."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (640, 120), "white")
    draw = ImageDraw.Draw(image)
    lines = [text[i : i + 90] for i in range(0, min(len(text), 450), 90)] or [""]
    draw.multiline_text((10, 10), "\n".join(lines), fill="black")
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _shell_error(item: dict[str, Any], text: str) -> Output:
    out: Output = {
        "type": "shell_call_output",
        "call_id": item["call_id"],
        "output": [{"stdout": "", "stderr": text, "outcome": {"type": "exit", "exit_code": 1}}],
    }
    limit = (item.get("action") or {}).get("max_output_length")
    if limit is not None:
        out["max_output_length"] = limit
    return out


def _local_shell_error(item: dict[str, Any], text: str) -> Output:
    # The SDK's LocalShellCallOutput param carries the call's id in ``id``.
    body = json.dumps({"stdout": "", "stderr": text, "exit_code": 1})
    return {"type": "local_shell_call_output", "id": call_id_of(item), "output": body}


_ERROR_BUILDERS: dict[str, Callable[[dict[str, Any], str], Output]] = {
    "function_call": lambda i, t: {
        "type": "function_call_output", "call_id": i["call_id"], "output": t},
    "custom_tool_call": lambda i, t: {
        "type": "custom_tool_call_output", "call_id": i["call_id"], "output": t},
    "shell_call": _shell_error,
    "local_shell_call": _local_shell_error,
    "apply_patch_call": lambda i, t: {
        "type": "apply_patch_call_output", "call_id": i["call_id"], "status": "failed",
        "output": t},
    "computer_call": lambda i, t: {
        "type": "computer_call_output", "call_id": i["call_id"],
        "output": {"type": "computer_screenshot", "image_url": error_screenshot_url(t)}},
    # tool_search_output has no failed status: an empty result is the honest answer.
    "tool_search_call": lambda i, t: {
        "type": "tool_search_output", "call_id": i["call_id"], "execution": "client",
        "status": "completed", "tools": []},
    "mcp_approval_request": lambda i, t: {
        "type": "mcp_approval_response", "approval_request_id": i["id"], "approve": False,
        "reason": t},
}


def error_output(item: dict[str, Any], text: str) -> Output:
    """An output of the right type for ``item`` that tells the model what went wrong."""
    return echo_caller(item, _ERROR_BUILDERS[item["type"]](item, text))
