"""The request/response log: every request and response of a run, one JSON object a line.

It lives in the run's folder (:func:`run_folder`: a new folder under the user's state
directory, outside anything a sandbox can write) as ``requests.jsonl``, beside ``audit.jsonl``
(the hash-chained decision log), ``screenshots/`` and ``summary.json``. Before a record is
written, secrets are redacted (API keys, Authorization headers, anything shaped like ``sk-…``,
and the configured ``OPENAI_API_KEY`` value wherever it stands as a token) and inline images
(``data:image/…;base64,…``) are moved to ``screenshots/<sha256>.<ext>`` and replaced by
``"screenshot:sha256:<hex>"``, so the log stays small and diffable. Every file is written
through a :class:`~sandloop.hostfiles.HostDir`: a name turned into a symlink is refused, never
followed. At the end of a run, :meth:`RequestLog.summary` appends a summary line and writes it
as ``summary.json``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sandloop.hostfiles import HostDir, state_dir

__all__ = ["LOG_NAME", "SUMMARY_NAME", "RequestLog", "new_run_id", "redact", "run_folder"]

LOG_NAME = "requests.jsonl"
SUMMARY_NAME = "summary.json"

_SECRET_KEYS = {"authorization", "api_key", "apikey", "openai_api_key", "x-api-key",
                "proxy-authorization", "password", "secret", "token"}
_SK = re.compile(r"sk-[A-Za-z0-9_\-]{6,}")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._\-]{8,}")
_DATA_IMAGE = re.compile(r"^data:image/([a-z0-9.+-]+);base64,(.*)$", re.DOTALL)
REDACTED = "[REDACTED]"


def _redact_text(text: str, literal: str | None) -> str:
    if literal and literal in text:
        # Only where it stands as a token of its own: local servers take keys like "x" or
        # "EMPTY", which must not turn every "exit" into "e[REDACTED]it".
        text = _token(literal).sub(REDACTED, text)
    text = _SK.sub("sk-" + REDACTED, text)
    return _BEARER.sub("Bearer " + REDACTED, text)


@functools.lru_cache(maxsize=8)
def _token(literal: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_\-]){re.escape(literal)}(?![A-Za-z0-9_\-])")


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"


def run_folder(run_id: str) -> Path:
    """Where a run's files go by default: ``<state dir>/runs/<run id>``."""
    return state_dir() / "runs" / run_id


def redact(value: Any, *, images_dir: HostDir | Path | None = None, literal: str | None = None) -> Any:
    """A copy of ``value`` with secrets masked and (when ``images_dir`` is set) inline images
    stored as files and referenced by their sha256."""
    if isinstance(images_dir, Path):
        images_dir = HostDir(images_dir)
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


def _externalize(fmt: str, payload: str, images_dir: HostDir) -> str | None:
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    digest = hashlib.sha256(data).hexdigest()
    ext = {"jpeg": "jpg", "svg+xml": "svg"}.get(fmt, fmt)
    images_dir.create_once(f"{digest}.{re.sub(r'[^a-z0-9]', '', ext)}", data)  # content-addressed
    return f"screenshot:sha256:{digest}"


class RequestLog:
    """Appends the wire traffic of one run to ``requests.jsonl`` in its folder.

    ``path`` names the log file (its folder holds the rest of the run's files); by default a new
    run folder under the state directory. ``summary_fields`` adds fields to the run summary when
    it is written (the audit chain's head, which the log does not know)."""

    def __init__(self, path: str | Path | None = None, *, run_id: str | None = None,
                 summary_fields: Callable[[], dict[str, Any]] | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.path = Path(path) if path is not None else run_folder(self.run_id) / LOG_NAME
        self.folder = HostDir(self.path.parent)
        self.summary_path = self.path.parent / SUMMARY_NAME
        self.summary_fields = summary_fields
        self._screenshots: HostDir | None = None
        self._literal = os.environ.get("OPENAI_API_KEY") or None

    @property
    def screenshots(self) -> HostDir:
        if self._screenshots is None:
            self._screenshots = self.folder.subdir("screenshots")
        return self._screenshots

    def clean(self, record: dict[str, Any]) -> Any:
        """``record`` as this log writes it: secrets masked, screenshots stored and referenced."""
        return redact(record, images_dir=self.screenshots, literal=self._literal)

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(self.clean(record), ensure_ascii=False, default=str)
        self.folder.append(self.path.name, (line + "\n").encode("utf-8"))

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

    def summary(self, result: Any) -> dict[str, Any]:
        """Append the run's summary and write it as summary.json; returns it as written."""
        data = result.to_json() if hasattr(result, "to_json") else dict(result)
        extra = self.summary_fields() if self.summary_fields is not None else {}
        record = {**self._base("summary", len(data.get("turns", []))), "result": data, **extra}
        self._write(record)
        clean: dict[str, Any] = self.clean(record)
        text = json.dumps(clean, indent=2, ensure_ascii=False, default=str) + "\n"
        self.folder.replace(SUMMARY_NAME, text.encode("utf-8"))
        return clean
