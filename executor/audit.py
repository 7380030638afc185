"""The request/response log: every request and response of a run, one JSON object a line.

Default file: ``reports/live-requests.jsonl``. Before a record is written, secrets are
redacted (API keys, Authorization headers, anything shaped like ``sk-…``, and the literal
value of ``OPENAI_API_KEY``) and inline images (``data:image/…;base64,…``) are moved to
``<log dir>/screenshots/<sha256>.<ext>`` and replaced by ``"screenshot:sha256:<hex>"``, so
the log stays small and diffable. At the end of a run, :meth:`RequestLog.summary` appends a
summary line and writes it as ``<log dir>/runs/<run id>.json``.

(Policy decisions go to the hash-chained ``policies.audit.AuditLog``; this file is the wire.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["DEFAULT_LOG", "RequestLog", "redact"]

DEFAULT_LOG = Path("reports/live-requests.jsonl")

_SECRET_KEYS = {"authorization", "api_key", "apikey", "openai_api_key", "x-api-key",
                "proxy-authorization", "password", "secret", "token"}
_SK = re.compile(r"sk-[A-Za-z0-9_\-]{6,}")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{8,}")
_DATA_IMAGE = re.compile(r"^data:image/([a-z0-9.+-]+);base64,(.*)$", re.DOTALL)
REDACTED = "[REDACTED]"


def _redact_text(text: str, literal: str | None) -> str:
    if literal and literal in text:
        text = text.replace(literal, REDACTED)
    text = _SK.sub("sk-" + REDACTED, text)
    return _BEARER.sub("Bearer " + REDACTED, text)


def redact(value: Any, *, images_dir: Path | None = None, literal: str | None = None) -> Any:
    """A copy of ``value`` with secrets masked and (when ``images_dir`` is set) inline images
    stored as files and referenced by their sha256."""
    if isinstance(value, dict):
        return {k: REDACTED if str(k).lower() in _SECRET_KEYS and isinstance(v, str)
                else redact(v, images_dir=images_dir, literal=literal) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, images_dir=images_dir, literal=literal) for v in value]
    if isinstance(value, str):
        match = _DATA_IMAGE.match(value) if images_dir is not None else None
        if match is not None and images_dir is not None:
            return _externalize(match.group(1), match.group(2), images_dir) or value
        return _redact_text(value, literal)
    return value


def _externalize(fmt: str, payload: str, images_dir: Path) -> str | None:
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    digest = hashlib.sha256(data).hexdigest()
    ext = {"jpeg": "jpg", "svg+xml": "svg"}.get(fmt, fmt)
    target = images_dir / f"{digest}.{ext}"
    if not target.exists():  # content-addressed: the same screenshot is stored once
        images_dir.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(target)
    return f"screenshot:sha256:{digest}"


class RequestLog:
    """Appends the wire traffic of one run to a JSONL file."""

    def __init__(self, path: str | Path = DEFAULT_LOG, *, run_id: str | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id or f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.screenshots = self.path.parent / "screenshots"
        self.summary_path = self.path.parent / "runs" / f"{self.run_id}.json"
        self._literal = os.environ.get("OPENAI_API_KEY") or None
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, record: dict[str, Any]) -> None:
        clean = redact(record, images_dir=self.screenshots, literal=self._literal)
        line = json.dumps(clean, ensure_ascii=False, default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def _base(self, kind: str, turn: int) -> dict[str, Any]:
        return {"run_id": self.run_id, "kind": kind, "turn": turn, "time": time.time()}

    def request(self, turn: int, body: dict[str, Any]) -> None:
        self._write({**self._base("request", turn), "body": body})

    def response(self, turn: int, response: BaseModel | dict[str, Any]) -> None:
        data = response.model_dump(mode="json", exclude_unset=True) \
            if isinstance(response, BaseModel) else response
        self._write({**self._base("response", turn), "body": data})

    def event(self, kind: str, turn: int, **fields: Any) -> None:
        self._write({**self._base(kind, turn), **fields})

    def summary(self, result: Any) -> None:
        data = result.to_json() if hasattr(result, "to_json") else dict(result)
        record = {**self._base("summary", len(data.get("turns", []))), "result": data}
        self._write(record)
        self.summary_path.parent.mkdir(parents=True, exist_ok=True)
        clean = redact(record, images_dir=self.screenshots, literal=self._literal)
        self.summary_path.write_text(json.dumps(clean, indent=2, ensure_ascii=False,
                                                default=str) + "\n", encoding="utf-8")
