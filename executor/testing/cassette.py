"""Cassettes: a recorded session as JSONL, one ``{"request": ..., "response": ...}`` a line.

Record while running against any server (real or fake)::

    with Cassette.recorder("session.jsonl") as rec:
        response = client.responses.create(**body)
        rec.record(body, response.model_dump(mode="json"))

Replay the model side offline and see whether the tools still answer the same::

    cassette = Cassette.load("session.jsonl")
    with FakeResponsesServer(ScriptedModel.from_cassette("session.jsonl")) as server:
        ...  # run the same client code against server.base_url
    for diff in compare_tool_outputs(cassette.requests, server.requests):
        print(diff)

The recorded responses are re-issued in order with their ids, so the client's
``previous_response_id`` chain and call ids line up with the recording.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from sandloop.hostfiles import HostDir

from .state import CALL_OUTPUT_TYPES, call_key

__all__ = [
    "Cassette",
    "CassetteRecorder",
    "Difference",
    "Exchange",
    "compare_tool_outputs",
    "redact_images",
]

_OUTPUT_TYPES = frozenset({out for out, _ in CALL_OUTPUT_TYPES.values()}
                          | {"mcp_approval_response"})
_DIFF_LINES = 24  # a Difference's diff is a hint for a person, not a full dump


@dataclass(frozen=True)
class Exchange:
    """One recorded request body and the response served for it (both JSON objects)."""

    request: dict[str, Any]
    response: dict[str, Any]


class CassetteRecorder:
    """Writes exchanges to a JSONL file as they happen (flushed line by line, thread-safe).

    The file is emptied when the recorder opens it. It is written through a
    :class:`~sandloop.hostfiles.HostDir`: a name turned into a symlink is refused, never followed.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._dir = HostDir(self.path.parent)
        self._dir.replace(self.path.name, b"")
        self._lock = threading.Lock()

    def record(self, request_body: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        """Append one exchange: the JSON request body and the JSON response."""
        line = json.dumps({"request": request_body, "response": response},
                          ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._dir.append(self.path.name, (line + "\n").encode("utf-8"))

    def close(self) -> None:
        with self._lock:
            self._dir.close()

    def __enter__(self) -> CassetteRecorder:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class Cassette:
    """A recorded session: its exchanges in order."""

    exchanges: tuple[Exchange, ...]

    @staticmethod
    def recorder(path: str | Path) -> CassetteRecorder:
        """A :class:`CassetteRecorder` writing a new cassette at ``path``."""
        return CassetteRecorder(path)

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read a cassette; a malformed line raises ``ValueError`` naming its line number."""
        exchanges: list[Exchange] = []
        with Path(path).open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    exchanges.append(Exchange(dict(entry["request"]), dict(entry["response"])))
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{path}:{number}: not a cassette line ({exc})") from exc
        return cls(tuple(exchanges))

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [e.request for e in self.exchanges]

    @property
    def responses(self) -> list[dict[str, Any]]:
        return [e.response for e in self.exchanges]


@dataclass(frozen=True)
class Difference:
    """Where a replay's tool output differs from the recording, for one call id.

    ``kind`` is ``changed`` (both have it, contents differ), ``missing`` (recorded, not
    replayed) or ``extra`` (replayed, not recorded). ``diff`` is a short unified diff of
    the two outputs as indented JSON.
    """

    call_id: str
    item_type: str
    kind: Literal["changed", "missing", "extra"]
    recorded: Any
    replayed: Any
    diff: str

    def __str__(self) -> str:
        return f"{self.item_type} {self.call_id}: {self.kind}\n{self.diff}".rstrip()


def redact_images(value: Any) -> Any:
    """Replace inline ``data:image/...`` URLs by ``"<image>"``: pixels differ between runs."""
    if isinstance(value, str) and value.startswith("data:image/"):
        return "<image>"
    if isinstance(value, Mapping):
        return {k: redact_images(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_images(v) for v in value]
    return value


def _tool_outputs(requests: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The first output sent for each call id (stateless replays resend old outputs)."""
    found: dict[str, dict[str, Any]] = {}
    for request in requests:
        items = request.get("input")
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, dict) and item.get("type") in _OUTPUT_TYPES:
                key = call_key(item)
                if key is not None:
                    found.setdefault(str(key), item)
    return found


def _comparable(item: Mapping[str, Any] | None,
                normalize: Callable[[Any], Any]) -> Any:
    if item is None:
        return None
    kept = {k: v for k, v in item.items()
            if k != "id" or item.get("type") == "local_shell_call_output"}
    return normalize(kept)


def _short_diff(recorded: Any, replayed: Any) -> str:
    def lines(value: Any) -> list[str]:
        if value is None:
            return []
        return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).splitlines()

    diff = list(difflib.unified_diff(lines(recorded), lines(replayed), "recorded", "replayed",
                                     n=1, lineterm=""))
    if len(diff) > _DIFF_LINES:
        diff = [*diff[:_DIFF_LINES], f"... ({len(diff) - _DIFF_LINES} more diff lines)"]
    return "\n".join(diff)


def compare_tool_outputs(
    recorded_requests: Sequence[Mapping[str, Any]],
    new_requests: Sequence[Mapping[str, Any]],
    *,
    normalize: Callable[[Any], Any] = redact_images,
) -> list[Difference]:
    """Compare the tool outputs two sessions sent, call id by call id.

    Outputs are the ``*_output`` items and ``mcp_approval_response`` found in each request's
    ``input``. ``normalize`` maps each output (without its item ``id``) before comparing;
    the default hides inline images. Differences come in the recording's call order, then
    the extra calls of the replay.
    """
    before = _tool_outputs(recorded_requests)
    after = _tool_outputs(new_requests)
    differences: list[Difference] = []
    for call_id in [*before, *(k for k in after if k not in before)]:
        old, new = before.get(call_id), after.get(call_id)
        old_value, new_value = _comparable(old, normalize), _comparable(new, normalize)
        if old_value == new_value:
            continue
        kind: Literal["changed", "missing", "extra"] = (
            "missing" if new is None else "extra" if old is None else "changed"
        )
        item_type = str((old or new or {}).get("type"))
        differences.append(Difference(call_id, item_type, kind, old_value, new_value,
                                      _short_diff(old_value, new_value)))
    return differences
