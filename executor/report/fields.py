"""Reading untrusted JSON: a JSONL file line by line, and fields that may be absent or of any
type (a field of the wrong type reads as absent), from logs a crafted run could have written."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "as_int",
    "as_num",
    "as_str",
    "call_key",
    "dicts",
    "image_ref",
    "jsonl",
    "obj",
    "opt_str",
    "output_key",
    "pretty",
    "screenshot_ref",
    "text_of",
    "timestamp",
]

_SHOT = re.compile(r"screenshot:sha256:([0-9a-f]{64})")
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|webp|gif);base64,([A-Za-z0-9+/=\s]*)")


def screenshot_ref(value: Any) -> str | None:
    """The sha256 of a ``screenshot:sha256:<hex>`` reference; None for anything else (so a
    crafted reference can never become a path)."""
    if not isinstance(value, str):
        return None
    match = _SHOT.fullmatch(value)
    return match.group(1) if match else None


def image_ref(value: Any, inline: dict[str, bytes]) -> str | None:
    """The sha256 naming an image: a stored screenshot's reference, or an image a log kept
    inline (a ``data:`` URL, as logs not written by ``RequestLog`` may), whose bytes go to
    ``inline`` under their sha256."""
    ref = screenshot_ref(value)
    if ref is not None or not isinstance(value, str):
        return ref
    match = _DATA_IMAGE.fullmatch(value)
    if match is None:
        return None
    try:
        data = base64.b64decode(match.group(1), validate=True)
    except (binascii.Error, ValueError):
        return None
    digest = hashlib.sha256(data).hexdigest()
    inline.setdefault(digest, data)
    return digest


def jsonl(path: Path, problems: list[str]) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                problems.append(f"{path.name} line {number}: not JSON, skipped")
                continue
            if isinstance(data, dict):
                yield data
            else:
                problems.append(f"{path.name} line {number}: not a JSON object, skipped")


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def output_key(item: Mapping[str, Any]) -> str | None:
    """The call an output item answers (local_shell_call_output may use ``id``; an MCP
    approval answers its request's item id)."""
    kind = item.get("type")
    if kind == "mcp_approval_response":
        return opt_str(item.get("approval_request_id"))
    if kind == "local_shell_call_output":
        return opt_str(item.get("id")) or opt_str(item.get("call_id"))
    if isinstance(kind, str) and kind.endswith("_output"):
        return opt_str(item.get("call_id"))
    return None


def call_key(item: Mapping[str, Any]) -> str | None:
    if item.get("type") == "mcp_approval_request":
        return opt_str(item.get("id"))
    if item.get("type") == "local_shell_call":
        return opt_str(item.get("call_id")) or opt_str(item.get("id"))
    return opt_str(item.get("call_id"))


def text_of(content: Any) -> str:
    """A message's content as text: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    parts = []
    for part in dicts(content):
        for key in ("text", "refusal"):
            if isinstance(part.get(key), str):
                parts.append(part[key])
        ref = screenshot_ref(part.get("image_url"))
        if ref:
            parts.append(f"[image {ref[:12]}…]")
    return "\n".join(parts)


def timestamp(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return datetime.fromisoformat(value).timestamp()
    return None


def pretty(value: Any) -> str:
    """JSON (or a JSON string) indented; any other text as it is."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        if isinstance(decoded, str):
            return decoded
        value = decoded
    return json.dumps(value, indent=2, ensure_ascii=False)
